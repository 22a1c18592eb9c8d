"""Calibration: turn fortio measurements into the service-time distributions of a mesh model.

Split by stage, each importing only the stages before it:
``measure`` (fortio I/O, run folders, published tables, the lab, the cluster) -> ``fit`` (families, MLE, goodness
of fit, convolution, decomposition, model files, reports) -> ``load`` (wake-ups, cold wakes, load dependence, CPU
per request) -> ``validation``. The pipelines that chain stages sit here at the root: ``fit_runs`` (run folders ->
model), ``lab_calibration`` and ``kube_calibration`` (measure, then fit), ``published_refit`` (tables -> proposals).
"""
