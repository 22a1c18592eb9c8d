"""The published studies: the seed documents' experiments re-created as meshsim scenarios (``meshsim study``).

A study calibrates only what its document's own protocol allows (its baseline, and its lowest-rate column where a
mesh must be fitted), predicts every other cell and compares it with the published number.
"""
