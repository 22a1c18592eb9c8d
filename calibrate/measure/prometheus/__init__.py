"""Measurements from Prometheus: its HTTP API (``prom_api``), credentials (``prom_credentials``), the mesh families'
metric sets as data (``prom_metric_sets``), ``histogram_quantile`` with its resolution (``prom_histogram``) and what
one time window measured (``prom_window``)."""
