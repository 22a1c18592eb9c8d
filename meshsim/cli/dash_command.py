"""`meshsim dash`: serve the what-if app (a thin adapter over meshsim.dash_app.serve)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "dash", help="serve the what-if app in a browser",
        description="Interactive what-if app: latency, CPU and saturation of a call chain behind one or more "
                    "meshes, with measured runs overlaid. Binds 127.0.0.1 by default; debug is off.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8050, help="TCP port (default 8050)")
    parser.add_argument("--measurements", type=Path, default=None, metavar="DIR",
                        help="extra folder of run folders (manifest.yaml + fortio.json) to overlay")
    parser.set_defaults(handler=handle, prints_result=False)  # its lines go to stderr


def handle(args: argparse.Namespace) -> int:
    from meshsim.dash_app import serve

    serve(args.host, args.port, args.measurements)
    return 0
