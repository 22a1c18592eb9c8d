"""meshsim: predict service-mesh latency, CPU and saturation from calibrated simulation.

The top-level package holds the shared data model (distributions, topologies, mesh
models, workloads, run manifests) and the thin command line; the engine lives in
``meshsim.sim``, calibration in ``meshsim.calibrate``, the what-if app in
``meshsim.dash_app``.
"""

__version__ = "0.1.0"
