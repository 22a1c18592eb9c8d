"""`meshsim lab up|probe|down|run`: a local mesh of real fortio apps and Envoy sidecars on 127.0.0.1.

Thin adapter: each handler parses and calls one library function of ``meshsim.calibrate.measure.lab``.
Also ``add_lab_calibrate_options`` / ``lab_plan_of`` for ``meshsim calibrate --lab``.
"""

from __future__ import annotations

import argparse
import math
import json
import sys
from pathlib import Path
from typing import Any

from meshsim.outputs import print_result

LAB_DIR_DEFAULT = Path(".meshsim-lab")
OUT_DEFAULT = Path("measurements") / "lab"


def progress_to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _add_spec_options(parser: argparse.ArgumentParser) -> None:
    from meshsim.calibrate.measure.lab.spec import DEFAULT_MESH, DEFAULT_WORKERS, MODES, TOPOLOGY_HELP, TRACE_BACKENDS

    parser.add_argument("--topology", default="chain3", help=f"{TOPOLOGY_HELP} (default chain3)")
    parser.add_argument("--mode", default="sidecar", choices=MODES,
                        help="baseline: no proxies; server-sidecar: inbound sidecars only; sidecar: both sidecars; "
                             "mtls/tracing: both sidecars plus the feature; proxy-lb/client-lb: need lbN (default sidecar)")
    parser.add_argument("--workers", "--concurrency", type=int, default=DEFAULT_WORKERS, dest="workers",
                        help=f"Envoy worker threads per proxy (default {DEFAULT_WORKERS}, like Istio)")
    parser.add_argument("--cpus", default=None, metavar="LIST", help="pin every proxy with taskset -c LIST (e.g. 1)")
    parser.add_argument("--cpu-limit", type=float, default=None, metavar="CORES",
                        help="CPU quota per proxy in cores via cgroups (CFS period 100 ms)")
    parser.add_argument("--mesh", default=DEFAULT_MESH, help=f"mesh name written into run manifests (default {DEFAULT_MESH})")
    parser.add_argument("--trace-backend", default="collector", choices=TRACE_BACKENDS,
                        help="tracing mode: where the Envoys send their Zipkin spans: the lab's span counter, or a "
                             "Jaeger (tools/install/jaeger.sh) whose query API serves the traces (default collector)")


def _add_probe_options(parser: argparse.ArgumentParser, multi: bool) -> None:
    if multi:
        parser.add_argument("--rps", default="200", help="requests/s; a comma list runs one probe per rate (default 200)")
    else:
        parser.add_argument("--rps", type=float, default=200.0, help="requests/s, 0 = as fast as possible (default 200)")
    parser.add_argument("--connections", "-c", type=int, default=1, help="fortio -c connections (default 1)")
    parser.add_argument("--duration", type=float, default=5.0, metavar="SECONDS", help="fortio -t (default 5)")
    parser.add_argument("--payload", type=int, default=0, metavar="BYTES", help="echo response body size (default 0)")
    parser.add_argument("--leaf-delay", type=float, default=0.0, metavar="MS",
                        help="time each leaf app (fortio echo) waits per request, its `delay` (default 0)")
    parser.add_argument("--uniform", action="store_true", help="fortio -uniform (stagger connection starts)")
    parser.add_argument("--jitter", action="store_true", help="fortio -jitter (+-10%% on each sleep)")
    parser.add_argument("--nocatchup", action="store_true", help="fortio -nocatchup (skip late requests)")
    parser.add_argument("--max-errors", type=float, default=0.001, metavar="FRACTION",
                        help="fail the probe above this fraction of non-2xx/socket errors (default 0.001)")
    parser.add_argument("--out", type=Path, default=OUT_DEFAULT, help=f"folder for run folders (default {OUT_DEFAULT})")


