"""The held fraction of a pass, recovered by simulation from bursts.

A model with a known ``cpu_fraction`` is simulated under fortio bursts (c = 2, 4, 8 at 200 rps, no -uniform, both
sidecars, 2 workers); the simulated latencies become fortio histograms of run folders; ``fit_held_fraction`` starts
from the same model with any fraction and must find the known one back. The replay uses other seeds than the
synthetic runs, so the recovery is not an identity; the grid's step (0.05 after refinement) bounds the tolerance.
With server-only bursts too, each side's fraction is found (inbound from the server's sidecar alone, outbound from
both given the inbound); where the runs measured CPU the fraction never exceeds the CPU-based one (a worker is held
only while it computes). One-connection runs cannot identify the fraction: the fit finds nothing, and a model
without CPU data takes the lab's measured fraction as a prior (and says so).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from meshsim.calibrate.load.held_fraction import (LAB_PRIOR, apply_held_fraction, apply_prior, burst_runs,
                                                  cpu_bounds, fit_held_fraction, lab_prior)
from meshsim.calibrate.fit_runs import fit_runs
from meshsim.calibrate.load.load_dependence import cpu_fractions
from meshsim.calibrate.measure.dataset import load_runs
from meshsim.calibrate.measure.fortio_histogram import result_json
from meshsim.calibrate.fit.sim_check import calibration_topology
from meshsim.catalog import load_mesh
from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run

# fresh_draws: an autouse fixture
from synthetic_passes import (BASE, GAMMA, INBOUND, N, fresh_draws, sum_of, write_pass_run)  # noqa: F401

PASS = {"family": "gamma", "shape": 4.0, "scale_ms": 0.05, "shift_ms": 0.05, "source": "test truth"}
BASELINE = {"family": "lognormal", "median_ms": 0.15, "sigma": 0.3, "shift_ms": 0.1, "source": "test truth"}
TRUE_FRACTION = 0.7


def truth_model(fraction: float, sides: dict[str, float] | None = None) -> dict:
    proxy = {"kind": "envoy", "placement": "sidecar", "dispatch": "pinned", "connection_balance": "round_robin",
             "workers": 2, "cpu_limit": None, "header_bytes": 0, "per_kb_ms": 0.0, "source": "test truth",
             "cpu_fraction": fraction,
             "passes": {k: PASS for k in ("inbound_request", "inbound_response", "outbound_request",
                                          "outbound_response")}}
    if sides:
        proxy["sides"] = {side: {"cpu_fraction": f} for side, f in sides.items()}
    return {
        "schema": "meshsim/mesh/v1", "name": "truth", "version": "test", "description": "known passes",
        "sources": {"test": "tests/test_held_fraction.py"}, "proxy": proxy,
        "calibration": {"baseline": BASELINE},
    }


def _burst_run(tmp: Path, connections: int, path: str = "both-sidecars", sides: dict[str, float] | None = None
               ) -> Path:
    from meshsim.sim.experiments.predict import predict

    model = truth_model(TRUE_FRACTION, sides)
    model_path = tmp / "truth.yaml"
    model_path.write_text(yaml.safe_dump(model, sort_keys=False))
    scope = {"both-sidecars": "both", "server-sidecar": "server"}[path]
    pred = predict(calibration_topology(model, tmp), model_path, rps=200, load="fortio", connections=connections,
                   scope=scope, warmup_s=0.0, duration_s=20.0, replications=1, processes=1, seed=11,
                   saturation=False).to_dict()
    cdf = pred["latency_cdf_ms"]
    samples = np.interp(np.random.default_rng(connections).uniform(0, 1, 4000), cdf["q"], cdf["ms"]) * 1e-3
    manifest = RunManifest(
        id=f"burst-{path}-c{connections}", source="lab", provenance="simulated by meshsim (truth.yaml), test",
        when="2026-11-23T00:00:00Z", where={"simulator": "meshsim"},
        setup=Setup(mesh="truth", path=path, proxy_workers=2),
        load=LoadSettings(rps=200, connections=connections, duration_s=20.0, resolution_s=1e-5))
    result = result_json(samples, 1e-5, requested_rps=200, connections=connections)
    return write_run(tmp / "runs" / manifest.id, manifest, result)


@pytest.mark.slow
def test_a_known_held_fraction_is_recovered_from_bursts(tmp_path: Path) -> None:
    folders = [_burst_run(tmp_path, c) for c in (2, 4, 8)]
    runs = load_runs(folders).runs
    assert len(burst_runs(runs)) == 3
    [fit] = fit_held_fraction(truth_model(0.2), runs, tmp_path / "work", seed=5)
    assert fit.side == "" and fit.fraction == pytest.approx(TRUE_FRACTION, abs=0.1)
    # the objective is informative: far fractions are clearly worse than the chosen one
    scores = dict(fit.objective)
    assert scores[0.1] > 3 * scores[fit.fraction] and scores[1.0] > scores[fit.fraction]


@pytest.mark.slow
def test_each_sides_fraction_is_recovered_from_server_only_and_both_sidecar_bursts(tmp_path: Path) -> None:
    truth = {"inbound": 0.3, "outbound": 0.8}
    folders = [_burst_run(tmp_path, c, path, truth) for c in (4, 8) for path in ("server-sidecar", "both-sidecars")]
    fits = fit_held_fraction(truth_model(0.5), load_runs(folders).runs, tmp_path / "work", seed=5)
    assert [f.side for f in fits] == ["inbound", "outbound"]
    for fit in fits:
        assert fit.fraction == pytest.approx(truth[fit.side], abs=0.1), fit.source
    model = truth_model(0.5)
    notes: list[str] = []
    apply_held_fraction(model, fits, notes)
    assert {k: v["cpu_fraction"] for k, v in model["proxy"]["sides"].items()} == {f.side: round(f.fraction, 4) for f in fits}
    assert len(notes) == 2 and all("bursts" in n for n in notes)


def test_a_side_never_holds_its_worker_longer_than_its_measured_cpu_allows(tmp_path: Path) -> None:
    """The bursts say 0.7; the runs' CPU per pass says at most 0.4 of the pass computes: the fit stops there."""
    folders = [_burst_run(tmp_path, c) for c in (4, 8)]
    cpu_based = truth_model(0.4, {"inbound": 0.4, "outbound": 0.4})
    fits = fit_held_fraction(cpu_based, load_runs(folders).runs, tmp_path / "work", seed=5,
                             bounds=cpu_bounds(cpu_based))
    assert [f.side for f in fits] == [""]
    assert fits[0].fraction == pytest.approx(0.4) and fits[0].bound == pytest.approx(0.4)
    assert max(f for f, _ in fits[0].objective) <= 0.4 and "CPU-based" in fits[0].source


