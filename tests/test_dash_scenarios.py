"""Control validation and the measured-run overlay of the Dash app (no simulation, no server)."""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from meshsim.dash_app.measured import default_dirs, load_measurements, matching_runs, validation_rows
from meshsim.catalog import load_mesh
from meshsim.dash_app.what_if import (
    UPLOADED, ControlError, MeshFeatures, WhatIf, decode_upload, what_if_from_controls,
)
from meshsim.dash_app.sweep import grid, nice_rate
from meshsim.errors import MeshsimError
from meshsim.run_folder import read_manifest, write_run

TOPOLOGIES = ["bookinfo", "chain3", "single", "chainN"]
MESHES = ["istio", "linkerd", "none"]


def controls(**changes) -> dict:
    base = {"topology": "chain3", "meshes": ["istio"], "features": [], "lb": "client", "load": "fortio",
            "connections": 16, "rate_min": 100,
            "features_off": [], "rate_max": None, "cdf_rate": 1000, "payload_bytes": None,
            "proxy_workers": None, "proxy_cpu_limit": None, "upload_contents": None, "upload_filename": None}
    return {**base, **changes}


def data_url(text: str) -> str:
    return "data:application/x-yaml;base64," + base64.b64encode(text.encode()).decode()


def test_valid_controls_make_a_scenario_in_catalog_order():
    s = what_if_from_controls(controls(meshes=["linkerd", "istio"], features=["tracing", "mtls"],
                                        rate_max="5000", proxy_workers=2.0), TOPOLOGIES, MESHES)
    assert s.meshes == ("istio", "linkerd") and s.features == ("mtls", "tracing")
    assert s.rate_max == 5000.0 and s.proxy_workers == 2 and isinstance(s.proxy_workers, int)
    assert what_if_from_controls(controls(topology="chain5"), TOPOLOGIES, MESHES).topology == "chain5"


@pytest.mark.parametrize("changes, control", [
    ({"rate_min": -5}, "rate from (rps)"),
    ({"rate_min": 0}, "rate from (rps)"),
    ({"rate_min": None}, "rate from (rps)"),
    ({"rate_min": "fast"}, "rate from (rps)"),
    ({"rate_max": 50}, "rate to (rps)"),
    ({"cdf_rate": -1}, "CDF at rate (rps)"),
    ({"connections": 0}, "connections"),
    ({"connections": 2.5}, "connections"),
    ({"payload_bytes": -1}, "payload (bytes)"),
    ({"proxy_workers": 0}, "proxy workers"),
    ({"proxy_cpu_limit": -0.5}, "proxy CPU limit (cores)"),
    ({"meshes": []}, "meshes"),
    ({"meshes": ["consul"]}, "meshes"),
    ({"features": ["telepathy"]}, "features on"),
    ({"features_off": ["telepathy"]}, "features off"),
    ({"features": ["mtls"], "features_off": ["mtls"]}, "features"),
    ({"lb": "dns"}, "load balancing"),
    ({"load": "burst"}, "load model"),
    ({"topology": "nope"}, "topology"),
    ({"topology": UPLOADED}, "topology"),
])
def test_bad_controls_give_one_line_naming_the_control(changes, control):
    with pytest.raises(ControlError) as err:
        what_if_from_controls(controls(**changes), TOPOLOGIES, MESHES)
    message = str(err.value)
    assert message.startswith(control + ":") and "\n" not in message
    assert isinstance(err.value, MeshsimError)


def test_uploaded_topology_is_keyed_by_content():
    a = what_if_from_controls(controls(topology=UPLOADED, upload_contents=data_url("name: a\n"),
                                        upload_filename="mine.yaml"), TOPOLOGIES, MESHES)
    b = what_if_from_controls(controls(topology=UPLOADED, upload_contents=data_url("name: b\n"),
                                        upload_filename="mine.yaml"), TOPOLOGIES, MESHES)
    assert a.topology == b.topology == "mine.yaml" and a.topology_text == "name: a\n"
    assert a.topology_key != b.topology_key and a.model_key() != b.model_key()


