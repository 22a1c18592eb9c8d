"""The lab validation loop for real: calibrate the lab (real fortio, real Envoy, loopback only) on one connection at
two low rates plus one batching probe, the bursts and the load ladder (16 connections up to 9000 rps), measure
held-out runs the calibration never saw (4 connections
at 1000 rps; a 0.1-core, 1-worker proxy driven at 3000 rps past its saturation and its twin without the quota;
chain5 and Bookinfo with their baselines), each twice, validate, and check the errors.

The limits are not fixed numbers: every held-out setup is measured twice in the same run, and how far a repeat moves
(``Validation.repeatability``) is the floor under any model's error on that machine at that hour. A model as good as
the measurement is off by about half a repeat's difference; the limits allow the model's own error floor (seen on a
quiet machine: median p50 4-15 %, Bookinfo and chain5 within 30 %) plus twice the repeatability measured now. So a
busy machine (whose repeats drift apart) widens them, and a real regression (a model off by more than the machine's
own noise can explain) still fails. The saturated 0.1-core worker's throughput swung 712-1504 rps between runs of one
day: a throttled Envoy burns more per request than the same Envoy unthrottled, by an amount that moves with the host
and that the model does not carry, so its rate is judged beside its twin without the quota, measured in the same
rounds. The two sidecars' CPU is read in the same run, so the split between them is checked as a ratio.

That throughput's floor is the widest: the 0.1-core worker's CPU per request is where the model's wake-up costs
matter most. Before the calibration had its load ladder the model under-predicted it by 0-46 % (the sidecars kept
the low rates' CPU per request); with the ladder but the wake-up fitted on idle gaps replayed without the host's
cores it over-predicted it by 15-89 %; with the fit's replays on the host, repeated with each fit's wake-up until
it settles, -1 to +29 % in ten runs of 2026-11-26 (measurements/lab-ladder-2026-11-26); +49 … +101 % in clean-clone
CI runs of 2026-11-29, where the twin showed why: the model's CPU per request 25 % low for the unthrottled proxy, and
throttling adding another 25-30 % (measurements/lab-quota-2026-11-29).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from conftest import require_component

from meshsim.calibrate.lab_plan import LADDER_RATES, LADDER_STAGES
from meshsim.calibrate.load.held_fraction import BURST_CONNECTIONS
from meshsim.calibrate.validation.host_drift import SIDECARS, DriftPair, HostDrift
from meshsim.calibrate.validation.validate import ReportOptions, validate_lab_report
from meshsim.calibrate.validation.lab_loop import SMALL_PLAN
from meshsim.calibrate.validation.text_report import summary_line

pytestmark = pytest.mark.lab

# The model's own error floor on a quiet machine (see the module docstring); the measured repeatability adds to it.
MEDIAN_P50_FLOOR = 0.20
WORST_P50_FLOOR = 0.35  # chain5 and Bookinfo: five hops or a call graph from a baseline measured once per repeat
SATURATED_RPS_FLOOR = 0.40  # see the module docstring: the 0.1-core worker's CPU per request
NOISE_FACTOR = 2.0


@pytest.fixture(scope="module")
def lab_validation(tmp_path_factory: pytest.TempPathFactory):
    require_component("fortio")
    require_component("envoy")
    out = tmp_path_factory.mktemp("lab-validation")
    # the library call behind `meshsim lab validate --plan small --json --html FILE`
    outcome = validate_lab_report(out, "small", report=ReportOptions(html=out / "report.html", as_json=True),
                                  replications=3)
    assert outcome.html is not None and outcome.html.is_file()
    report = json.loads(outcome.text)
    held_setups = sum(len(h.probes) for h in SMALL_PLAN.held_out if h.mode != "baseline")
    assert report["summary"]["p50"]["n"] == held_setups * SMALL_PLAN.repeats
    # every held-out setup was measured twice: the measurement's own spread is reported next to the errors
    assert report["repeatability"]["p50"]["pairs"] >= len(SMALL_PLAN.held_out)
    # the calibration's sidecar setup measured again after the held-out runs: how far the host moved in between
    assert len(report["host_drift"]["pairs"]) == len(SMALL_PLAN.calibration_rates)
    print(summary_line(outcome.validation))  # shown with pytest -rP: the numbers behind the limits below
    print(outcome.lab.drift.line())
    return outcome.lab


def _by(result, role: str):
    return [c for c in result.validation.comparisons if c.role == role]


def test_every_run_is_measured_and_validated(lab_validation) -> None:
    v = lab_validation.validation
    expected_held = sum(len(h.probes) for h in SMALL_PLAN.held_out) * SMALL_PLAN.repeats
    assert len(lab_validation.held_out_runs) == expected_held
    # every stage at every rate with one connection, plus the batching probe (8 connections on one worker), the
    # bursts (c = 2, 4, 8 firing together at the lowest rate) and the load ladder (baseline and both sidecars, c=16,
    # and one more rung per setup whose planned rungs the host did not carry)
    added = [r for r in lab_validation.ladder if r.added]
    assert len(lab_validation.calibration_runs) == len(SMALL_PLAN.calibration_stages) * len(
        SMALL_PLAN.calibration_rates) + 1 + len(BURST_CONNECTIONS) + len(LADDER_STAGES) * len(LADDER_RATES) + len(added)
    assert not v.skipped, v.skipped
    assert len(v.comparisons) == expected_held + len(lab_validation.calibration_runs)
    assert all(Path(c.folder).is_dir() for c in v.comparisons)


def test_roles_fit_topology_and_held_out(lab_validation) -> None:
    fit = _by(lab_validation, "fit")
    # every calibration run, a ladder rung the host did not carry included, is a fit run, never a held-out one
    assert {Path(c.folder) for c in fit} == set(lab_validation.calibration_runs)
    # each repeat's chain5 / bookinfo sidecar run derives its topology from its own repeat's baseline run
    baselines = sum(len(h.probes) for h in SMALL_PLAN.held_out if h.mode == "baseline") * SMALL_PLAN.repeats
    topology = _by(lab_validation, "topology")
    assert len(topology) == baselines
    assert {t.setup for t in topology} == {"chain5 baseline", "bookinfo baseline"}
    held = _by(lab_validation, "held-out")
    assert len(held) == sum(len(h.probes) for h in SMALL_PLAN.held_out) * SMALL_PLAN.repeats - baselines
    summary = lab_validation.validation.summary()
    assert summary["p50"].n == len(held)  # the summary counts held-out runs only


def test_saturated_cpu_limited_proxy_is_marked_and_capped(lab_validation) -> None:
    saturated = [c for c in _by(lab_validation, "held-out") if "cpu0.1" in c.setup]
    assert len(saturated) == SMALL_PLAN.repeats
    for sat in saturated:
        assert sat.status == "saturated"
        assert sat.achieved_rps.measured < 0.95 * sat.rps
        # the fortio model reproduces a throughput cap below the requested rate, and says where it is
        assert sat.achieved_rps.predicted < 0.95 * sat.rps
        assert sat.saturation_rps is not None and sat.saturation_rps < sat.rps


def limits(v, drift) -> dict[str, float]:
    """The limits for this run: each floor plus twice what a repeat of the same setup moved in this run, plus what
    the host's speed moved between the calibration and the held-out runs (the calibration's sidecar setup measured
    again after them): a model carries its calibration's minute (docs/accuracy.md, the lab validation loop)."""
    rep = v.repeatability()
    moved = drift.median_abs("p50")
    return {"median p50": MEDIAN_P50_FLOOR + NOISE_FACTOR * rep["p50"].median_abs + moved,
            "worst p50": WORST_P50_FLOOR + NOISE_FACTOR * rep["p50"].worst_abs + moved,
            # a CPU-limited proxy's quota buys fewer requests when each costs more CPU (docs/accuracy.md, throttled
            # workers): the sidecars' CPU per request moved as the host did, or its p50 where CPU was not read
            "saturated rps": SATURATED_RPS_FLOOR + NOISE_FACTOR * rep["rps"].worst_abs
            + max(moved, drift.median_abs("cpu"))}


