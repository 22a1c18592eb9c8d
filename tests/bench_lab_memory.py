"""Measurement (not collected by pytest): resident memory of the lab's Envoy sidecars by connections, rate and mode.

    .venv/bin/python tests/bench_lab_memory.py --out measurements/lab-memory-2026-11-23 [--duration 8]
    .venv/bin/python tests/bench_lab_memory.py --out measurements/lab-memory-2026-11-23 --csv rss-payload-64k.csv \
        --modes sidecar --connections 16,64 --payload 65536
    .venv/bin/python tests/bench_lab_memory.py --refit measurements/lab-memory-2026-11-23

Runs the real lab (``single`` topology; modes sidecar and mtls), one fresh lab per probe, at every rate x
connections, the whole grid twice (the spread), and writes ``rss.csv`` (one row per probe) into ``--out``.
``--refit`` writes ``fitted.yaml``: the memory model fitted (``meshsim.calibrate.load.memory_fit``) to the lab's
rows, and to the Istio 1.7 pipeline's istio-proxy memory with the lab's per-connection, per-request and mTLS terms.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from meshsim.calibrate.load.memory_fit import (MemoryFit, fit_memory, istio17_observations, lab_observations,
                                               setup_noise)
from meshsim.calibrate.measure.lab.rss_under_load import measure, write_rows


def _block(fit: MemoryFit, what: str) -> dict:
    return {"what": what, "rows": fit.rows, "residual_sd_mb": round(fit.residual_sd, 3),
            "fitted": {k: round(v, 4) for k, v in fit.coefficients.items()},
            "std_error": {k: round(v, 4) for k, v in fit.std_errors.items()},
            "fixed": {k: round(v, 4) for k, v in fit.fixed.items()},
            **({"rejected_rows": [f"{o.setup}: {o.resident_mb:.1f} MB" for o in fit.rejected]} if fit.rejected
               else {})}


def fitted(folder: Path) -> dict:
    """Every fit the folder's README reports, from the folder's CSVs and the shipped Istio 1.7 table."""
    lab = lab_observations(folder / "rss.csv")
    lab_fit = fit_memory(lab, ("mtls",))
    out = {"source": "tests/bench_lab_memory.py --refit (meshsim.calibrate.load.memory_fit); MB = MiB (VmRSS kB/1024, "
                     "Istio's Mi); +- one standard error",
           "lab": _block(lab_fit, "rss.csv: both sidecars, under load and idle, modes sidecar and mtls, 0 B bodies"),
           "lab_noise_sd_mb": {k: round(v, 3) for k, v in setup_noise(lab).items()}}
    if (folder / "rss-payload-64k.csv").exists():
        big = lab_observations(folder / "rss-payload-64k.csv")
        out["lab_64k"] = _block(fit_memory(big, ()), "rss-payload-64k.csv: 64 KiB responses, mode sidecar")
    terms = {"per_connection_mb": lab_fit.value("per_connection_mb"),
             "per_in_flight_mb": lab_fit.value("per_in_flight_mb"), "feature:mtls": lab_fit.feature_mb("mtls")}
    istio = istio17_observations()
    out["istio17"] = _block(fit_memory(istio, ("telemetry",), terms, reject_outliers=True),
                            "Istio 1.7 pipeline istio-proxy memory (client and server pods), lab terms fixed, "
                            "rows beyond 3.5 robust SDs left out")
    out["istio17_all_rows"] = _block(fit_memory(istio, ("telemetry",), terms),
                                     "as istio17, every row kept (plain least squares)")
    out["istio17_noise_sd_mb"] = {k: round(v, 3) for k, v in setup_noise(istio).items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--refit", type=Path, help="write fitted.yaml from the CSVs in this folder")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--modes", default="sidecar,mtls")
    ap.add_argument("--rates", default="100,1000")
    ap.add_argument("--connections", default="1,4,16,64")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--payload", type=int, default=0, help="response bytes (fortio echo ?size=)")
    ap.add_argument("--csv", default="rss.csv", help="file name in --out")
    args = ap.parse_args()
    if args.refit:
        (args.refit / "fitted.yaml").write_text(yaml.safe_dump(fitted(args.refit), sort_keys=False, width=110))
        print((args.refit / "fitted.yaml").read_text())
        return
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="meshsim-memory-") as tmp:
        rows = measure(args.modes.split(","), [float(r) for r in args.rates.split(",")],
                       [int(c) for c in args.connections.split(",")], args.repeats, args.duration,
                       Path(tmp) / "runs", Path(tmp) / "labs", args.payload)
    write_rows(rows, args.out / args.csv)
    for r in rows:
        print(f"{r.mode:8} q{r.rps:<6g} c{r.connections:<3} b{r.payload_bytes} #{r.repeat} "
              f"achieved {r.achieved_rps:8.1f} "
              f"in-flight {r.in_flight:6.3f} client {r.client_sidecar_idle_mb:6.1f} -> {r.client_sidecar_mb:6.1f} MB "
              f"server {r.server_sidecar_idle_mb:6.1f} -> {r.server_sidecar_mb:6.1f} MB")


if __name__ == "__main__":
    main()