def test_the_fitted_fraction_replaces_the_cpu_based_one_and_says_so(tmp_path: Path) -> None:
    folders = [_burst_run(tmp_path, c) for c in (2, 4)]
    runs = load_runs(folders).runs
    assert fit_held_fraction(truth_model(0.2), [r for r in runs if r.manifest.load.connections == 1], tmp_path) == []
    model = truth_model(0.9)
    notes: list[str] = []
    fits = fit_held_fraction(model, runs, tmp_path / "work", seed=5, bounds=cpu_bounds(model))
    apply_held_fraction(model, fits, notes)
    assert model["proxy"]["cpu_fraction"] == pytest.approx(fits[0].fraction)
    assert "bursts" in model["proxy"]["source"] and "0.9" in notes[0]


def test_without_bursts_or_cpu_the_lab_prior_is_used_and_said() -> None:
    prior = lab_prior()
    assert 0.0 < prior.fraction <= 1.0 and LAB_PRIOR in prior.source
    model = truth_model(0.5)
    del model["proxy"]["cpu_fraction"]  # one-connection runs without CPU data: nothing of their own
    notes: list[str] = []
    said: list[str] = []
    apply_prior(model, notes, said.append)
    assert model["proxy"]["cpu_fraction"] == pytest.approx(prior.fraction)
    assert "prior" in model["proxy"]["source"] and LAB_PRIOR in model["proxy"]["source"]
    assert notes[0].startswith("used a prior") and "prior" in said[0]


