"""`meshsim topology from-traces`: traces generated from a known graph (tests/trace_generator.py) come back as it.

The graph, the calls per request, sequential vs parallel stages and the own times are recovered within tolerances
derived from the sample size; the written file loads and predicts; every bad input ends in one line naming the file
or in a counted repair.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st
from scipy import stats

from meshsim.calibrate.fit.families import Family
from meshsim.calibrate.trace_topology import derive_topology
from meshsim.cli import main
from meshsim.distribution_spec import parse_distribution
from meshsim.errors import MeshsimError
from test_models_provenance import unsourced
from trace_generator import HOP_S, HOP_SIGMA, GenService, generate, otlp_line, write

FORMATS = ("otlp", "jaeger", "zipkin")
LOGNORMAL = [Family("lognormal", False)]  # the generator's own family: one candidate keeps the structure tests fast
SHOP = {
    "front": GenService(2.0, 0.5, (("auth",), ("cart", "catalog"), ("rv1", "rv2")), frozenset({2})),
    "auth": GenService(0.5, 0.3), "cart": GenService(1.0, 0.4, (("db",),)), "catalog": GenService(0.8, 0.6),
    "rv1": GenService(0.3, 0.2), "rv2": GenService(0.4, 0.2), "db": GenService(0.2, 0.3),
}
TRACES = 300
QUICK = ["--duration", "0.4", "--replications", "2", "--processes", "1"]


def _graph(data: dict) -> dict[str, list]:
    """Each service's handler without its computes and sources: the call structure."""
    out = {}
    for name, svc in data["services"].items():
        steps = []
        for step in svc["handler"]:
            kind = next((k for k in ("call", "parallel", "choose") if k in step), None)
            if kind:
                steps.append((kind, step[kind] if kind == "call" else sorted(step[kind])))
        out[name] = steps
    return out


EXPECTED = {"front": [("call", "auth"), ("parallel", ["cart", "catalog"]), ("choose", ["rv1", "rv2"])],
            "cart": [("call", "db")], "auth": [], "catalog": [], "rv1": [], "rv2": [], "db": []}


@pytest.fixture(scope="module")
def shop_traces():
    return generate(SHOP, "front", TRACES, 50.0, seed=7)


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_graph_comes_back_from_every_format(tmp_path, shop_traces, fmt):
    derived = derive_topology([write(shop_traces, fmt, tmp_path / f"t.{fmt}")], "shop", LOGNORMAL)
    assert derived.files[0].format == fmt
    assert _graph(derived.data) == EXPECTED
    assert derived.data["entry"] == "front"
    weights = derived.data["services"]["front"]["handler"][3]["choose"]
    assert sum(weights.values()) == TRACES
    assert abs(weights["rv1"] / TRACES - 0.5) < 4 * math.sqrt(0.25 / TRACES)  # a fair coin, 4 standard errors
    per_request = {p.service: p.calls_per_request() for p in derived.patterns}
    assert per_request["front"]["auth"] == per_request["cart"]["db"] == 1.0
    assert derived.data["services"]["cart"]["request_bytes"] == SHOP["cart"].request_bytes
    assert derived.data["services"]["cart"]["response_bytes"] == SHOP["cart"].response_bytes
    assert derived.entry_rps == pytest.approx(50.0, rel=4 / math.sqrt(TRACES))  # Poisson count over the window


def test_jaeger_v2_api_v3_otlp_answer_is_read_as_it_comes(tmp_path, shop_traces):
    """/api/v3/traces wraps one OTLP object in {"result": ...}; the reader takes it without unwrapping by hand."""
    spans = [json.loads(otlp_line(t))["resourceSpans"] for t in shop_traces[:40]]
    path = tmp_path / "api-v3.json"
    path.write_text(json.dumps({"result": {"resourceSpans": [r for rs in spans for r in rs]}}))
    derived = derive_topology([path], "shop", LOGNORMAL)
    assert derived.files[0].format == "otlp" and len(derived.traces.roots) == 40
    assert _graph(derived.data) == EXPECTED


