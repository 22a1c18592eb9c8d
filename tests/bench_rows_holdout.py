"""Accuracy check (not collected by pytest): how well ``meshsim fit --rows`` predicts a rate it did not see.

    .venv/bin/python tests/bench_rows_holdout.py [--rates 500,2000] [--evaluations 240]

For each rate R of the shipped Istio 1.7 summary rows: the model is fitted again from every row but those at R
(the same settings as the shipped istio-1.7 model, measurements/README.md), then the rows at R are simulated and
printed measured / predicted (p50, p99, each sidecar's CPU) with the relative error, and the median |p50 error|
over all held-out rows at the end. About five minutes per rate on two idle cores.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
from pathlib import Path

from meshsim.calibrate.fit.row_simulation import RowSettings, RowSimulator
from meshsim.calibrate.measure.summary_rows import read_rows
from meshsim.calibrate.measure.tables import measurements_dir
from meshsim.calibrate.summary_fit import fit_summary_rows

ROWS = [measurements_dir() / "istio-1.7" / "telemetry-lowrate.csv", measurements_dir() / "istio-1.7" / "telemetry-ladder.csv"]
SETTINGS = RowSettings(jitter=True, fortio_warmup="sequential")


def rows_without(rate: float, folder: Path) -> Path:
    """The shipped rows without those at ``rate``, as one CSV."""
    kept: list[dict[str, str]] = []
    fields: list[str] = []
    for path in ROWS:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            fields = list(reader.fieldnames or [])
            kept += [row for row in reader if f"_qps_{rate:g}_" not in row["Labels"]]
    out = folder / f"rows-without-{rate:g}.csv"
    with out.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept)
    return out


def held_out(rate: float, evaluations: int, folder: Path) -> list[float]:
    """Fit without ``rate``, print its rows measured / predicted; the p50 errors."""
    fit = fit_summary_rows([rows_without(rate, folder)], "istio-1.7-holdout", None, SETTINGS,
                           reference_mode="none_mtls_both", balances=("shared_listener",), evaluations=evaluations)
    simulator = RowSimulator(SETTINGS)
    errors = []
    try:
        rows, _ = read_rows(ROWS)
        for row in (r for r in rows if r.rps == rate):
            sim = simulator.simulate(fit.model, row)
            p50 = sim.quantiles_s[0] / row.quantiles_s[0.5] - 1
            p99 = sim.quantiles_s[2] / row.quantiles_s[0.99] - 1
            errors.append(p50)
            cpu = " ".join(f"{k} {v * 1e3:.0f}/{sim.cpu_cores.get(k, 0.0) * 1e3:.0f} mc" for k, v in row.cpu_cores.items()
                           if row.path != "baseline")
            print(f"{row.mode:28} {rate:>6g} rps  p50 {row.quantiles_s[0.5] * 1e3:.3f}/{sim.quantiles_s[0] * 1e3:.3f} ms "
                  f"({p50:+.1%})  p99 {row.quantiles_s[0.99] * 1e3:.3f}/{sim.quantiles_s[2] * 1e3:.3f} ms ({p99:+.1%})  "
                  f"{cpu}", flush=True)
    finally:
        simulator.close()
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="500,2000", help="rates to hold out, one at a time (comma list)")
    parser.add_argument("--evaluations", type=int, default=240, help="simulations per stage's search")
    args = parser.parse_args()
    errors: list[float] = []
    with tempfile.TemporaryDirectory(prefix="meshsim-holdout-") as folder:
        for rate in (float(r) for r in args.rates.split(",")):
            errors += held_out(rate, args.evaluations, Path(folder))
    print(f"median |p50 error| over {len(errors)} held-out rows: {statistics.median(abs(e) for e in errors):.1%}")


if __name__ == "__main__":
    main()