def test_a_cpu_based_estimate_is_kept_over_the_prior() -> None:
    model = truth_model(0.45)
    notes: list[str] = []
    apply_prior(model, notes, lambda _m: None)
    assert model["proxy"]["cpu_fraction"] == 0.45 and "CPU-based" in notes[0]


def test_a_broken_prior_file_names_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from meshsim.calibrate.load import held_fraction
    from meshsim.errors import ModelError

    (tmp_path / "p.yaml").write_text("held_fraction: 1.7\n")
    monkeypatch.setattr(held_fraction, "measurements_dir", lambda: tmp_path)
    with pytest.raises(ModelError, match="p.yaml: held_fraction must be in"):
        lab_prior("p.yaml")


# -- 3. cpu_fraction from measured CPU ---------------------------------------------------------------------------

def test_cpu_fraction_from_cpu_seconds_and_absent_without(tmp_path: Path) -> None:
    cpu_per_request = 0.12e-3  # CPU seconds per request of the server sidecar: below its 2 passes (~0.26 ms)
    for rps in (200.0, 500.0, 1000.0):
        write_pass_run(tmp_path / "with", f"base-{rps:g}", "baseline", rps, sum_of(BASE))
        write_pass_run(tmp_path / "with", f"server-{rps:g}", "server-sidecar", rps, sum_of(BASE, INBOUND, INBOUND),
                       cpu={"server/sidecar": (0.004 + rps * cpu_per_request) * N / rps})
    summary = fit_runs([tmp_path / "with"], "envoy-cpu", tmp_path / "m.yaml", families=GAMMA)
    model = yaml.safe_load((tmp_path / "m.yaml").read_text())
    fitted_pass = summary.decomposition.components["proxy.inbound_pass"].best.distribution.mean
    expected = cpu_per_request / (2 * fitted_pass)
    assert model["proxy"]["cpu_fraction"] == pytest.approx(expected, rel=1e-3)
    assert model["proxy"]["cpu_fraction"] == pytest.approx(cpu_per_request / (2 * INBOUND.mean), rel=0.06)
    assert "cpu_fraction" in model["proxy"]["source"] and "server/sidecar" in model["proxy"]["source"]
    assert load_mesh(str(tmp_path / "m.yaml")).proxy.cpu_fraction == pytest.approx(expected, rel=1e-3)

    write_pass_run(tmp_path / "without", "base", "baseline", 1000.0, sum_of(BASE))
    write_pass_run(tmp_path / "without", "server", "server-sidecar", 1000.0, sum_of(BASE, INBOUND, INBOUND))
    summary = fit_runs([tmp_path / "without"], "envoy-nocpu", tmp_path / "n.yaml", families=GAMMA)
    # no CPU and no bursts: the held fraction is the lab's prior, said as such (not a CPU-based estimate)
    proxy = yaml.safe_load((tmp_path / "n.yaml").read_text())["proxy"]
    assert proxy["cpu_fraction"] == pytest.approx(lab_prior().fraction)
    assert "prior" in proxy["source"] and "server/sidecar" not in proxy["source"]
    assert load_mesh(str(tmp_path / "n.yaml")).proxy.cpu_fraction == 1.0
    assert any("cpu_fraction not written" in n for n in summary.notes)


def test_cpu_fraction_is_capped_at_one_and_skips_non_positive_costs() -> None:
    def comp(mean_s: float):
        return SimpleNamespace(best=SimpleNamespace(distribution=SimpleNamespace(mean=mean_s)))

    decomp = SimpleNamespace(components={"proxy.inbound_pass": comp(0.05e-3), "load_balancer.pass": comp(0.05e-3)})
    entries = [{"component": "server/sidecar", "features": [], "path": "server-sidecar", "cpu_ms_per_request": 0.3,
                "rates": [200.0, 1000.0], "r2": 0.99},
               {"component": "lb:server", "features": [], "path": "proxy-lb", "cpu_ms_per_request": -0.01,
                "rates": [200.0, 1000.0], "r2": 0.1}]
    notes: list[str] = []
    out = cpu_fractions(entries, decomp, notes)
    assert out["proxy"][0] == 1.0
    assert "load_balancer" not in out and any("not positive" in n for n in notes)