def _quantile_tolerance(svc: GenService, p: float, n: int) -> float:
    """Four standard errors of the p-quantile of n lognormal samples (ms)."""
    true = stats.lognorm(svc.sigma, scale=svc.median_ms)
    return 4 * math.sqrt(p * (1 - p) / n) / true.pdf(true.ppf(p))


def test_own_times_fitted_within_their_sampling_error(tmp_path, shop_traces):
    """The default candidate families (AIC picks one): the fitted quantiles sit within 4 standard errors."""
    derived = derive_topology([write(shop_traces, "otlp", tmp_path / "t.otlp")], "shop")
    counts = {p.service: p.invocations for p in derived.patterns}
    for name, svc in SHOP.items():
        fitted = parse_distribution(derived.data["services"][name]["handler"][0]["compute"], name)
        true = stats.lognorm(svc.sigma, scale=svc.median_ms)
        for p in (0.5, 0.9):
            assert abs(fitted.quantile(p) * 1e3 - true.ppf(p)) < _quantile_tolerance(svc, p, counts[name]), (name, p)
    hop = parse_distribution(derived.data["network"]["cross_node"], "hop")
    calls = len(derived.traces.network_gaps)
    assert abs(math.log(hop.quantile(0.5) / HOP_S)) < 4 * 1.2533 * HOP_SIGMA / math.sqrt(calls)


@pytest.mark.parametrize("stages, expected", [((("a",), ("b",)), [("call", "a"), ("call", "b")]),
                                              ((("a", "b"),), [("parallel", ["a", "b"])])])
def test_sequential_and_parallel_calls_told_apart(tmp_path, stages, expected):
    graph = {"top": GenService(1.0, 0.3, stages), "a": GenService(1.0, 0.3), "b": GenService(1.0, 0.3)}
    path = write(generate(graph, "top", 40, 20.0, seed=3), "zipkin", tmp_path / "t.json")
    assert _graph(derive_topology([path], "t", LOGNORMAL).data)["top"] == expected


def test_sidecar_spans_become_proxy_passes(tmp_path):
    traces = generate(SHOP, "front", 60, 50.0, seed=5, sidecars=True)
    derived = derive_topology([write(traces, "jaeger", tmp_path / "t.json")], "shop", LOGNORMAL)
    assert _graph(derived.data) == EXPECTED  # no `front.default` or other proxy services
    calls = sum(n for p in derived.patterns for _, n in p.edges)
    assert derived.traces.proxy_spans == {"inbound": calls, "outbound": calls}
    assert "sidecar spans counted as proxy passes" in derived.summary()


