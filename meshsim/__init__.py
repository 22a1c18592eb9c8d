"""meshsim: predict service-mesh latency, CPU and saturation from calibrated simulation.

The top-level package holds the shared data model (distributions, topologies, mesh models, workloads, run
manifests) and the thin command line; the engine lives in ``meshsim.sim``, calibration in ``meshsim.calibrate``,
the what-if app in ``meshsim.dash_app``.
"""

from pathlib import Path as _Path

__version__ = "0.1.0"

# setup.cfg installs sim/, calibrate/, dash_app/, models/ and measurements/ under meshsim. When this file is
# imported from a source checkout instead (``python -m ...`` run in the repository's root puts the checkout first on
# sys.path), look for those subpackages beside this folder, so that both layouts import alike.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "setup.cfg").is_file() and (_checkout / "sim" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # type: ignore[name-defined]  # noqa: F821
