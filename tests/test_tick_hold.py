"""A thread that keeps its core till the scheduler's next tick (meshsim/tick_hold.py): the exact timeline on a node's
cores, both engines alike, what it moves in a loaded run (the tail, where the cores are busy) and what it does not
(an idle host), the model file's block and the lab fit that chooses its share."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from meshsim.calibrate.measure.fortio_histogram import result_json
from meshsim.distributions import Deterministic
from meshsim.errors import ModelError
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine.stations import NodeCores
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run
from meshsim.tick_hold import TickHold, parse_tick_hold
from meshsim.workload import OpenLoad, Workload
from meshsim.yamlio import Section
from simkit import plain, tandem_topology

MS = 1e-3


def test_every_second_burst_that_finds_the_core_taken_waits_for_the_next_tick() -> None:
    cores = NodeCores(1, tick_hold=TickHold(4 * MS, 0.5))
    assert cores.run(0.0, 1 * MS) == pytest.approx(1 * MS)  # an idle core: at once, nothing owed
    assert cores.run(0.5 * MS, 1 * MS) == pytest.approx(2 * MS)  # taken: owes 0.5, queues behind the first
    assert cores.run(0.6 * MS, 1 * MS) == pytest.approx(5 * MS)  # owes 1: waits for the tick at 4 ms, then runs
    assert cores.run(0.7 * MS, 1 * MS) == pytest.approx(3 * MS)  # owes 0.5 again: the gap 2..4 ms is free
    assert cores.run(6.0 * MS, 1 * MS) == pytest.approx(7 * MS)  # idle again: at once
    assert cores.owed == pytest.approx(0.5)


def test_a_burst_on_a_tick_waits_for_the_next_one_and_share_zero_is_no_hold() -> None:
    hold = TickHold(4 * MS, 0.25)
    assert hold.next_tick(4 * MS) == pytest.approx(8 * MS) and hold.next_tick(3.9 * MS) == pytest.approx(4 * MS)
    none, zero = NodeCores(1), NodeCores(1, tick_hold=TickHold(4 * MS, 0.0))
    for t in (0.0, 0.1, 0.2, 0.3, 0.35):
        assert none.run(t * MS, 1 * MS) == zero.run(t * MS, 1 * MS)


def _lab(share: float, cores: float = 2.0):
    tandem = tandem_topology([Deterministic(0.3e-3), Deterministic(0.2e-3), Deterministic(0.25e-3)])
    spare = replace(tandem, services={n: replace(s, cores=8) for n, s in tandem.services.items()})
    return plain(spare.on_one_host(cores, tick_hold=TickHold(4 * MS, share) if share else None))


def test_both_engines_give_the_same_timeline_with_tick_holds() -> None:
    workload, horizon = Workload(OpenLoad(2000.0, connections=16)), Horizon(1.0, 0.1, 0.5)
    simpy = run_replication(_lab(0.01), workload, horizon, 5, 0)
    fast = run_fast_replication(_lab(0.01), workload, horizon, 5, 0)
    assert fast.latencies.size == simpy.latencies.size > 1000
    np.testing.assert_allclose(fast.latencies, simpy.latencies, rtol=0, atol=1e-9)
    plain_run = run_fast_replication(_lab(0.0), workload, horizon, 5, 0)
    assert not np.array_equal(plain_run.latencies, fast.latencies)  # the holds moved something


def test_holds_lift_the_tail_of_a_loaded_host_and_leave_an_idle_one_alone() -> None:
    horizon = Horizon(2.0, 0.2, 0.5)
    loaded = Workload(OpenLoad(800.0, connections=32))  # 0.75 ms of CPU per request on 2 cores: 30 % busy
    without, held = (run_fast_replication(_lab(s), loaded, horizon, 3, 0).latencies for s in (0.0, 0.1))
    p50 = np.quantile(held, 0.5) / np.quantile(without, 0.5)
    p99 = np.quantile(held, 0.99) / np.quantile(without, 0.99)
    assert p99 > 1.5 and p50 == pytest.approx(1.0, abs=0.02)  # waits of up to a tick for a few: a tail, no body
    idle = Workload(OpenLoad(20.0, connections=1))  # one request at a time: no burst ever finds the cores taken
    a, b = (run_fast_replication(_lab(s), idle, horizon, 3, 0).latencies for s in (0.0, 0.5))
    np.testing.assert_array_equal(a, b)


def test_the_model_files_block_is_checked_with_one_line_errors() -> None:
    hold = parse_tick_hold(Section({"tick_ms": 4, "share": 0.001, "source": "fitted"}, "cluster.tick_hold"))
    assert hold == TickHold(4 * MS, 0.001, "fitted")
    for block, words in (({"share": 0.001}, "cluster.tick_hold.tick_ms: missing"),
                         ({"tick_ms": 4, "share": 0.9}, "cluster.tick_hold.share"),
                         ({"tick_ms": 0, "share": 0.1}, "cluster.tick_hold.tick_ms"),
                         ({"tick_ms": 4, "share": 0.1, "hz": 250}, "hz")):
        with pytest.raises(ModelError, match=words.replace(".", r"\.")):
            parse_tick_hold(Section(block, "cluster.tick_hold"))


ASSUMED = 4.0  # ms: the tick a fit assumes when the runs recorded none (CONFIG_HZ=250)


def _lab_run(tmp: Path, model: dict, connections: int, rps: int, share: float) -> Path:
    """A lab run (2 cores shared by every process) simulated with the true share, written as a run folder."""
    from meshsim.calibrate.fit.sim_check import calibration_topology
    from meshsim.catalog import load_topology
    from meshsim.sim.experiments.predict import predict

    model_path = tmp / "truth.yaml"
    model_path.write_text(yaml.safe_dump(model, sort_keys=False))
    host = load_topology(str(calibration_topology(model, tmp))).on_one_host(2.0, tick_hold=TickHold(4 * MS, share))
    pred = predict(host, model_path, rps=rps, load="fortio", connections=connections, scope="both", warmup_s=0.0,
                   duration_s=20.0, replications=1, processes=1, seed=11, saturation=False).to_dict()
    cdf = pred["latency_cdf_ms"]
    samples = np.interp(np.random.default_rng(connections).uniform(0, 1, 20000), cdf["q"], cdf["ms"]) * 1e-3
    manifest = RunManifest(
        id=f"lab-c{connections}-q{rps}", source="lab", provenance="simulated by meshsim (truth.yaml), test",
        when="2026-11-28T00:00:00Z", where={"simulator": "meshsim", "cpus": 2},
        setup=Setup(mesh="truth", path="both-sidecars", proxy_workers=2),
        load=LoadSettings(rps=rps, connections=connections, duration_s=20.0, resolution_s=1e-5))
    result = result_json(samples, 1e-5, requested_rps=rps, connections=connections)
    return write_run(tmp / "runs" / manifest.id, manifest, result)


@pytest.mark.slow
@pytest.mark.parametrize("true_share", [0.008, 0.05], ids=["in-the-ladder", "above-its-top"])
def test_a_known_share_is_recovered_from_loaded_lab_runs(tmp_path: Path, true_share: float) -> None:
    """Inside the candidates' ladder, and above its top (0.016), where the fit doubles on upward."""
    from test_held_fraction import truth_model

    from meshsim.calibrate.load.tick_hold_fit import ASSUMED_TICK_MS, GRID, fit_tick_hold, tick_hold_runs
    from meshsim.calibrate.measure.dataset import load_runs

    model = truth_model(0.7)
    folders = [_lab_run(tmp_path, model, c, q, true_share) for c, q in ((1, 200), (8, 1000), (16, 1500))]
    runs = load_runs(folders).runs
    assert [r.id for r in tick_hold_runs(runs, model)] == ["lab-c8-q1000", "lab-c16-q1500"]  # one connection shows none
    fit = fit_tick_hold(model, runs, tmp_path / "work", seed=5)
    assert fit is not None and fit.tick_ms == ASSUMED_TICK_MS and "assumed" in fit.tick_source
    assert true_share / 2 <= fit.share <= true_share * 2
    assert (fit.highest > GRID[-1]) == (true_share > GRID[-1])  # the ladder went up only where the best lay at its top
    scores = dict(fit.objective)
    assert scores[0.0] > 3 * scores[fit.share]  # without holds the tails are clearly too short
    assert all(s > m for s, m in zip(fit.simulated_ms, fit.without_ms)) or fit.share == 0.0


