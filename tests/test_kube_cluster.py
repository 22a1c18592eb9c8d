"""`meshsim calibrate --kube` against a real kube-apiserver (+ scheduler, controller-manager, kwok fake nodes).

No mocks of the kubernetes client. Probes: kwok pods have no containers and pod addresses must never get
traffic, so these tests send the (real) fortio REST call to a real fortio on 127.0.0.1 and point its load at
a real fortio echo on 127.0.0.1 (``LoopbackTransport``); the service-proxy path end to end is in
test_kube_e2e.py, inside a network namespace the test makes itself.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from kube_cluster import KWOK_FAIL_IMAGE, ControlPlane, free_port, session_control_plane
from meshsim.calibrate.measure.kube import calibrate_kube
from meshsim.calibrate.measure.kube.probe_plan import KubePlan, plan_from_dict
from meshsim.calibrate.measure.kube.transport import DirectTransport, FortioRequest
from meshsim.errors import Interrupted, MeshsimError, RunFailed
from meshsim.run_folder import read_manifest
from test_kube_transport import start_fortio

pytestmark = pytest.mark.kube


@pytest.fixture(scope="module")
def cp(request: pytest.FixtureRequest) -> ControlPlane:
    return session_control_plane(request)


@pytest.fixture(scope="module")
def local_fortio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, url = start_fortio(tmp_path_factory.mktemp("fortio"))
    yield url
    proc.terminate()
    proc.wait(timeout=10)


class LoopbackTransport(DirectTransport):
    """The real REST call to a real fortio on 127.0.0.1, with the in-cluster target host replaced by that
    fortio's own echo (the in-cluster name does not resolve here, and kwok pods run nothing)."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.requests: list[FortioRequest] = []

    def run(self, namespace: str, request: FortioRequest) -> bytes:
        self.requests.append(request)
        return super().run(namespace, replace(request, url=re.sub(r"^http://[^/]+", self.base_url, request.url)))


def small_plan(**over: Any) -> KubePlan:
    data: dict[str, Any] = {
        "duration_s": 1, "rps": [20, 40], "ready_timeout_s": 30, "resources": {},
        "node_selector": {"meshsim.test/node": "loop"},
        "configurations": [{"name": "base", "paths": ["baseline"]}],
    }
    data.update(over)
    return plan_from_dict(data, "test-plan")


def run(cp: ControlPlane, tmp: Path, plan: KubePlan, transport: DirectTransport | None = None,
        **kw: Any) -> Any:
    kw.setdefault("stderr", io.StringIO())
    return calibrate_kube(kubeconfig=str(cp.kubeconfig), context=kw.pop("context", "admin"),
                          out=kw.pop("out", tmp / "runs"), plan=plan,
                          transport=(lambda api: transport) if transport else None, **kw)


def test_full_run_stores_probes_and_deletes_its_namespaces(cp: ControlPlane, tmp_path: Path,
                                                            local_fortio: str) -> None:
    transport = LoopbackTransport(local_fortio)
    seen: dict[str, Any] = {}

    def look(step: str, info: dict[str, Any]) -> None:
        if step == "probe" and "objects" not in seen:  # pods are Running (kwok) when the first probe starts
            ns = info["namespace"]
            seen["ns"] = cp.request("GET", f"/api/v1/namespaces/{ns}")
            seen["objects"] = {
                kind: cp.request("GET", f"{base}/namespaces/{ns}/{kind}")["items"]
                for kind, base in (("deployments", "/apis/apps/v1"), ("services", "/api/v1"), ("pods", "/api/v1"))}

    err = io.StringIO()
    result = run(cp, tmp_path, small_plan(), transport, on_step=look, stderr=err)
    assert len(result.written) == 2 and not result.left_behind
    assert cp.managed_namespaces() == []  # deleted, and deletion completed
    labels = seen["ns"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "meshsim" and labels["meshsim.io/run"] == result.run
    deployments = {d["metadata"]["name"] for d in seen["objects"]["deployments"]}
    assert deployments == {"server", "client"}
    pods = seen["objects"]["pods"]
    assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)
    assert all(p["metadata"]["labels"]["meshsim.io/run"] == result.run for p in pods + seen["objects"]["services"])
    assert [r.url for r in transport.requests] == [
        f"http://server.{seen['ns']['metadata']['name']}.svc.cluster.local:8077/echo?size=1024"] * 2
    manifest = read_manifest(result.written[0])
    assert manifest.source == "kube" and manifest.setup.path == "baseline" and manifest.load.rps == 20
    assert manifest.where["kubernetes_version"] == "v1.37.1"
    assert {n["name"] for n in manifest.where["nodes"]} >= {"kwok-loop"}
    assert manifest.where["pods"][0]["node"] == "kwok-loop"
    assert manifest.where["resource_source"] == "kubelet-summary"  # no metrics-server in this cluster
    assert "resource usage unavailable" in manifest.notes  # fake node: the API server refuses to proxy to it
    assert "[1/2]" in err.getvalue() and "[2/2]" in err.getvalue() and "left" in err.getvalue()