# -- a feature's own held fraction --------------------------------------------------------------------------------

FILTER = {"family": "gamma", "shape": 4.0, "scale_ms": 0.05, "source": "test truth"}  # 0.2 ms per pass


def _model_with_filter(sides: dict[str, float], filter_sides: dict[str, float] | None) -> dict:
    model = truth_model(0.5, sides)
    block = {"default": False, "source": "test truth", "per_pass": {k: FILTER for k in model["proxy"]["passes"]}}
    if filter_sides:
        block["sides"] = {side: {"cpu_fraction": f} for side, f in filter_sides.items()}
    return {**model, "features": {"filter": block}}


def _filter_burst_run(tmp: Path, connections: int, path: str, features: tuple[str, ...], truth: dict) -> Path:
    from meshsim.sim.experiments.predict import predict

    model_path = tmp / "truth-filter.yaml"
    model_path.write_text(yaml.safe_dump(truth, sort_keys=False))
    scope = {"both-sidecars": "both", "server-sidecar": "server"}[path]
    pred = predict(calibration_topology(truth, tmp), model_path, rps=200, load="fortio", connections=connections,
                   scope=scope, features=features, warmup_s=0.0, duration_s=20.0, replications=1, processes=1,
                   seed=11, saturation=False).to_dict()
    cdf = pred["latency_cdf_ms"]
    samples = np.interp(np.random.default_rng(connections).uniform(0, 1, 4000), cdf["q"], cdf["ms"]) * 1e-3
    manifest = RunManifest(
        id=f"burst-{path}-{'-'.join(features) or 'plain'}-c{connections}", source="lab",
        provenance="simulated by meshsim (truth-filter.yaml), test", when="2026-11-28T00:00:00Z",
        where={"simulator": "meshsim"}, setup=Setup(mesh="truth", path=path, features=features, proxy_workers=2),
        load=LoadSettings(rps=200, connections=connections, duration_s=20.0, resolution_s=1e-5))
    result = result_json(samples, 1e-5, requested_rps=200, connections=connections)
    return write_run(tmp / "runs" / manifest.id, manifest, result)


@pytest.mark.slow
def test_a_features_own_held_fraction_is_recovered_from_bursts_with_it_on(tmp_path: Path) -> None:
    """A filter whose time holds the worker 0.9 on the server's side and 0.2 on the caller's, on passes that hold
    0.3 and 0.6: the plain bursts give the sides, the bursts with the filter on then give the filter's own (found
    0.86 and 0.275 here; the bound is the grid's refinement plus the replays' other seeds)."""
    from meshsim.calibrate.load.feature_held import apply_feature_fractions, fit_feature_fractions

    sides, truth = {"inbound": 0.3, "outbound": 0.6}, {"inbound": 0.9, "outbound": 0.2}
    model = _model_with_filter(sides, truth)
    folders = [_filter_burst_run(tmp_path, c, path, features, model) for c in (4, 8)
               for path in ("server-sidecar", "both-sidecars") for features in ((), ("filter",))]
    runs = load_runs(folders).runs
    start = _model_with_filter({"inbound": 0.5, "outbound": 0.5}, None)
    side_fits = fit_held_fraction(start, runs, tmp_path / "work", seed=5)
    notes: list[str] = []
    apply_held_fraction(start, side_fits, notes)
    fits = fit_feature_fractions(start, runs, tmp_path / "work", seed=5)
    assert [f.side for f in fits["filter"]] == ["inbound", "outbound"]
    for fit in fits["filter"]:
        assert fit.fraction == pytest.approx(truth[fit.side], abs=0.15), fit.source
        assert "p50 latency" in fit.source and "filter's" in fit.source
    apply_feature_fractions(start, fits, notes)
    assert load_mesh(str(_written(tmp_path, start))).features["filter"].sides == {
        f.side: round(f.fraction, 4) for f in fits["filter"]}


def _written(tmp: Path, model: dict) -> Path:
    path = tmp / "fitted.yaml"
    path.write_text(yaml.safe_dump(model, sort_keys=False))
    return path