def test_runs_of_a_feature_the_fit_left_out_are_not_replayed(tmp_path: Path) -> None:
    """A feature whose increment the fit refused is not in the model: its loaded runs cannot be replayed, and once
    made the whole calibration fail at this last step (2026-11-28: tracing refused, its c=16 rung chosen)."""
    from meshsim.calibrate.load.tick_hold_fit import tick_hold_runs
    from meshsim.calibrate.measure.dataset import load_runs

    folders = []
    for features in ((), ("tracing",)):
        manifest = RunManifest(
            id=f"lab-c16-{'-'.join(features) or 'plain'}", source="lab", provenance="written by the test",
            when="2026-11-28T00:00:00Z", where={"cpus": 2},
            setup=Setup(mesh="m", path="both-sidecars", proxy_workers=2, features=features),
            load=LoadSettings(rps=1500, connections=16, duration_s=5.0, resolution_s=1e-5))
        samples = np.random.default_rng(3).lognormal(np.log(2e-3), 0.3, 5000)
        result = result_json(samples, 1e-5, requested_rps=1500, connections=16)
        folders.append(write_run(tmp_path / manifest.id, manifest, result))
    runs = load_runs(folders).runs
    assert [r.id for r in tick_hold_runs(runs, {"features": {"mtls": {}}})] == ["lab-c16-plain"]
    assert len(tick_hold_runs(runs, {"features": {"tracing": {}}})) == 2


def test_the_kernels_tick_is_read_from_its_configuration_and_recorded_with_a_run(tmp_path: Path) -> None:
    import gzip
    import json

    from test_held_fraction import truth_model

    from meshsim.calibrate.load.tick_hold_fit import recorded_tick
    from meshsim.calibrate.measure.dataset import load_runs
    from meshsim.calibrate.measure.lab import run_queue

    config = tmp_path / "config.gz"
    config.write_bytes(gzip.compress(b"CONFIG_NO_HZ_IDLE=y\nCONFIG_HZ_1000=y\nCONFIG_HZ=1000\n"))
    assert run_queue.kernel_tick_ms(str(config)) == 1.0
    assert run_queue.kernel_tick_ms(str(tmp_path / "absent.gz")) is None
    folder = _lab_run(tmp_path, truth_model(0.7), 8, 400, 0.008)
    (run,) = load_runs([folder]).runs
    tick, source = recorded_tick([run])
    assert tick == ASSUMED and "assumed" in source
    (folder / "run-queue.json").write_text(json.dumps({"kernel_tick_ms": 1.0, "components": {}}))
    manifest = yaml.safe_load((folder / "manifest.yaml").read_text())
    manifest.setdefault("files", {})[run_queue.FILE_KEY] = "run-queue.json"
    (folder / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    (run,) = load_runs([folder]).runs
    assert recorded_tick([run]) == (1.0, "CONFIG_HZ of the runs' kernel, recorded in their run-queue.json")