STEPS = ["namespace", "objects", "ready", "probe", "stored", "namespace-done", "cleanup"]


@pytest.mark.parametrize("kind,step", [("ctrl-c", s) for s in STEPS] + [("error", "objects"), ("error", "probe")])
def test_interruption_at_every_step_leaves_no_namespace(cp: ControlPlane, tmp_path: Path, local_fortio: str,
                                                        step: str, kind: str) -> None:
    def boom(at: str, info: dict[str, Any]) -> None:
        if at == step:
            if kind == "ctrl-c":
                raise KeyboardInterrupt
            raise RunFailed("injected failure")

    expected = Interrupted if kind == "ctrl-c" else RunFailed
    with pytest.raises(expected):
        run(cp, tmp_path, small_plan(rps=[20]), LoopbackTransport(local_fortio), on_step=boom)
    assert cp.managed_namespaces() == []


def test_resume_skips_finished_probes(cp: ControlPlane, tmp_path: Path, local_fortio: str) -> None:
    probes: list[str] = []

    def stop_at_second(step: str, info: dict[str, Any]) -> None:
        if step == "probe":
            probes.append(info["probe"])
            if len(probes) == 2:
                raise KeyboardInterrupt

    with pytest.raises(Interrupted, match="1 probes stored .* --resume"):
        run(cp, tmp_path, small_plan(), LoopbackTransport(local_fortio), on_step=stop_at_second)
    first = tmp_path / "runs" / probes[0]
    assert read_manifest(first).status == "ok"
    assert not (tmp_path / "runs" / probes[1]).exists()
    stamp = (first / "fortio.json").stat().st_mtime_ns
    with pytest.raises(MeshsimError, match="already holds 1 finished probes .* --resume"):
        run(cp, tmp_path, small_plan(), LoopbackTransport(local_fortio))
    again: list[str] = []
    result = run(cp, tmp_path, small_plan(), LoopbackTransport(local_fortio),
                 on_step=lambda s, i: again.append(i["probe"]) if s == "probe" else None, resume=True)
    assert again == [probes[1]] and result.resumed == [probes[0]]
    assert (first / "fortio.json").stat().st_mtime_ns == stamp
    assert read_manifest(tmp_path / "runs" / probes[1]).load.rps == 40
    assert cp.managed_namespaces() == []


def test_ready_timeout_names_the_pod_and_its_events(cp: ControlPlane, tmp_path: Path) -> None:
    plan = small_plan(node_selector={"meshsim.test/node": "nowhere"}, ready_timeout_s=4)
    started = time.monotonic()
    with pytest.raises(RunFailed) as err:
        run(cp, tmp_path, plan)
    message = str(err.value)
    assert time.monotonic() - started < 60
    assert "\n" not in message
    assert re.search(r"pods not ready after 4 s in namespace meshsim-probe-base-\w+: 2 not ready; pod \S+ is Pending",
                     message), message
    assert "FailedScheduling" in message and "node affinity/selector" in message
    assert cp.managed_namespaces() == []


def test_image_pull_failure_is_reported(cp: ControlPlane, tmp_path: Path) -> None:
    with pytest.raises(RunFailed, match=r"image pull failing for pod (server|client)-\S+ container \S+ "
                                        rf"\(image {re.escape(KWOK_FAIL_IMAGE)}, ErrImagePull\)"):
        run(cp, tmp_path, small_plan(image=KWOK_FAIL_IMAGE, ready_timeout_s=30))
    assert cp.managed_namespaces() == []


