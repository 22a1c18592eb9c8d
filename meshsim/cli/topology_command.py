"""``meshsim topology from-traces``: parse, call :func:`meshsim.calibrate.trace_topology.derive_topology`, write."""

from __future__ import annotations

import argparse
from pathlib import Path

from meshsim.outputs import check_file, print_result


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("topology", help="derive a topology from distributed traces",
                       description="Derive a topology file from traces.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    actions.required = True
    t = actions.add_parser("from-traces", help="OTLP JSON, Jaeger JSON or Zipkin v2 JSON exports to a topology",
                           description="Read trace exports (format found from the content), build the call graph, "
                                       "fit each service's own time and write a meshsim/topology/v1 file whose every "
                                       "number names the traces it came from. Sidecar spans count as proxy passes.")
    t.add_argument("files", nargs="+", metavar="FILE", help="trace export files")
    t.add_argument("--out", required=True, help="topology file to write, e.g. topo.yaml")
    t.add_argument("--name", help="the topology's name (default: the --out file's stem)")
    t.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from meshsim.calibrate.trace_topology import derive_topology, write_topology

    check_file(args.out, "out")
    derived = derive_topology(args.files, args.name or Path(args.out).stem)
    written = write_topology(derived, args.out)
    print_result(f"{derived.summary()}\nwrote {written}")
    return 0