def test_decode_upload_rejects_binary_and_bad_base64():
    with pytest.raises(ControlError, match=r"^x.bin: not UTF-8 text"):
        decode_upload("data:application/octet-stream;base64," + base64.b64encode(b"\xff\xfe\x00").decode(), "x.bin")
    with pytest.raises(ControlError, match=r"^y.yaml: the upload is not valid base64"):
        decode_upload("data:text/yaml;base64,@@@", "y.yaml")
    assert decode_upload(data_url("a: 1\n"), "z.yaml") == "a: 1\n"


def test_rate_grids_nest_and_round():
    assert nice_rate(1234.567) == 1230.0 and nice_rate(98.76) == 98.8
    coarse, fine = grid(100, 5000, 5), grid(100, 5000, 13)
    assert set(coarse) <= set(fine) and fine[0] == 100 and fine[-1] == 5000


def test_shipped_istio_runs_overlay_only_where_the_setup_matches():
    measured = load_measurements(default_dirs())
    assert not measured.skipped
    ids = {r.run_id for r in measured.runs}
    assert "istio-1.2.0-c1-qps1000-baseline" in ids
    baseline = next(r for r in measured.runs if r.run_id == "istio-1.2.0-c1-qps1000-baseline")
    # Numbers straight from the shipped fortio.json (seconds -> ms).
    data = json.loads((Path(baseline.folder) / "fortio.json").read_text())
    p99 = next(p["Value"] for p in data["DurationHistogram"]["Percentiles"] if p["Percentile"] == 99)
    assert baseline.percentiles_ms["p99"] == pytest.approx(1000 * p99)
    assert baseline.rps_achieved == pytest.approx(data["ActualQPS"])
    assert baseline.cdf_ms[-1][1] == pytest.approx(1.0) and baseline.mesh == "none"

    features = MeshFeatures.from_models({m: load_mesh(m) for m in ("istio", "none")})
    single = WhatIf(topology="single", topology_text=None, meshes=("istio", "none"), load="fortio", connections=1)
    match = matching_runs(measured.runs, single, features)
    # Istio 1.2 ran Mixer telemetry by default; the model's istio turns `telemetry` on by default too.
    assert [r.run_id for r in match["istio"]] == ["istio-1.2.0-c1-qps1000-both-sidecars-mixer"]
    assert [r.run_id for r in match["none"]] == ["istio-1.2.0-c1-qps1000-baseline"]
    nomixer = replace(single, features_off=("telemetry",))
    assert [r.run_id for r in matching_runs(measured.runs, nomixer, features)["istio"]] == [
        "istio-1.2.0-c1-qps1000-both-sidecars-nomixer"]  # server-sidecar-only runs are another setup
    assert matching_runs(measured.runs, nomixer, features)["none"] == match["none"]  # none has no telemetry
    # the sixteen-connection runs are their own setup (fortio's closed loop at another connection count)
    at16 = matching_runs(measured.runs, replace(single, connections=16), features)
    assert {m: [r.run_id for r in runs] for m, runs in at16.items()} == {
        "istio": ["istio-1.2.0-c16-qps1000-both-sidecars-mixer"], "none": ["istio-1.2.0-c16-qps1000-baseline"]}
    assert matching_runs(measured.runs, replace(single, connections=8), features) == {"istio": [], "none": []}
    assert matching_runs(measured.runs, replace(single, load="open"), features)["istio"] == []
    assert matching_runs(measured.runs, replace(single, features=("mtls",)), features)["istio"] == []
    assert matching_runs(measured.runs, replace(single, topology="chain3"), features)["istio"] == []
    assert len(matching_runs(measured.runs, replace(single, payload_bytes=1024), features)["istio"]) == 1
    assert matching_runs(measured.runs, replace(single, payload_bytes=64), features)["istio"] == []
    assert matching_runs(measured.runs, replace(single, lb="proxy"), features)["istio"] == []
    # The model fitted to Istio 1.2 is compared with the Istio 1.2 runs, not a 1.20 model (no feature catalog
    # given here, so no default features: the run without Mixer telemetry matches).
    versions = {m: [r.run_id for r in runs] for m, runs in matching_runs(
        measured.runs, replace(single, meshes=("istio-1.2", "istio-1.20", "linkerd-1.2"))).items()}
    assert versions == {"istio-1.2": ["istio-1.2.0-c1-qps1000-both-sidecars-nomixer"], "istio-1.20": [],
                        "linkerd-1.2": []}