def test_forbidden_names_verb_and_resource(cp: ControlPlane, tmp_path: Path) -> None:
    with pytest.raises(MeshsimError, match=r"^forbidden: cannot create namespaces on https://127\.0\.0\.1:\d+ "
                                           r"\(context limited\): .*User \"limited\" cannot create"):
        run(cp, tmp_path, small_plan(), context="limited")


def test_connection_errors_are_one_line(cp: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = tmp_path / "dead-kubeconfig"
    config = yaml.safe_load(cp.kubeconfig.read_text())
    port = free_port()
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    dead.write_text(yaml.safe_dump(config))
    with pytest.raises(RunFailed, match=rf"^cannot reach the Kubernetes API server at https://127.0.0.1:{port} "):
        calibrate_kube(kubeconfig=str(dead), plan=small_plan(), out=tmp_path, stderr=io.StringIO())
    with pytest.raises(MeshsimError, match="^kubeconfig: .* does not exist"):
        calibrate_kube(kubeconfig=str(tmp_path / "nope"), plan=small_plan(), out=tmp_path, stderr=io.StringIO())
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(MeshsimError, match="^kubeconfig: none found: give a kubeconfig file or set KUBECONFIG"):
        calibrate_kube(plan=small_plan(), out=tmp_path, stderr=io.StringIO())
    with pytest.raises(MeshsimError, match="^context: .*nosuch"):
        calibrate_kube(kubeconfig=str(cp.kubeconfig), context="nosuch", plan=small_plan(), out=tmp_path,
                       stderr=io.StringIO())


ISTIO_CRDS = [("security.istio.io", "PeerAuthentication", "peerauthentications"),
              ("networking.istio.io", "DestinationRule", "destinationrules"),
              ("telemetry.istio.io", "Telemetry", "telemetries")]


def _crd(group: str, kind: str, plural: str) -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def test_istio_not_installed_then_objects_created_and_missing_injection_reported(
        cp: ControlPlane, tmp_path: Path) -> None:
    plan = small_plan(configurations=[{"name": "mtls", "features": ["mtls", "tracing"],
                                       "paths": ["baseline", "both-sidecars"]}])
    with pytest.raises(RunFailed, match="mesh istio: istio is not installed in this cluster "
                                        "\\(no sidecar injection webhook"):
        run(cp, tmp_path, plan, mesh="istio")
    # Pretend-install Istio's API surface: its CRDs, an injector webhook that never matches, a control plane.
    webhook = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": "istio-sidecar-injector-meshsim-test"},
               "webhooks": [{"name": "sidecar-injector.istio.io", "admissionReviewVersions": ["v1"],
                             "sideEffects": "None", "failurePolicy": "Ignore",
                             "clientConfig": {"url": "https://127.0.0.1:1/inject"},
                             "namespaceSelector": {"matchLabels": {"meshsim.test/never": "match"}},
                             "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                        "resources": ["pods"]}]}]}
    created: list[str] = []
    try:
        cp.request("POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", webhook)
        created.append("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
                       "istio-sidecar-injector-meshsim-test")
        for group, kind, plural in ISTIO_CRDS:
            cp.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _crd(group, kind, plural))
            created.append(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{group}")
        # ... and a control plane: istiod's Deployment (its image tag is the mesh version) and mesh config.
        cp.request("POST", "/api/v1/namespaces", {"metadata": {"name": "istio-system-meshsim-test"}})
        created.insert(0, "/api/v1/namespaces/istio-system-meshsim-test")
        cp.request("POST", "/api/v1/namespaces/istio-system-meshsim-test/configmaps", {
            "metadata": {"name": "istio"}, "data": {"mesh": "defaultProviders:\n  tracing: [zipkin]\n"}})
        cp.request("POST", "/apis/apps/v1/namespaces/istio-system-meshsim-test/deployments", {
            "metadata": {"name": "istiod"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "istiod"}},
                     "template": {"metadata": {"labels": {"app": "istiod"}}, "spec": {"containers": [
                         {"name": "discovery", "image": "docker.io/istio/pilot:1.24.3"}]}}}})
        time.sleep(2)  # CRDs become served asynchronously
        seen: dict[str, Any] = {}

        def look(step: str, info: dict[str, Any]) -> None:
            if step == "ready":
                ns = info["namespace"]
                seen["ns"] = cp.request("GET", f"/api/v1/namespaces/{ns}")
                seen["pa"] = cp.request("GET", f"/apis/security.istio.io/v1/namespaces/{ns}/peerauthentications")
                seen["dr"] = cp.request("GET", f"/apis/networking.istio.io/v1/namespaces/{ns}/destinationrules")
                seen["tel"] = cp.request("GET", f"/apis/telemetry.istio.io/v1/namespaces/{ns}/telemetries")
        err = io.StringIO()
        with pytest.raises(RunFailed, match=r"pod \S+ in namespace meshsim-probe-mtls-\w+ has no istio-proxy "
                                            r"container: the istio injection webhook did not inject it"):
            run(cp, tmp_path, plan, mesh="istio", on_step=look, stderr=err)
        assert "mesh istio 1.24.3" in err.getvalue()
        assert "istio's default tracing provider: zipkin" in err.getvalue()
        assert seen["ns"]["metadata"]["labels"]["istio-injection"] == "enabled"
        assert [o["spec"]["mtls"]["mode"] for o in seen["pa"]["items"]] == ["STRICT"]
        assert seen["dr"]["items"][0]["spec"]["trafficPolicy"]["tls"]["mode"] == "ISTIO_MUTUAL"
        assert seen["tel"]["items"][0]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "meshsim"
        assert cp.managed_namespaces() == []
    finally:
        for path in reversed(created):
            cp.request("DELETE", path)


_CLI_WITH_STACK_DUMPS = ("import faulthandler, runpy, signal; faulthandler.register(signal.SIGUSR1); "
                         "runpy.run_module('meshsim', run_name='__main__', alter_sys=True)")


def _stop_ignored_cli(proc: subprocess.Popen[str]) -> str:
    """A CLI that outlived its interrupt: each thread's pending, blocked and caught signals (/proc), its stacks
    (SIGUSR1), and what it printed; then SIGKILL."""
    masks = ""
    for task in sorted(Path(f"/proc/{proc.pid}/task").iterdir()):
        status = (task / "status").read_text().splitlines()
        signals = [line.replace("\t", "") for line in status if line.startswith(("SigPnd", "ShdPnd", "SigBlk", "SigC"))]
        masks += f"thread {task.name}: {' '.join(signals)}\n"
    proc.send_signal(signal.SIGUSR1)
    time.sleep(2)
    proc.kill()
    proc.wait(timeout=10)
    assert proc.stderr is not None
    return masks + proc.stderr.read()


def _start_cli_calibration(cp: ControlPlane, tmp_path: Path, name: str) -> tuple[subprocess.Popen[str], list[str]]:
    """``meshsim calibrate --kube`` as a user runs it, on a plan whose pods never get a node: it waits for them."""
    plan = tmp_path / f"{name}.yaml"
    plan.write_text(yaml.safe_dump({"duration_s": 1, "rps": [10], "ready_timeout_s": 120, "resources": {},
                                    "node_selector": {"meshsim.test/node": "nowhere"},
                                    "configurations": [{"name": name, "paths": ["baseline"]}]}))
    # `python -m meshsim` with its stacks dumped on SIGUSR1 (faulthandler): a CLI that ignores an interrupt tells where
    proc = subprocess.Popen([sys.executable, "-c", _CLI_WITH_STACK_DUMPS, "calibrate", "--kube", "--kubeconfig",
                             str(cp.kubeconfig), "--plan", str(plan), "--out", str(tmp_path / f"runs-{name}")],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "waiting for" in line:
            break
    return proc, lines


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_an_interrupt_on_the_cli_deletes_namespaces(cp: ControlPlane, tmp_path: Path, sig: signal.Signals) -> None:
    proc, lines = _start_cli_calibration(cp, tmp_path, "sig")
    made = cp.managed_namespaces()
    assert made, "the namespace should exist while waiting: " + "".join(lines)
    proc.send_signal(sig)
    try:
        code = proc.wait(timeout=60)  # the plan's ready timeout is 120 s: an ignored interrupt is told apart
    except subprocess.TimeoutExpired:
        pytest.fail(f"the CLI went on after {sig.name}; its stacks:\n" + "".join(lines) + _stop_ignored_cli(proc))
    assert proc.stderr is not None
    rest = proc.stderr.read()
    assert code == 130, "".join(lines) + rest
    assert "interrupted: 0 probes stored" in rest and "Traceback" not in rest
    assert cp.existing(made) == [], "".join(lines) + rest  # deleted before the CLI exited


def test_cleanup_deletes_the_namespaces_it_made_where_a_list_by_label_misses_them(cp: ControlPlane) -> None:
    """A list by label may come from the API server's watch cache, a moment behind a namespace just made."""
    from meshsim.calibrate.measure.kube.client import KubeApi
    from meshsim.calibrate.measure.kube.cluster import delete_run_namespaces

    cp.request("POST", "/api/v1/namespaces", {"metadata": {"name": "meshsim-known-only"}})  # no run label
    api = KubeApi(str(cp.kubeconfig))
    try:
        assert delete_run_namespaces(api, "run-x", known=["meshsim-known-only", "meshsim-never-made"]) == []
    finally:
        api.close()
    assert cp.existing(["meshsim-known-only"]) == []


def test_namespaces_of_a_killed_calibration_are_deleted_by_the_next_one(cp: ControlPlane, tmp_path: Path) -> None:
    killed, lines = _start_cli_calibration(cp, tmp_path, "killed")
    left = cp.managed_namespaces()
    assert len(left) == 1, "".join(lines)
    killed.kill()  # SIGKILL: no cleanup is possible
    killed.wait(timeout=10)
    assert cp.managed_namespaces() == left, "nothing deletes it until another calibration runs"
    follower, lines = _start_cli_calibration(cp, tmp_path, "follower")
    try:
        text = "".join(lines)
        assert f"left by a killed calibration on this host: {left[0]}" in text, text
        deadline = time.monotonic() + 60
        while left[0] in cp.managed_namespaces() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert left[0] not in cp.managed_namespaces()
    finally:
        follower.send_signal(signal.SIGINT)
        follower.wait(timeout=60)
    assert cp.managed_namespaces() == []


@pytest.mark.parametrize("mesh", ["istio", "linkerd", "traefik", "none"])
def test_workloads_of_every_mesh_and_chain_pass_server_side_validation(cp: ControlPlane, mesh: str) -> None:
    """Server-side dry run (?dryRun=All): the real API server validates and admits, and persists nothing."""
    from meshsim.calibrate.measure.kube.meshes import mesh_profile
    from meshsim.calibrate.measure.kube.objects import NamespaceSpec, namespace_objects

    plan = plan_from_dict({"topology": "chain3", "trace_collector": "collector.linkerd-jaeger:55678",
                           "configurations": [{"name": "v", "features": ["tracing"], "replicas": 2,
                                               "paths": ["baseline", "both-sidecars"]}]}, "validation-plan")
    scratch = f"meshsim-validate-{mesh}"
    cp.request("POST", "/api/v1/namespaces", {"metadata": {"name": scratch}})
    try:
        objs = namespace_objects(NamespaceSpec(scratch, "run-v", plan.configurations[0]), plan, mesh_profile(mesh))
        ns_obj = {**objs[0], "metadata": {**objs[0]["metadata"], "name": f"{scratch}-dry"}}
        assert cp.request("POST", "/api/v1/namespaces?dryRun=All", ns_obj)["metadata"]["labels"][
            "app.kubernetes.io/managed-by"] == "meshsim"
        checked = 0
        for obj in objs[1:]:
            if obj["apiVersion"].endswith("istio.io/v1"):
                continue  # Istio's CRDs are not installed here (covered by the injection test)
            base = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
            plural = {"Deployment": "deployments", "Service": "services"}[obj["kind"]]
            echoed = cp.request("POST", f"{base}/namespaces/{scratch}/{plural}?dryRun=All", obj)
            assert echoed["metadata"]["labels"]["meshsim.io/run"] == "run-v"
            checked += 1
        assert checked == 8  # s1, s2, s3, client: a Deployment and a Service each
        assert cp.request("GET", f"/apis/apps/v1/namespaces/{scratch}/deployments")["items"] == []
    finally:
        cp.request("DELETE", f"/api/v1/namespaces/{scratch}")