def _state_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, default=LAB_DIR_DEFAULT,
                        help=f"lab folder holding `lab up`'s state.json, configs and logs (default "
                             f"{LAB_DIR_DEFAULT}/); what a killed lab command left is stopped by the next one, "
                             f"whatever its folder")


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    lab = subparsers.add_parser(
        "lab", help="run a local mesh of real fortio and Envoy processes on 127.0.0.1 and measure it",
        description="A local lab: fortio echo/forwarding apps, Envoy sidecars or a central Envoy load balancer, "
                    "all on 127.0.0.1, measured with real fortio load. `lab up` leaves a supervisor running until "
                    "`lab down`; `lab run` does up -> probe -> down in one go.",
    )
    sub = lab.add_subparsers(dest="lab_command", metavar="{up,probe,down,run,validate}", required=True)

    up = sub.add_parser("up", help="start a lab in the background (supervisor holds the processes)")
    _add_spec_options(up)
    _state_dir_option(up)
    up.set_defaults(handler=handle_up)

    probe = sub.add_parser("probe", help="load the running lab with fortio and store one run folder")
    _add_probe_options(probe, multi=False)
    _state_dir_option(probe)
    probe.add_argument("--json", action="store_true", help="print one JSON object (folder, p50/p90/p99)")
    probe.set_defaults(handler=handle_probe)

    down = sub.add_parser("down", help="stop every lab process (by pid) and check none is left")
    _state_dir_option(down)
    down.set_defaults(handler=handle_down)

    run = sub.add_parser("run", help="up -> probe(s) -> down; prints the run folders")
    _add_spec_options(run)
    _add_probe_options(run, multi=True)
    run.add_argument("--json", action="store_true", help="print one JSON object: run folders and their p50/p90/p99")
    _state_dir_option(run)
    run.set_defaults(handler=handle_run)

    from meshsim.cli.validate_command import register_lab  # calibrate on the lab, measure held-out runs, validate

    register_lab(sub)


def _settings(args: argparse.Namespace, rps: float) -> Any:
    from meshsim.calibrate.measure.lab.probe import ProbeSettings

    return ProbeSettings(rps=rps, connections=args.connections, duration_s=args.duration, payload_bytes=args.payload,
                         uniform=args.uniform, jitter=args.jitter, nocatchup=args.nocatchup,
                         max_error_fraction=args.max_errors, leaf_delay_ms=args.leaf_delay)


def _spec(args: argparse.Namespace) -> Any:
    from meshsim.calibrate.measure.lab.spec import LabSpec

    return LabSpec(topology=args.topology, mode=args.mode, workers=args.workers, cpus=args.cpus,
                   cpu_limit=args.cpu_limit, mesh=args.mesh, trace_backend=args.trace_backend)


def handle_up(args: argparse.Namespace) -> int:
    from meshsim.calibrate.measure.lab.commands import lab_up
    from meshsim.calibrate.measure.lab.scrape_config import PROMETHEUS_CONFIG

    state = lab_up(_spec(args), args.state_dir)
    print_result(f"lab up: {state.spec.topology} {state.spec.mode}, entry {state.entry_url}, "
                 f"{len(state.processes)} processes, supervisor pid {state.daemon_pid}, "
                 f"state {args.state_dir}/state.json"
                 + (f", traces at http://127.0.0.1:{state.trace_query_port}/api/traces" if state.trace_query_port else "")
                 + f"\nlab up: Prometheus configuration {args.state_dir}/{PROMETHEUS_CONFIG} (its Envoys' "
                   f"/stats/prometheus and the processes' CPU and memory on 127.0.0.1:{state.exporter_port}): "
                   f"prometheus --config.file {args.state_dir}/{PROMETHEUS_CONFIG}")
    return 0


def handle_probe(args: argparse.Namespace) -> int:
    from meshsim.calibrate.measure.lab.commands import lab_probe

    result = lab_probe(_settings(args, args.rps), args.state_dir, args.out)
    print_result(json.dumps(result.summary()) if args.json else str(result.folder))
    return 0


def handle_down(args: argparse.Namespace) -> int:
    from meshsim.calibrate.measure.lab.commands import lab_down

    stopped = lab_down(args.state_dir)
    print_result(f"lab down: stopped {len(stopped)} processes, none left running" if stopped
                 else f"lab down: no lab in {args.state_dir}; nothing to stop")
    return 0


def _rates(text: str, flag: str = "--rps") -> list[float]:
    from meshsim.errors import MeshsimError

    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise MeshsimError(f"{flag}: expected a number or a comma list like 200,1000, got {text!r}") from None
    if not rates:
        raise MeshsimError(f"{flag}: empty")
    bad = [r for r in rates if not (math.isfinite(r) and r > 0)]
    if bad:
        raise MeshsimError(f"{flag}: every rate must be a finite number > 0, got {bad[0]:g}")
    return rates


