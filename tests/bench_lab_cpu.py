"""Measurement (not collected by pytest): CPU per call of fortio client, fortio server, each Envoy and the kernel.

    .venv/bin/python tests/bench_lab_cpu.py --out measurements/lab-cpu-per-call-2026-11-23 [--duration 3]
    .venv/bin/python tests/bench_lab_cpu.py --refit measurements/lab-cpu-per-call-2026-11-23

Runs the real lab (``single`` topology, baseline and sidecar modes) at every rate x connections x payload, each setup
twice, and writes ``cpu.csv`` (one row per probe) and ``fitted.yaml`` (least-squares per-call costs with standard
errors) into ``--out``. ``--refit`` recomputes ``fitted.yaml`` from an existing ``cpu.csv``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from meshsim.calibrate.measure.lab.cpu_per_call import (CpuRow, fit_kernel, fit_process, measure, read_rows,
                                                        write_rows)

PROCESSES = {"client_app_s": "fortio client (load generator)", "server_app_s": "fortio server (echo)",
             "client_sidecar_s": "client's Envoy sidecar", "server_sidecar_s": "server's Envoy sidecar"}


def fitted(rows: list[CpuRow]) -> dict:
    out: dict = {"source": "least squares over cpu.csv (tests/bench_lab_cpu.py); +- one standard error", "processes": {}}
    for column, label in PROCESSES.items():
        f = fit_process(rows, column)
        out["processes"][column[:-2]] = {
            "what": label, "probes": f.rows,
            **{name[:-2] + "_ms": round(f.get(name)[0] * 1e3, 5) for name in f.names},
            **{name[:-2] + "_ms_se": round(f.get(name)[1] * 1e3, 5) for name in f.names}}
    k = fit_kernel(rows)
    rest = fit_kernel(rows, "rest_s")
    out["host_rest"] = {"what": "host busy minus every process: not identified on a saturated shared host",
                        **{name[:-2] + "_ms": round(rest.get(name)[0] * 1e3, 5) for name in rest.names}}
    out["kernel"] = {"what": "host irq + softirq time (/proc/stat; kernel network receive work outside processes) "
                             "per one-way hop and per KB carried over a hop; per_window: the background (other users)",
                     "probes": k.rows,
                     **{name[:-2] + "_ms": round(k.get(name)[0] * 1e3, 5) for name in k.names},
                     **{name[:-2] + "_ms_se": round(k.get(name)[1] * 1e3, 5) for name in k.names}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--refit", type=Path)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--modes", default="baseline,sidecar")
    ap.add_argument("--rates", default="500,2000")
    ap.add_argument("--connections", default="1,8")
    ap.add_argument("--payloads", default="1024,16384")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    folder = args.refit or args.out
    folder.mkdir(parents=True, exist_ok=True)
    if args.refit:
        rows = read_rows(folder / "cpu.csv")
    else:
        with tempfile.TemporaryDirectory(prefix="meshsim-cpu-") as tmp:
            rows = measure(args.modes.split(","), [float(r) for r in args.rates.split(",")],
                           [int(c) for c in args.connections.split(",")],
                           [int(p) for p in args.payloads.split(",")], args.repeats, args.duration,
                           Path(tmp) / "runs", Path(tmp) / "lab")
        write_rows(rows, folder / "cpu.csv")
    (folder / "fitted.yaml").write_text(yaml.safe_dump(fitted(rows), sort_keys=False), encoding="utf-8")
    print((folder / "fitted.yaml").read_text())


if __name__ == "__main__":
    main()
