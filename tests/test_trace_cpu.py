"""A service's CPU per call for ``meshsim topology from-traces``: given (``--cpu-ms``) or read from a real Prometheus
over the traces' own span (``--cpu-from-prometheus``). With it, a service's own time becomes that CPU held on a core
plus a delay fitted to the rest; without it, its own time is CPU, and a service that keeps its core busy that way
at the traced rate is named in a note."""

from __future__ import annotations

import numpy as np
import pytest

from meshsim.calibrate.fit.families import Family
from meshsim.calibrate.trace_cpu import PrometheusCpu, cpu_from_flag
from meshsim.calibrate.trace_topology import derive_topology
from meshsim.cli import main
from meshsim.distribution_spec import parse_distribution
from meshsim.errors import MeshsimError
from trace_generator import GenService, generate, write

LOGNORMAL = [Family("lognormal", False)]
GRAPH = {"reviews": GenService(20.0, 0.2, (("ratings",),)), "ratings": GenService(1.0, 0.3)}
TRACES, RPS = 200, 40.0


@pytest.fixture(scope="module")
def traces():
    return generate(GRAPH, "reviews", TRACES, RPS, seed=3)


def _own_ms(derived, service: str) -> np.ndarray:
    return np.array([inv.own_time() * 1e3 for inv in derived.traces.invocations() if inv.service == service])


def test_given_cpu_is_held_and_the_rest_of_the_own_time_is_a_delay(tmp_path, traces):
    path = write(traces, "zipkin", tmp_path / "t.json")
    derived = derive_topology([path], "t", LOGNORMAL, cpu=cpu_from_flag("reviews=4"))
    handler = derived.data["services"]["reviews"]["handler"]
    compute, delay = handler[0]["compute"], handler[1]["delay"]
    assert compute["family"] == "deterministic" and compute["value_ms"] == 4.0 and "--cpu-ms" in compute["source"]
    # the delay is the own time less the CPU: its median within a few % of the traces' (20 ms own, 200 draws)
    own = _own_ms(derived, "reviews")
    waited = parse_distribution(delay, "delay")
    assert waited.quantile(0.5) * 1e3 == pytest.approx(np.median(own) - 4.0, rel=0.05)
    assert "less its CPU per call (4 ms)" in delay["source"]
    # a service without a figure keeps its own time as CPU
    assert "compute" in derived.data["services"]["ratings"]["handler"][0]


def test_own_time_as_cpu_that_keeps_a_core_busy_is_named(tmp_path, traces):
    """reviews: ~20 ms of own time at ~40 calls a second keeps one core ~80 % busy; ratings (1 ms) is not named."""
    derived = derive_topology([write(traces, "zipkin", tmp_path / "t.json")], "t", LOGNORMAL)
    busy = [n for n in derived.notes if "booked as CPU on 1 core" in n]
    assert len(busy) == 1 and busy[0].startswith("reviews:"), derived.notes
    percent = float(busy[0].split("core, ")[1].split(" %")[0])
    span = max(t[0]["end"] for t in traces) - min(t[0]["start"] for t in traces)
    assert percent == pytest.approx(100 * np.mean(_own_ms(derived, "reviews")) / 1e3 * TRACES / span, abs=1.0)


def test_a_cpu_above_the_own_time_is_said(tmp_path, traces):
    derived = derive_topology([write(traces, "zipkin", tmp_path / "t.json")], "t", LOGNORMAL,
                              cpu=cpu_from_flag("ratings=5"))
    assert any(n.startswith("ratings: CPU per call 5 ms is above its median own time") for n in derived.notes)


@pytest.mark.parametrize("text, message", [
    ("reviews", "'reviews': expected SERVICE=MILLISECONDS"), ("reviews=x", "'reviews=x'"),
    ("reviews=-1", "'reviews=-1'"), ("=3", "'=3'"), (",", "expected SERVICE=MILLISECONDS[,...]")])