def test_features_follow_each_mesh_model():
    features = MeshFeatures.from_models({m: load_mesh(m) for m in ("istio", "linkerd", "none")})
    assert features.defaults["istio"] == ("telemetry",) and features.known["none"] == ()
    assert features.active("istio", ("tracing",)) == ("telemetry", "tracing")
    assert features.active("istio", (), ("telemetry",)) == ()
    assert features.request("istio", ("tracing",), ("telemetry",)) == ("tracing", "no-telemetry")
    assert features.request("none", ("tracing",)) == ()
    assert features.ignored(["istio", "none"], ("tracing",)) == ["tracing: not modelled for none"]


def test_unreadable_runs_are_listed_not_fatal(tmp_path):
    shipped = default_dirs()[0]
    good = next(p.parent for p in shipped.rglob("manifest.yaml"))
    shutil.copytree(good, tmp_path / "good")
    shutil.copytree(good, tmp_path / "broken")
    (tmp_path / "broken" / "fortio.json").write_text("{not json")
    (tmp_path / "bad-manifest").mkdir()
    (tmp_path / "bad-manifest" / "manifest.yaml").write_text("id: x\nsource: lab\n")
    (tmp_path / "validation-lab.json").write_text(json.dumps({"runs": [{"run": "a", "p99_error": 0.12, "x": [1]}]}))
    measured = load_measurements([tmp_path])
    assert [r.run_id for r in measured.runs] == [good.name]
    assert len(measured.skipped) == 2
    assert any("broken" in s and "not valid JSON" in s for s in measured.skipped)
    assert any("bad-manifest" in s for s in measured.skipped)
    assert validation_rows(measured.validations) == [{"run": "a", "p99_error": 0.12}]


def test_raw_samples_from_an_access_log_beat_the_histogram(tmp_path):
    shipped = default_dirs()[0]
    good = next(p.parent for p in sorted(shipped.rglob("manifest.yaml")))
    manifest = read_manifest(good)
    latencies = [0.001 * (1 + i % 10) for i in range(1000)]  # 1..10 ms, evenly
    log = tmp_path / "access.jsonl"
    log.write_text("".join(json.dumps({"latency": x, "ok": True}) + "\n" for x in latencies))
    folder = write_run(tmp_path / "runs" / manifest.id, replace(manifest, files={**manifest.files,
                                                                                 "access_log": "access.jsonl"}),
                       (good / "fortio.json").read_bytes(), access_log=log)
    run = load_measurements([tmp_path / "runs"]).runs[0]
    assert run.percentiles_ms["p50"] == pytest.approx(1000 * float(np.quantile(latencies, 0.5)))
    assert run.percentiles_ms["p999"] == pytest.approx(10.0)
    assert run.cdf_ms[0] == (pytest.approx(1.0), 0.0) and run.cdf_ms[-1] == (pytest.approx(10.0), 1.0)
    assert folder.name == manifest.id


def test_shipped_lab_runs_are_not_overlaid_on_cluster_topologies():
    """The lab validation set ran on one host over loopback: its baseline runs are not measurements of the shipped
    `single` topology (two nodes), so the `none` curve of a `single` scenario does not pick them up."""
    measured = load_measurements(default_dirs())
    lab = [r for r in measured.runs if r.source == "lab"]
    assert lab and all(r.topology.endswith("(lab)") for r in lab)
    features = MeshFeatures.from_models({m: load_mesh(m) for m in ("istio", "none")})
    single = WhatIf(topology="single", topology_text=None, meshes=("istio", "none"), load="fortio", connections=1)
    assert all(r.source != "lab" for runs in matching_runs(measured.runs, single, features).values() for r in runs)
