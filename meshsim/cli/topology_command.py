"""``meshsim topology from-traces``: parse, call :func:`meshsim.calibrate.trace_topology.derive_topology`, write."""

from __future__ import annotations

import argparse
from pathlib import Path

from meshsim.cli.prometheus_flags import add_window_flags
from meshsim.errors import MeshsimError
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
    t.add_argument("--cpu-ms", metavar="SERVICE=MS,...", help="CPU per call of named services, in ms (traces cannot "
                   "tell a service's CPU from its waiting: without it, its own time is booked as CPU)")
    g = t.add_argument_group("CPU from Prometheus (--cpu-from-prometheus URL): each service's app containers' CPU "
                             "over the traces' time span, per call the traces saw")
    g.add_argument("--cpu-from-prometheus", metavar="URL", help="Prometheus server; credentials only from "
                   "MESHSIM_PROMETHEUS_TOKEN (or _USERNAME and _PASSWORD) or --prometheus-credentials")
    add_window_flags(g, "the window to read (default: the traces' first start to last end)",
                     "default: the traces' last end")
    t.set_defaults(handler=run)


def _cpu_source(args: argparse.Namespace) -> object | None:
    from meshsim.calibrate.trace_cpu import PrometheusCpu, cpu_from_flag

    if args.cpu_ms is not None and args.cpu_from_prometheus:
        raise MeshsimError("--cpu-ms and --cpu-from-prometheus: give one of them")
    if args.cpu_from_prometheus:
        return PrometheusCpu(args.cpu_from_prometheus, args.metrics, args.window, args.end,
                             args.prometheus_credentials, args.prometheus_ca)
    given = {"--window": args.window, "--end": args.end, "--prometheus-credentials": args.prometheus_credentials,
             "--prometheus-ca": args.prometheus_ca}
    flag = next((f for f, v in given.items() if v is not None), None)
    if flag:
        raise MeshsimError(f"{flag}: only with --cpu-from-prometheus URL")
    return cpu_from_flag(args.cpu_ms) if args.cpu_ms is not None else None


def run(args: argparse.Namespace) -> int:
    from meshsim.calibrate.trace_topology import derive_topology, write_topology

    check_file(args.out, "out")
    cpu = _cpu_source(args)  # bad flags fail before the traces are read
    derived = derive_topology(args.files, args.name or Path(args.out).stem, cpu=cpu)
    written = write_topology(derived, args.out)
    print_result(f"{derived.summary()}\nwrote {written}")
    return 0
