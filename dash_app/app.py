"""The app factory and the server entry point of ``meshsim dash``.

All state (the prediction cache, the measured runs) lives in objects made here and captured by the callbacks;
nothing is kept at module level, so two apps in one process (as in the tests) do not share anything.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from dash import Dash

from meshsim.errors import FieldError, MeshsimError

from .callbacks import Callbacks, register
from .capacity_view import CapacityFinder, CapacityView
from .layout import build_layout
from .measured import default_dirs, load_measurements
from .what_if import MeshFeatures
from .sweep import PointSettings, Predictor, Sweeper, TopologyParser


def create_app(
    measurements_dirs: Iterable[Path] = (),
    *,
    include_shipped: bool = True,
    settings: PointSettings | None = None,
    predictor: Predictor | None = None,
    parse_topology: TopologyParser | None = None,
    topologies: Sequence[str] | None = None,
    meshes: Sequence[str] | None = None,
    budget_s: float = 1.2,
    capacity_finder: CapacityFinder | None = None,
) -> Dash:
    """Build the what-if app over ``meshsim.sim.experiments.predict.predict_options`` and the built-in model catalog.

    ``measurements_dirs`` are searched for run folders (and validation JSON) in addition to the measurements
    shipped with the package (unless ``include_shipped`` is false).
    """
    from meshsim.catalog import list_meshes, list_topologies, load_mesh
    from meshsim.sim.experiments.capacity_search import find_capacity
    from meshsim.sim.experiments.predict import predict_options
    from meshsim.topology import load_topology_text

    dirs = (default_dirs() if include_shipped else []) + [Path(d) for d in measurements_dirs]
    mesh_names = list(meshes if meshes is not None else list_meshes())
    features = MeshFeatures.from_models({m: load_mesh(m) for m in mesh_names})
    callbacks = Callbacks(
        sweeper=Sweeper(predictor=predictor or predict_options, parse_topology=parse_topology or load_topology_text,
                        settings=settings or PointSettings(), features=features),
        measured=load_measurements(dirs),
        topologies=list(topologies if topologies is not None else list_topologies()),
        meshes=mesh_names,
        budget_s=budget_s,
        capacity=CapacityView(capacity_finder or find_capacity, features),
    )
    app = Dash(__name__, title="meshsim what-if", update_title=None, serve_locally=True)
    # A function, so each page load gets its own client id (see Sweeper.advance).
    app.layout = lambda: build_layout(callbacks.topologies, callbacks.meshes, features, callbacks.measured)
    register(app, callbacks)
    return app


def serve(host: str = "127.0.0.1", port: int = 8050, measurements_dir: Path | None = None,
          echo: Callable[[str], Any] | None = None) -> None:
    """Run the app until Ctrl-C (Flask's threaded server, debug off: callbacks run in parallel threads)."""
    echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    if measurements_dir is not None and not Path(measurements_dir).is_dir():
        raise FieldError("measurements", f"{measurements_dir} is not a folder")
    if not 0 < port < 65536:
        raise FieldError("port", f"{port} is not a TCP port (1-65535)")
    _check_listen(host, port)
    app = create_app([measurements_dir] if measurements_dir else [])
    from meshsim.sim.engine_choice import load_compiled_engine

    # loaded before the first page asks for a point (under 0.1 s from the native module; a first build takes
    # minutes and says so)
    load_compiled_engine(echo)
    echo(f"meshsim dash: http://{host}:{port}/ (Ctrl-C stops)")
    app.run(host=host, port=port, debug=False, threaded=True, dev_tools_disable_version_check=True)


def _check_listen(host: str, port: int) -> None:
    """Fail with one line naming the flag, before werkzeug would print its own message and exit."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FieldError("host", f"cannot resolve {host!r} ({exc.strerror})") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug does
        try:
            probe.bind(address)
        except OSError as exc:
            raise FieldError("port", f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
