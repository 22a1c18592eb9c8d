"""The time series of a prediction (sim/engine/window_series.py) and a rate profile setting the run's length.

Exact timelines on deterministic inputs (a deterministic service with cores to spare never queues, so every latency
is its service time and every window's CPU is its requests x that time); the windows' counts add up to the totals;
Little's law holds in every window of a steady queue.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from meshsim.cli import main
from meshsim.cli.prediction_text import prediction_table
from meshsim.distributions import Deterministic, Exponential
from meshsim.errors import FieldError
from meshsim.sim.experiments.predict import predict
from meshsim.sim.engine.window_series import default_window
from meshsim.workload import RateProfile

from simkit import station_topology

MS = 1e-3
QUIET = dict(processes=1, saturation=False, precision=None)


def test_profile_mean_rate_and_length_are_exact():
    ramp = RateProfile.ramp(100, 300, 10.0)
    assert ramp.length_s == 10.0
    assert [ramp.mean_rps(a, a + 2) for a in (0, 2, 4, 6, 8)] == pytest.approx([120, 160, 200, 240, 280], abs=1e-9)
    steps = RateProfile("steps", ((0.0, 500.0), (20.0, 1000.0), (40.0, 1500.0)))
    assert steps.length_s == 60.0  # the last step lasts as long as the one before it
    assert steps.mean_rps(10, 30) == pytest.approx(750.0)
    assert RateProfile("steps", ((0.0, 500.0),)).length_s is None  # one step has no end


def test_default_window_is_round_and_about_36_per_run():
    assert default_window(360.0) == 10.0
    assert default_window(20.0) == 0.5
    assert default_window(60.0) == 2.0


@pytest.mark.parametrize("engine", ["fast", "simpy"])
def test_exact_timeline_of_a_ramp_on_a_deterministic_station(engine):
    """Ramp 100 -> 300 rps over 10 s onto 1 ms of deterministic work on 64 cores: no request ever waits."""
    p = predict(station_topology(Deterministic(1 * MS), servers=64), "none",
                profile=RateProfile.ramp(100, 300, 10.0), timeseries_s=2.0, replications=2, engine=engine, **QUIET)
    assert p.inputs["duration_s"] == 10.0 and p.inputs["warmup_s"] == 0.0  # the profile is the run
    assert p.inputs["engine"].startswith(engine)
    series = p.timeseries
    assert series is not None and series.window_s == 2.0
    assert [(w.start_s, w.end_s) for w in series.windows] == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    assert [w.offered_rps for w in series.windows] == pytest.approx([120, 160, 200, 240, 280], abs=1e-9)
    for w in series.windows:
        assert w.latency["p50"] == pytest.approx(1 * MS, abs=1e-12)
        assert w.latency["p99"] == pytest.approx(1 * MS, abs=1e-12)
        # CPU is booked when the job arrives, here at its send time: exactly the window's requests x 1 ms
        assert w.cpu_cores["q/app"] * 2.0 * 2 == pytest.approx(w.requests * 1 * MS, rel=1e-9)
        assert w.instance_jobs_per_s["q/app#0"] * 2.0 * 2 == pytest.approx(w.requests, abs=1e-9)
        assert w.utilization["q/app"] == pytest.approx(w.cpu_cores["q/app"] / 64)
    assert sum(w.requests for w in series.windows) == p.requests
    counts = [w.requests / (2 * 2.0) for w in series.windows]  # per replication, per second
    assert np.all(np.diff(counts) > 0), counts  # the ramp rises window after window


@pytest.mark.parametrize("engine", ["fast", "simpy"])
def test_windows_start_after_the_warmup_and_add_up_to_the_totals(engine):
    p = predict(station_topology(Exponential(1 * MS)), "none", rps=300, duration_s=6.0, warmup_s=1.0,
                timeseries_s=1.0, replications=3, engine=engine, **QUIET)
    series = p.timeseries
    assert [w.start_s for w in series.windows] == [1, 2, 3, 4, 5]
    assert all(w.offered_rps == 300 for w in series.windows)
    assert sum(w.requests for w in series.windows) == p.requests
    achieved = sum(w.achieved_rps * (w.end_s - w.start_s) for w in series.windows) / 5.0
    assert achieved == pytest.approx(p.achieved_rps.value, rel=0.01)  # completions vs sends: edges only


def test_a_constant_load_has_no_series_unless_asked():
    p = predict(station_topology(Exponential(1 * MS)), "none", rps=100, duration_s=1.0, replications=1, **QUIET)
    assert p.timeseries is None and p.to_dict()["timeseries"] is None


@pytest.mark.parametrize("engine", ["fast", "simpy"])
def test_littles_law_holds_in_every_window(engine):
    """M/M/1 at utilisation 0.6: the time-average number in the system of each window equals the window's arrival
    rate x the mean latency of its arrivals (edge effects are latency / window, here ~0.1 %)."""
    p = predict(station_topology(Exponential(2 * MS)), "none", rps=300, duration_s=20.0, warmup_s=2.0,
                timeseries_s=3.0, replications=2, seed=5, engine=engine, **QUIET)
    for w in p.timeseries.windows:
        arrivals = w.requests / 2 / (w.end_s - w.start_s)
        assert w.in_system == pytest.approx(arrivals * w.latency["mean"], rel=0.03), w
    # and the windows agree with M/M/1's L = rho / (1 - rho) = 1.5 (20 s x 300 rps per replication: +-15 %)
    assert np.mean([w.in_system for w in p.timeseries.windows]) == pytest.approx(1.5, rel=0.15)


def test_a_long_profile_is_refused_by_the_cost_budget_naming_the_profile():
    with pytest.raises(FieldError) as err:
        predict(station_topology(Exponential(1 * MS)), "none", profile=RateProfile.ramp(1000, 2000, 1e6), **QUIET)
    assert err.value.field == "profile"


@pytest.mark.parametrize(("value", "needle"), [("0", "must be > 0"), ("nan", "finite"), ("50", "longer than the run"),
                                               ("1e-6", "more than 10000 windows")])
def test_bad_windows_are_one_line_naming_the_flag(capsys, value, needle):
    code = main(["predict", "--topology", "single", "--mesh", "none", "--rps", "100", "--duration", "1",
                 "--replications", "1", "--processes", "1", f"--timeseries={value}"])
    err = capsys.readouterr().err
    assert code == 2 and "error: --timeseries:" in err and needle in err and err.count("\n") == 1, err


def test_cli_profile_prints_the_series_and_writes_csv(capsys, tmp_path):
    out = tmp_path / "series.csv"
    args = ["predict", "--topology", "single", "--mesh", "none", "--profile", "ramp:50:100:2", "--replications", "1",
            "--processes", "1", "--time-limit", "20"]
    assert main([*args, "--json", "--timeseries-csv", str(out)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["inputs"]["duration_s"] == 2.0 and d["timeseries"]["window_s"] == 0.05
    windows = d["timeseries"]["windows"]
    assert len(windows) == 40 and sum(w["requests"] for w in windows) == d["requests"]
    lines = out.read_text().splitlines()
    assert lines[0].startswith("start_s,end_s,offered_rps,achieved_rps,requests,p50_ms,p99_ms,mean_ms,in_system")
    assert len(lines) == 41
    text = prediction_table(d)
    assert "time series (0.05 s windows" in text and len([x for x in text.splitlines() if "server/app" in x]) >= 40


def test_cli_csv_without_a_series_is_refused(capsys, tmp_path):
    code = main(["predict", "--topology", "single", "--mesh", "none", "--rps", "100", "--duration", "1",
                 "--timeseries-csv", str(tmp_path / "x.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "error: --timeseries-csv:" in err and err.count("\n") == 1, err