def handle_run(args: argparse.Namespace) -> int:
    from meshsim.calibrate.measure.lab.commands import lab_run

    results = lab_run(_spec(args), [_settings(args, q) for q in _rates(args.rps)], args.out, progress=progress_to_stderr,
                      state_dir=args.state_dir)
    print_result(json.dumps({"runs": [r.summary() for r in results]}) if args.json
                 else "\n".join(str(result.folder) for result in results))
    return 0


# the lab's fields as `meshsim calibrate --lab` spells them (lab run says --duration, calibrate --lab-duration)
LAB_CALIBRATE_FLAGS = {"duration_s": "--lab-duration", "rates": "--lab-rates", "rps": "--lab-rates",
                       "payloads": "--lab-payloads", "payload_bytes": "--lab-payloads", "workers": "--lab-workers",
                       "out": "--lab-out", "state_dir": "--lab-state-dir"}


def add_lab_calibrate_options(parser: argparse.ArgumentParser) -> None:
    """Options of `meshsim calibrate --lab` (all prefixed --lab-)."""
    from meshsim.calibrate.lab_plan import LADDER_RATES
    from meshsim.calibrate.measure.lab.spec import DEFAULT_DURATION_S, DEFAULT_PAYLOADS, DEFAULT_RATES

    group = parser.add_argument_group("lab calibration (--lab)")
    group.add_argument("--lab-rates", default=",".join(f"{r:g}" for r in DEFAULT_RATES),
                       help="rps of the probes, comma list (default %(default)s)")
    group.add_argument("--lab-payloads", default=",".join(str(b) for b in DEFAULT_PAYLOADS),
                       help="echo body sizes in bytes, comma list (default %(default)s)")
    group.add_argument("--lab-duration", type=float, default=DEFAULT_DURATION_S, metavar="SECONDS",
                       help="seconds per probe (default %(default)s)")
    group.add_argument("--lab-workers", type=int, default=2, help="Envoy workers per proxy (default 2)")
    group.add_argument("--lab-out", type=Path, default=OUT_DEFAULT, help=f"run folders go here (default {OUT_DEFAULT})")
    group.add_argument("--lab-state-dir", type=Path, default=LAB_DIR_DEFAULT,
                       help=f"the lab's state folder, named in the record of its processes while it runs (the next "
                            f"lab command stops what a killed calibration left, whatever its folder; default "
                            f"{LAB_DIR_DEFAULT}/)")
    group.add_argument("--lab-no-batching-probe", action="store_true",
                       help="skip the run with eight connections on one worker that separates what a pass costs a "
                            "busy worker from the cost of waking an idle one")
    group.add_argument("--lab-no-burst-probes", action="store_true",
                       help="skip the runs with 2, 4 and 8 connections firing together at the lowest rate that show "
                            "what part of a proxy pass holds its worker")
    group.add_argument("--lab-no-load-ladder", action="store_true",
                       help="skip the baseline and both-sidecar runs with 16 connections at rising rates that show "
                            "how a worker's CPU per request falls with load, and tracing's and mTLS's run at the "
                            "lowest rung that splits their CPU per wake from their CPU per pass")
    group.add_argument("--lab-ladder-rates", default=",".join(f"{r:g}" for r in LADDER_RATES),
                       help="rps of the load ladder's rungs, comma list (default %(default)s); a rung the host does "
                            "not carry is kept as a measured capacity and adds one rung at 80%% of what it carried")


def lab_plan_of(args: argparse.Namespace, mesh: str, model_out: Path) -> Any:
    """The LabPlan (meshsim/calibrate/lab_plan.py) the options above describe."""
    from meshsim.calibrate.lab_plan import LabPlan
    from meshsim.errors import MeshsimError

    try:
        payloads = [int(p) for p in args.lab_payloads.split(",") if p.strip()]
    except ValueError:
        raise MeshsimError(f"--lab-payloads: expected a comma list of byte counts, got {args.lab_payloads!r}") from None
    return LabPlan(mesh, args.lab_out, model_out, rates=_rates(args.lab_rates, "--lab-rates"), payloads=payloads,
                   duration_s=args.lab_duration, workers=args.lab_workers,
                   batching_probe=not args.lab_no_batching_probe, burst_probes=not args.lab_no_burst_probes,
                   load_ladder=not args.lab_no_load_ladder,
                   ladder_rates=_rates(args.lab_ladder_rates, "--lab-ladder-rates"),
                   state_dir=args.lab_state_dir, resume=bool(getattr(args, "resume", False)))
