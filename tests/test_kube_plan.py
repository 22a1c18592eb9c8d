"""Probe plan and objects of `meshsim calibrate --kube` (no cluster needed)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from meshsim.calibrate.measure.kube import calibrate_kube, load_plan
from meshsim.calibrate.measure.kube.meshes import BYPASS_PORT, MESH_PORT, SERVER_ONLY_PORT, mesh_profile
from meshsim.calibrate.measure.kube.objects import NamespaceSpec, namespace_objects
from meshsim.calibrate.measure.kube.probe_plan import expand, plan_from_dict
from meshsim.errors import MeshsimError, ModelError
from meshsim.run_folder import PATH_MODES


@pytest.mark.parametrize("mesh", ["istio", "linkerd", "traefik", "none"])
def test_default_plan_fits_in_ten_minutes_of_probes(mesh: str) -> None:
    plan = load_plan()
    expanded = expand(plan, mesh_profile(mesh))
    assert expanded.probes, expanded.skipped
    assert expanded.probe_seconds(plan.duration_s) <= 600
    assert all(p.path in PATH_MODES for p in expanded.probes)
    # one connection, except the bursts (c connections firing together at the lowest rate) and the load ladder
    # (16 connections at rates rising past the plan's, plain: the load-dependence fit takes plain runs only)
    assert {p.connections for p in expanded.probes if p.configuration.name not in ("bursts", "load-ladder")} == {1}
    assert {(p.connections, p.rps) for p in expanded.probes if p.configuration.name == "bursts"} <= {
        (2, 20.0), (4, 20.0), (8, 20.0)}
    ladder = [p for p in expanded.probes if p.configuration.name == "load-ladder"]
    assert {p.connections for p in ladder} <= {16} and {p.features for p in ladder} <= {()}
    assert all(p.rps > max(plan.rps) for p in ladder)
    ids = [p.run_id(mesh) for p in expanded.probes]
    assert len(ids) == len(set(ids)), "probe ids must be unique (they name the run folders)"


def test_mesh_capabilities_shape_the_plan() -> None:
    plan = load_plan()
    istio = expand(plan, mesh_profile("istio"))
    paths = {(p.configuration.name, p.path) for p in istio.probes}
    assert {("mtls", "baseline"), ("mtls", "both-sidecars"), ("plaintext", "server-sidecar"),
            ("plaintext", "both-sidecars"), ("tracing", "both-sidecars"), ("lb", "client-lb"),
            ("bursts", "both-sidecars"), ("load-ladder", "baseline"), ("load-ladder", "both-sidecars")} == paths
    bursts = [p for p in istio.probes if p.configuration.name == "bursts"]
    assert sorted(p.connections for p in bursts) == [2, 4, 8] and {p.features for p in bursts} == {()}
    assert not plan.uniform  # bursts need the connections to fire together
    assert "mtls/server-sidecar: strict mTLS refuses a client without sidecar" in istio.skipped
    assert {p.features for p in istio.probes if p.configuration.name == "tracing"} == {("mtls", "tracing")}
    assert {p.features for p in istio.probes if p.path == "baseline"} == {()}
    linkerd = expand(plan, mesh_profile("linkerd"))
    assert not {"plaintext", "bursts"} & {p.configuration.name for p in linkerd.probes}
    assert any("cannot switch off mtls" in s for s in linkerd.skipped)
    assert all("mtls" in p.features for p in linkerd.probes if p.path not in ("baseline", "server-sidecar"))
    assert {p.features for p in linkerd.probes if p.path == "server-sidecar"} == {()}  # one proxy: no mTLS
    traefik = expand(plan, mesh_profile("traefik"))
    assert {p.path for p in traefik.probes} == {"baseline", "proxy-lb"}
    none = expand(plan, mesh_profile("none"))
    assert {p.path for p in none.probes} == {"baseline"}


def test_bad_plan_names_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "plan.yaml"
    bad.write_text("configurations:\n  - name: a\n    paths: [sidecar]\n")
    with pytest.raises(ModelError, match=r"plan.yaml: configurations\[0\].paths: unknown path mode 'sidecar'"):
        load_plan(bad)
    bad.write_text("rps: [0]\nconfigurations:\n  - name: a\n")
    with pytest.raises(ModelError, match=r"plan.yaml: rps: rates must be > 0"):
        load_plan(bad)
    bad.write_text("configurations:\n  - name: a\n    paths: [client-lb]\n")
    with pytest.raises(ModelError, match=r"configurations\[0\].replicas: load-balancing paths need replicas >= 2"):
        load_plan(bad)
    with pytest.raises(MeshsimError, match="^plan: cannot read"):
        load_plan(tmp_path / "missing.yaml")


def _objects(mesh: str, topology: str = "single", features: tuple[str, ...] = ("mtls",)) -> list[dict]:
    plan = plan_from_dict({"topology": topology, "configurations": [
        {"name": "c", "features": list(features), "paths": ["baseline", "both-sidecars"]}]}, "test")
    conf = plan.configurations[0]
    return namespace_objects(NamespaceSpec("meshsim-probe-c-abc123", "run-1", conf), plan, mesh_profile(mesh))


def test_istio_objects_keep_baseline_ports_out_of_the_sidecar() -> None:
    objs = _objects("istio")
    ns = objs[0]
    assert ns["metadata"]["labels"]["istio-injection"] == "enabled"
    for obj in objs:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "meshsim" and labels["meshsim.io/run"] == "run-1"
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    assert by_name[("PeerAuthentication", "default")]["spec"]["mtls"]["mode"] == "STRICT"
    server = by_name[("Deployment", "server")]["spec"]["template"]
    assert server["metadata"]["annotations"]["traffic.sidecar.istio.io/excludeInboundPorts"] == str(BYPASS_PORT)
    client = by_name[("Deployment", "client")]["spec"]["template"]["metadata"]["annotations"]
    assert client["traffic.sidecar.istio.io/excludeOutboundPorts"] == f"{BYPASS_PORT},{SERVER_ONLY_PORT}"
    svc_ports = {p["port"]: p["targetPort"] for p in by_name[("Service", "server")]["spec"]["ports"]}
    assert svc_ports == {MESH_PORT: MESH_PORT, SERVER_ONLY_PORT: MESH_PORT, BYPASS_PORT: BYPASS_PORT}
    plaintext = {(o["kind"]): o for o in _objects("istio", features=())}
    assert plaintext["PeerAuthentication"]["spec"]["mtls"]["mode"] == "DISABLE"
    assert plaintext["DestinationRule"]["spec"]["trafficPolicy"]["tls"]["mode"] == "DISABLE"


def test_linkerd_and_traefik_objects() -> None:
    linkerd = _objects("linkerd")
    assert linkerd[0]["metadata"]["annotations"] == {"linkerd.io/inject": "enabled"}
    assert not any(o["kind"] == "PeerAuthentication" for o in linkerd)
    traefik = _objects("traefik", topology="chain3", features=())
    services = [o for o in traefik if o["kind"] == "Service"]
    assert all(s["metadata"]["annotations"] == {"mesh.traefik.io/traffic-type": "http"} for s in services)
    hop = next(o for o in traefik if o["kind"] == "Deployment" and o["metadata"]["name"] == "s1")
    args = hop["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "proxies"
    assert f"{MESH_PORT} http://s2.meshsim-probe-c-abc123.traefik.mesh:{MESH_PORT}" in args
    assert f"{BYPASS_PORT} http://s2.meshsim-probe-c-abc123.svc.cluster.local:{BYPASS_PORT}" in args
    assert [o["metadata"]["name"] for o in traefik if o["kind"] == "Deployment"] == ["s1", "s2", "s3", "client"]


def test_dry_run_prints_every_object_and_needs_no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))  # any contact with a cluster would fail
    out, err = io.StringIO(), io.StringIO()
    result = calibrate_kube(mesh="istio", dry_run=True, out=tmp_path / "runs", stdout=out, stderr=err)
    docs = list(yaml.safe_load_all(out.getvalue()))
    kinds = [d["kind"] for d in docs]
    # one namespace per configuration (mtls, plaintext, tracing, bursts, load-ladder, lb), a client and a server in each
    assert kinds.count("Namespace") == 6 and kinds.count("Deployment") == 12 and kinds.count("PeerAuthentication") == 6
    assert all(d["metadata"]["labels"]["meshsim.io/run"] == result.run for d in docs)
    assert "nothing was created" in err.getvalue()
    assert not (tmp_path / "runs").exists()


def test_cli_flags_call_the_library(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from meshsim.cli.kube_options import add_kube_calibrate_options, run_kube_calibrate

    parser = argparse.ArgumentParser()
    parser.add_argument("--out")  # shared with --lab: must not clash
    add_kube_calibrate_options(parser)
    args = parser.parse_args(["--kube", "--mesh", "traefik", "--dry-run", "--namespace-prefix", "mp",
                              "--out", str(tmp_path)])
    assert run_kube_calibrate(args) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert all(d["metadata"].get("namespace", d["metadata"]["name"]).startswith("mp-") for d in docs)
    with pytest.raises(MeshsimError, match="^namespace_prefix: "):
        run_kube_calibrate(parser.parse_args(["--kube", "--dry-run", "--namespace-prefix", "Bad_Prefix"]))
    with pytest.raises(MeshsimError, match="^mesh: unknown mesh 'consul'"):
        run_kube_calibrate(parser.parse_args(["--kube", "--dry-run", "--mesh", "consul"]))


def test_only_a_gone_owner_on_this_host_makes_a_namespace_an_orphan() -> None:
    import socket
    import subprocess
    import sys

    from meshsim.calibrate.measure.kube.cluster import owner_is_gone, owner_tag
    from meshsim.calibrate.measure.process_identity import pid_start_ticks

    assert not owner_is_gone(owner_tag())  # this very process: alive
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = pid_start_ticks(gone.pid)
    gone.wait()
    host = socket.gethostname()
    assert ticks is not None and owner_is_gone(f"{host}/{gone.pid}/{ticks}")
    assert not owner_is_gone(f"another-host/{gone.pid}/{ticks}")  # never judge another machine's processes
    assert not owner_is_gone(f"{host}/{gone.pid}")  # unparsable: left alone
    assert not owner_is_gone("")