def test_held_out_errors_bounded_by_the_repeatability_of_the_same_run(lab_validation) -> None:
    v = lab_validation.validation
    held = _by(lab_validation, "held-out")
    limit = limits(v, lab_validation.drift)
    line = (f"{summary_line(v)}\n{lab_validation.drift.line()}; "
            f"limits {', '.join(f'{k} {x:.0%}' for k, x in limit.items())}")
    assert statistics.median(abs(c.error("p50")) for c in held) <= limit["median p50"], line
    for prefix in ("chain5", "bookinfo"):
        assert max(abs(c.error("p50")) for c in held if c.setup.startswith(prefix)) <= limit["worst p50"], line


# A CPU-limited proxy's saturated rate is its quota over its CPU per request. The model must fill the quota as the
# proxy does, and what a request costs there is the model's CPU per request for the same proxy unthrottled (its twin
# without the quota, measured in the same rounds) times what throttling itself adds, which the model does not carry:
# on 2026-11-29 the 1-worker sidecars burned 0.12 ms per request unthrottled and 0.15 ms under the quota with the
# same sleeps per request, and how much more moves with the host over a day (docs/accuracy.md, throttled workers).
# Both factors are measured in the run; the rate is bounded beyond them, and the twin's CPU per request on its own.
QUOTA_FILL = 0.15  # each limited sidecar's predicted cores within 15 % of its measured (both at the quota)
CPU_PER_REQUEST_FLOOR = 0.35  # the twin's CPU per request: the model's error floor for a setup it never saw