def test_the_written_file_loads_predicts_and_sources_every_number(tmp_path, capsys, shop_traces):
    trace_file = write(shop_traces[:80], "otlp", tmp_path / "shop.otlp.json")
    out = tmp_path / "shop.yaml"
    assert main(["topology", "from-traces", str(trace_file), "--out", str(out)]) == 0
    assert "entry rate seen in the traces" in capsys.readouterr().out
    data = yaml.safe_load(out.read_text())
    assert unsourced(data, "", False, True) == []
    assert str(trace_file) in data["services"]["db"]["handler"][0]["compute"]["source"]
    assert main(["predict", "--topology", str(out), "--rps", "20", "--mesh", "istio", *QUICK, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"front/app", "db/app"} <= set(result["cpu_cores"])


def test_the_entry_rate_seen_is_the_rate_predict_uses_without_rps(tmp_path, capsys, shop_traces):
    trace_file = write(shop_traces[:80], "zipkin", tmp_path / "shop.json")
    out = tmp_path / "shop.yaml"
    assert main(["topology", "from-traces", str(trace_file), "--out", str(out)]) == 0
    rate = yaml.safe_load(out.read_text())["entry_rate"]
    assert rate["rps"] == pytest.approx(50.0, rel=4 / math.sqrt(80)) and str(trace_file) in rate["source"]
    capsys.readouterr()
    assert main(["predict", "--topology", str(out), "--mesh", "istio", *QUICK, "--json"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert inputs["load"]["rps"] == rate["rps"] and "entry_rate" in inputs["rps_from"]
    assert main(["predict", "--topology", str(out), "--mesh", "istio", *QUICK]) == 0
    assert f"rate from the topology's entry_rate ({rate['rps']:g} rps)" in capsys.readouterr().out
    assert main(["predict", "--topology", str(out), "--rps", "20", "--mesh", "istio", *QUICK, "--json"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]  # a rate given stands, and nothing claims otherwise
    assert inputs["load"]["rps"] == 20 and "rps_from" not in inputs


# --- bad input -------------------------------------------------------------------------------------------------

def _one_line_error(capsys, files: list[Path], tmp_path: Path) -> str:
    code = main(["topology", "from-traces", *map(str, files), "--out", str(tmp_path / "out.yaml")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("meshsim: error:"), err
    assert not (tmp_path / "out.yaml").exists()
    return err


def test_a_truncated_jaeger_file_is_one_line_naming_it(tmp_path, capsys, shop_traces):
    path = write(shop_traces[:5], "jaeger", tmp_path / "t.json")
    path.write_text(path.read_text()[:-40])
    assert f"{path}: not valid JSON, truncated?" in _one_line_error(capsys, [path], tmp_path)


def test_an_otlp_line_cut_short_is_dropped_and_reported(tmp_path, shop_traces):
    path = write(shop_traces[:40], "otlp", tmp_path / "t.json")
    path.write_text(path.read_text()[:-100])  # the collector stopped mid-line
    derived = derive_topology([path], "t", LOGNORMAL)
    assert len(derived.traces.roots) == 39
    assert f"{path}: last line cut short" in derived.summary()


def test_mixed_formats_in_one_file_name_the_line(tmp_path, capsys, shop_traces):
    path = tmp_path / "t.json"
    path.write_text(otlp_line(shop_traces[0]) + "\n" + json.dumps({"data": []}) + "\n")
    assert f"{path}: line 2: not an OTLP export line" in _one_line_error(capsys, [path], tmp_path)


def test_a_file_that_is_no_trace_export_is_named(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"kind": "Deployment"}))
    assert f"{path}: not an OTLP, Jaeger or Zipkin v2 export" in _one_line_error(capsys, [path], tmp_path)


def test_orphan_spans_drop_their_traces_counted(tmp_path, shop_traces):
    traces = [list(t) for t in shop_traces[:40]]
    for trace in traces[:2]:  # lose front's client span to auth: auth's server span is now an orphan
        del trace[1]
    derived = derive_topology([write(traces, "zipkin", tmp_path / "t.json")], "t", LOGNORMAL)
    assert len(derived.traces.roots) == 38
    dropped = {why: traces for why, (_, traces) in derived.traces.dropped.items()}
    assert dropped == {"orphan spans (parent missing)": 2}
    assert "dropped with their 2 traces: orphan spans" in derived.summary()


def test_a_child_outlasting_its_parent_is_clipped_and_counted(tmp_path, shop_traces):
    traces = [[dict(s) for s in t] for t in shop_traces[:40]]
    for trace in traces[:3]:
        trace[1]["end"] = trace[0]["end"] + 0.01  # front's call to auth ends after front did: clock skew
    derived = derive_topology([write(traces, "otlp", tmp_path / "t.json")], "t", LOGNORMAL)
    assert derived.traces.clipped_calls == 3
    assert "3 calls outlasting their caller (clock skew) clipped" in derived.summary()


def test_a_call_cycle_is_one_line(tmp_path, capsys):
    graph = {"a": GenService(1.0, 0.3, (("b",),)), "b": GenService(1.0, 0.3, (("a2",),)), "a2": GenService(1.0, 0.3)}
    traces = generate(graph, "a", 5, 20.0, seed=1)
    for trace in traces:
        for span in trace:
            span["service"] = "a" if span["service"] == "a2" else span["service"]
    path = write(traces, "jaeger", tmp_path / "t.json")
    assert "call graph has a cycle: a -> b -> a" in _one_line_error(capsys, [path], tmp_path)


def test_nothing_usable_is_one_line_with_the_reasons(tmp_path, capsys, shop_traces):
    traces = [[s for s in t if s["parent"]] for t in shop_traces[:3]]  # every root gone
    err = _one_line_error(capsys, [write(traces, "zipkin", tmp_path / "t.json")], tmp_path)
    assert "no usable trace" in err and "orphan spans" in err


# --- generated hostile input -----------------------------------------------------------------------------------

JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                      max_size=3), max_leaves=6)
SMALL = generate(SHOP, "front", 3, 50.0, seed=11)


def _slots(node, out):
    """Every (container, key) of a JSON tree, containers first."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((node, key))
        _slots(value, out)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(FORMATS), edits=st.lists(st.tuples(st.integers(0, 10**6), st.booleans(), JSON_VALUES),
                                                    max_size=3), cut=st.none() | st.floats(0.0, 1.0))
def test_damaged_exports_end_in_one_line_or_a_topology(tmp_path, fmt, edits, cut):
    """A damaged export (values replaced, keys removed, text cut) either derives a topology or fails in one line
    naming the file; it never raises anything else."""
    path = write(SMALL, fmt, tmp_path / f"t.{fmt}")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for index, delete, value in edits:
        slots = _slots(lines, [])[1:]  # the list of lines itself stays
        if slots:
            node, key = slots[index % len(slots)]
            if delete and isinstance(node, dict):
                del node[key]
            else:
                node[key] = value
    text = "\n".join(json.dumps(line) for line in lines) + "\n"
    path.write_text(text[: int(len(text) * cut)] if cut is not None else text)
    try:
        derive_topology([path], "t", LOGNORMAL)
    except MeshsimError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc), str(exc)


def test_sidecar_only_traces_stand_in_for_their_apps(tmp_path):
    """Envoy in front of apps that only forward the headers (the lab's fortio apps, Istio's Bookinfo): each inbound
    sidecar span stands in for its app, named by the service it fronts."""
    rng = np.random.default_rng(2)
    records = []
    for i in range(40):
        t, own = 1.7e9 + i, rng.lognormal(np.log(1e-3), 0.3, 2)
        trace = f"{i + 1:032x}"
        proxy = {"component": "proxy", "upstream_cluster": "x"}
        records += [
            {"trace": trace, "id": "a1", "parent": "", "service": "front.default", "kind": "server", "start": t,
             "end": t + own[0] + own[1] + 0.0004, "tags": proxy},
            {"trace": trace, "id": "a2", "parent": "a1", "service": "front.default", "kind": "client",
             "start": t + own[0], "end": t + own[0] + own[1] + 0.0004, "tags": proxy},
            {"trace": trace, "id": "a3", "parent": "a2", "service": "db.default", "kind": "server",
             "start": t + own[0] + 0.0002, "end": t + own[0] + own[1] + 0.0002, "tags": proxy}]
    derived = derive_topology([write([records], "zipkin", tmp_path / "t.json")], "t", LOGNORMAL)
    assert _graph(derived.data) == {"front": [("call", "db")], "db": []}
    assert derived.traces.proxy_spans == {"inbound": 80, "outbound": 40}
    assert any(n.startswith("2 service(s) without spans of their own (db, front): their own time is their inbound "
                            "sidecar's span") for n in derived.notes), derived.notes
    assert not any("without spans of their own" in n for n in derive_topology(
        [write(generate(SHOP, "front", 40, 50.0, seed=1), "zipkin", tmp_path / "apps.json")], "t", LOGNORMAL).notes)
