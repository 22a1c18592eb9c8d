"""Measurement: fortio results and access logs, run folders, published tables, the local lab and the cluster.

Nothing here fits or simulates; ``fit``, ``load`` and ``validation`` read what this stage stores.
"""