def test_a_bad_cpu_flag_is_one_line(text, message):
    with pytest.raises(MeshsimError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        cpu_from_flag(text)


def test_cli_errors_are_one_line_and_write_nothing(tmp_path, capsys, traces):
    path = str(write(traces, "zipkin", tmp_path / "t.json"))
    out = tmp_path / "topo.yaml"
    for args, message in ((["--cpu-ms", "nosuch=1"], "--cpu-ms: no service 'nosuch' in the traces (they have "
                                                      "ratings, reviews)"),
                          (["--window", "5m"], "--window: only with --cpu-from-prometheus URL"),
                          (["--cpu-ms", "reviews=1", "--cpu-from-prometheus", "http://127.0.0.1:9"],
                           "--cpu-ms and --cpu-from-prometheus: give one of them"),
                          (["--cpu-from-prometheus", "http://127.0.0.1:9", "--window", "ten"], "ten")):
        assert main(["topology", "from-traces", path, "--out", str(out), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert not out.exists()


def test_the_default_window_is_the_traces_span(traces, tmp_path):
    derived = derive_topology([write(traces, "zipkin", tmp_path / "t.json")], "t", LOGNORMAL)
    window, end = PrometheusCpu("http://127.0.0.1:9").span(derived.traces.roots)
    assert end == pytest.approx(max(t[0]["end"] for t in traces), abs=1e-6)
    assert window == pytest.approx(end - min(t[0]["start"] for t in traces), abs=1e-6)
    with pytest.raises(MeshsimError, match="too short a window"):
        PrometheusCpu("http://127.0.0.1:9").span(derived.traces.roots[:1])


@pytest.mark.lab
def test_cpu_per_call_from_a_real_prometheus(tmp_path, capsys, traces):
    """A real Prometheus scrapes cAdvisor-shaped counters of known rates (cadvisor_exporter: reviews-v1's two pods'
    app containers 0.20 + 0.25 cores, ratings-0 only a sidecar); traces of the same seconds give reviews' calls per
    second, so its CPU per call is 0.45 cores over them; ratings has no app CPU and keeps its own time as CPU."""
    from cadvisor_exporter import CadvisorExporter
    from prometheus_server import last_scrape, poll, real_prometheus

    exporter = CadvisorExporter()
    try:
        config = exporter.scrape_config(tmp_path / "prometheus.yml")
        with real_prometheus(config, tmp_path, targets=1) as url:
            first = last_scrape(url)
            end = poll("six scrapes", lambda: (t := last_scrape(url)) > first + 5.5 and t)
            # the traces, moved to end at the last scrape: their span is the window read
            shift = end - max(s["end"] for t in traces for s in t)
            moved = [[{**s, "start": s["start"] + shift, "end": s["end"] + shift} for s in t] for t in traces]
            path = write(moved, "zipkin", tmp_path / "t.json")
            out = tmp_path / "topo.yaml"
            assert main(["topology", "from-traces", str(path), "--out", str(out), "--cpu-from-prometheus", url]) == 0
    finally:
        exporter.close()
    text = capsys.readouterr().out
    import yaml

    data = yaml.safe_load(out.read_text())
    compute = data["services"]["reviews"]["handler"][0]["compute"]
    span = max(t[0]["end"] for t in traces) - min(t[0]["start"] for t in traces)
    assert compute["family"] == "deterministic"
    assert compute["value_ms"] == pytest.approx(0.45 / (TRACES / span) * 1e3, rel=0.1), (compute, span)
    assert "prometheus: reviews's app containers' CPU" in compute["source"] and url in compute["source"]
    assert "ratings: no app container CPU in Prometheus" in text
    assert "1 container series no naming rule" in text  # the debug pod, counted, not used



def test_cpu_per_call_divides_the_cores_by_the_calls_and_says_what_it_cannot():
    from meshsim.calibrate.trace_cpu import cpu_per_call

    out, notes = cpu_per_call({"reviews": 0.45, "idle": 0.1}, {"reviews": 20.0, "ratings": 5.0, "idle": 0.0},
                              "window W")
    assert set(out) == {"reviews"} and out["reviews"].seconds == pytest.approx(0.45 / 20.0)
    assert "0.45 cores over window W, over the 20 calls per second" in out["reviews"].source
    assert notes == ["ratings: no app container CPU in Prometheus: its own time is booked as CPU",
                     "idle: the traces span no time, so no calls per second to divide its CPU by: its own time is "
                     "booked as CPU"]