def _ms_per_request(runs, which: str) -> list[float]:
    """Both sidecars' CPU per completed request, ms, measured or predicted, of each run."""
    return [sum(getattr(c.cpu_cores[s], which) for s in SIDECARS) * 1e3 / getattr(c.achieved_rps, which)
            for c in runs]


def test_a_cpu_limited_proxy_carries_what_its_quota_buys(lab_validation) -> None:
    held = _by(lab_validation, "held-out")
    quota = [c for c in held if "cpu0.1" in c.setup]
    twins = [c for c in held if "w1" in c.setup.split() and "cpu" not in c.setup]
    assert len(quota) == len(twins) == SMALL_PLAN.repeats
    for c in quota:  # the quota's mechanism: the model spends it as the kernel enforces it
        for side in SIDECARS:
            assert abs(c.cpu_cores[side].predicted / c.cpu_cores[side].measured - 1) <= QUOTA_FILL, (c.run_id, side)
    twin_measured, twin_predicted = _ms_per_request(twins, "measured"), _ms_per_request(twins, "predicted")
    twin_error = statistics.mean(twin_predicted) / statistics.mean(twin_measured)
    throttling = statistics.mean(_ms_per_request(quota, "measured")) / statistics.mean(twin_measured)
    twin_repeat = (max(twin_measured) - min(twin_measured)) / statistics.mean(twin_measured)
    drift = lab_validation.drift
    rates = ", ".join(f"{1 + c.error('rps'):.2f}" for c in quota)
    line = (f"twin's CPU per request {statistics.mean(twin_measured):.3f} ms measured, x{twin_error:.2f} predicted "
            f"(repeats {twin_repeat:.0%} apart); throttled x{throttling:.2f}; quota runs' rate predicted/measured "
            f"{rates}; {drift.line()}")
    assert abs(twin_error - 1) <= CPU_PER_REQUEST_FLOOR + NOISE_FACTOR * twin_repeat + drift.median_abs("cpu"), line
    allowed = 1 + limits(lab_validation.validation, drift)["saturated rps"]
    explained = throttling / twin_error  # the rate ratio the two measured factors alone give
    for c in quota:
        assert 1 / allowed <= (1 + c.error("rps")) / explained <= allowed, line


# How far the predicted split of CPU between the caller's and the server's sidecar may be from the measured one (a
# ratio of ratios): each side's own CPU (proxy.sides) puts it within about 10 % in the lab; one held fraction for
# both sides had put it at 0.37 (the server's sidecar booked 1.7x, the caller's 0.6x).
CPU_SPLIT_FACTOR = 1.5


def test_each_sidecars_cpu_is_predicted_on_its_own_side(lab_validation) -> None:
    """Both sidecars' CPU is measured in the same run (the same machine, the same minute), so their ratio is a
    steady reading even when the machine's speed drifts; the model must split the CPU as the run did."""
    split = []
    for c in _by(lab_validation, "held-out"):
        cpu = c.cpu_cores
        if c.setup.startswith("single") and {"client/sidecar", "server/sidecar"} <= set(cpu):
            measured = cpu["client/sidecar"].measured / cpu["server/sidecar"].measured
            predicted = cpu["client/sidecar"].predicted / cpu["server/sidecar"].predicted
            split.append((c.run_id, predicted / measured))
    assert split
    assert all(1 / CPU_SPLIT_FACTOR <= ratio <= CPU_SPLIT_FACTOR for _, ratio in split), split


def test_the_limits_follow_the_measured_repeatability() -> None:
    """A noisier run widens each limit by twice its repeat difference, a quiet one keeps the floor."""
    from types import SimpleNamespace

    def validation(p50_median: float, p50_worst: float, rps_worst: float):
        rows = {"p50": SimpleNamespace(median_abs=p50_median, worst_abs=p50_worst),
                "rps": SimpleNamespace(median_abs=0.0, worst_abs=rps_worst)}
        return SimpleNamespace(repeatability=lambda: rows)

    steady = HostDrift((DriftPair("single sidecar", {"p50": 1.0}, {"p50": 1.0}),))
    quiet = limits(validation(0.0, 0.0, 0.0), steady)
    assert quiet == {"median p50": MEDIAN_P50_FLOOR, "worst p50": WORST_P50_FLOOR,
                     "saturated rps": SATURATED_RPS_FLOOR}
    noisy = limits(validation(0.10, 0.30, 0.25), steady)
    assert noisy["median p50"] == pytest.approx(MEDIAN_P50_FLOOR + 0.20)
    assert noisy["worst p50"] == pytest.approx(WORST_P50_FLOOR + 0.60)
    assert noisy["saturated rps"] == pytest.approx(SATURATED_RPS_FLOOR + 0.50)
    # a host 20 % slower at the calibration (p50 1.2 against 0.98 ms: 20 % of their mean) widens every limit by that
    # (a CPU-limited proxy's quota buys fewer requests on the slower host)
    moved = limits(validation(0.0, 0.0, 0.0), HostDrift((DriftPair("single sidecar", {"p50": 1.2}, {"p50": 0.98}),)))
    assert moved["median p50"] == pytest.approx(MEDIAN_P50_FLOOR + 0.22 / 1.09)
    assert moved["worst p50"] == pytest.approx(WORST_P50_FLOOR + 0.22 / 1.09)
    assert moved["saturated rps"] == pytest.approx(SATURATED_RPS_FLOOR + 0.22 / 1.09)
    # the sidecars burning 40 % more per request after the held-out runs (0.3 against 0.2 ms) widen the saturated
    # rate's limit by that change, not by p50's
    dearer = HostDrift((DriftPair("single sidecar", {"p50": 1.0, "cpu": 0.2}, {"p50": 1.0, "cpu": 0.3}),))
    costlier = limits(validation(0.0, 0.0, 0.0), dearer)
    assert costlier["saturated rps"] == pytest.approx(SATURATED_RPS_FLOOR + 0.1 / 0.25)
    assert costlier["median p50"] == MEDIAN_P50_FLOOR
