"""A real Kubernetes control plane for the --kube tests, started once per session on 127.0.0.1.

etcd (Debian's etcd-server) + kube-apiserver (RBAC, token auth, self-signed serving cert) + kube-scheduler +
kube-controller-manager (namespace deletion completes, Deployments get pods, EndpointSlices appear) + kwok with
its stage files, so pods on a fake node reach Running. Ports are picked free, everything lives in a temp dir,
every process is stopped by its pid at the end, and ends with the test process if that is killed first (SIGKILL,
a killed xdist worker): each asks the kernel for SIGKILL when its parent dies (meshsim.parent_death).

No traffic ever leaves the machine: the fake node's InternalIP is 127.0.0.1 (the API server refuses to proxy to
it), and pod IPs come from a pod CIDR that is either loopback (never routed, the API server refuses EndpointSlices
on it) or, as root, routed into a network namespace this fixture creates itself (``NetnsLab``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from typing import Iterator

import pytest
import yaml

from meshsim.errors import ComponentMissing
from kube_netns import NETNS_CIDR, NetnsLab
from meshsim.calibrate.measure.lab.binaries import find_binary
from meshsim.parent_death import Parent, start_program

ADMIN_TOKEN = "meshsim-test-admin"
LIMITED_TOKEN = "meshsim-test-limited"
LOOP_CIDR = "127.77.0.0/24"  # pod IPs of the ordinary node: loopback, so never reachable as a pod address
KWOK_FAIL_IMAGE = "registry.invalid/meshsim/fortio:does-not-exist"
STAGES_FILE = Path(__file__).with_name("kube_kwok_stages.yaml")


def require(name: str) -> Path:
    """A real binary, or fail under CI=true / skip with the install command otherwise."""
    try:
        return find_binary(name)
    except ComponentMissing as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)




@dataclass
class ControlPlane:
    """A running control plane; ``kubeconfig`` has contexts ``admin`` (system:masters) and ``limited`` (no rights)."""

    workdir: Path
    kubeconfig: Path
    host: str
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    netns: NetnsLab | None = None

    def request(self, method: str, path: str, body: dict | None = None, token: str = ADMIN_TOKEN) -> dict:
        """Raw HTTPS to the API server (used by tests to look at state independently of the code under test)."""
        ctx = ssl.create_default_context(cafile=str(self.workdir / "serving.crt"))
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.host + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return json.loads(resp.read())

    def managed_namespaces(self) -> list[str]:
        items = self.request("GET", "/api/v1/namespaces?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dmeshsim")
        return [ns["metadata"]["name"] for ns in items["items"]]

    def existing(self, namespaces: list[str]) -> list[str]:
        """Those of ``namespaces`` the API server still has, each read by name (a list by label may come from its
        watch cache, a moment behind)."""
        left = []
        for name in namespaces:
            try:
                self.request("GET", f"/api/v1/namespaces/{name}")
                left.append(name)
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
        return left

    def wait_namespaces_gone(self, timeout_s: float = 60) -> list[str]:
        deadline = time.monotonic() + timeout_s
        left = self.managed_namespaces()
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = self.managed_namespaces()
        return left

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.netns is not None:
            self.netns.stop()


def _wait_http(url: str, timeout_s: float, proc: subprocess.Popen, log: Path, token: str = "",
               cafile: Path | None = None) -> None:
    ctx = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited ({proc.returncode}); log tail: {log.read_text()[-1500:]}")
        try:
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
            with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout_s} s; log tail: {log.read_text()[-1500:]}")


def ends_with_this_process() -> functools.partial:
    """``preexec_fn`` of a program the fixture starts: it gets SIGKILL when this process dies, so a killed pytest
    leaves no etcd, API server or fortio under PID 1 (the lab's supervisor starts its programs so)."""
    return functools.partial(start_program, Parent.here())


def spawn(cp: ControlPlane, name: str, argv: list[str]) -> subprocess.Popen:
    """Start ``argv`` in ``cp``'s folder, logging to NAME.log; it ends with this process."""
    log = cp.workdir / f"{name}.log"
    # No HTTP proxy from the environment: the API server's service proxy must dial pod addresses directly.
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=cp.workdir,
                            start_new_session=True, env=env, preexec_fn=ends_with_this_process())
    cp.procs[name] = proc
    return proc


def start_control_plane() -> ControlPlane:
    bins = {n: require(n) for n in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")}
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test API server's certificates") if os.environ.get(
            "CI") == "true" else pytest.skip("openssl missing: apt-get install -y openssl")
    work = Path(tempfile.mkdtemp(prefix="meshsim-kube-"))
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "serving.key", "-out", "serving.crt",
             "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", cwd=work)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=work)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=work)
    (work / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,uid-admin,"system:masters"\n'
                                     f'{LIMITED_TOKEN},limited,uid-limited,""\n')
    port = free_port()
    host = f"https://127.0.0.1:{port}"
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "admin",
        "clusters": [{"name": "test", "cluster": {"server": host, "certificate-authority": str(work / "serving.crt")}}],
        "users": [{"name": "admin", "user": {"token": ADMIN_TOKEN}},
                  {"name": "limited", "user": {"token": LIMITED_TOKEN}}],
        "contexts": [{"name": "admin", "context": {"cluster": "test", "user": "admin"}},
                     {"name": "limited", "context": {"cluster": "test", "user": "limited"}}],
    }))
    cp = ControlPlane(workdir=work, kubeconfig=kubeconfig, host=host)
    try:
        etcd_port, peer_port = free_port(), free_port()
        etcd = spawn(cp, "etcd", [
            str(bins["etcd"]), "--data-dir", str(work / "etcd"), "--name", "default",
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer_port}"])
        _wait_http(f"http://127.0.0.1:{etcd_port}/health", 30, etcd, work / "etcd.log")
        api = spawn(cp, "kube-apiserver", [
            str(bins["kube-apiserver"]), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--tls-cert-file={work / 'serving.crt'}", f"--tls-private-key-file={work / 'serving.key'}",
            f"--token-auth-file={work / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={work / 'sa.pub'}",
            f"--service-account-signing-key-file={work / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16", "--endpoint-reconciler-type=none",
            f"--cert-dir={work / 'apiserver-certs'}",
            # Streaming lists need etcd's watch progress (etcd >= 3.4.31/3.5.13); Debian's 3.4.23 lacks it and
            # clients' watches would break and re-list with back-off. Serve plain list+watch instead.
            "--feature-gates=WatchList=false"])
        _wait_http(f"{host}/readyz", 90, api, work / "kube-apiserver.log", ADMIN_TOKEN, work / "serving.crt")
        sched_port, kcm_port = free_port(), free_port()
        spawn(cp, "kube-scheduler", [
            str(bins["kube-scheduler"]), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={sched_port}", f"--cert-dir={work / 'sched-certs'}"])
        spawn(cp, "kube-controller-manager", [
            str(bins["kube-controller-manager"]), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={kcm_port}", f"--cert-dir={work / 'kcm-certs'}",
            f"--service-account-private-key-file={work / 'sa.key'}", f"--root-ca-file={work / 'serving.crt'}",
            "--use-service-account-credentials=false", "--concurrent-namespace-syncs=5",
            # Only what the tests need: no node-lifecycle controller (kwok's fake nodes send no heartbeats, it
            # would taint them unreachable) and less CPU on a shared machine.
            "--controllers=namespace-controller,deployment-controller,replicaset-controller,"
            "endpointslice-controller,serviceaccount-controller,serviceaccount-token-controller,"
            "root-ca-certificate-publisher-controller"])
        stages = work / "kwok-stages.yaml"
        stages.write_text(STAGES_FILE.read_text().replace("__FAIL_IMAGE__", KWOK_FAIL_IMAGE))
        spawn(cp, "kwok", [
            str(bins["kwok"]), f"--kubeconfig={kubeconfig}", f"--config={stages}",
            "--manage-all-nodes=false", "--manage-nodes-with-label-selector=meshsim.test/kwok=true",
            "--node-ip=127.0.0.1", f"--cidr={LOOP_CIDR}", "--server-address=127.0.0.1:0"])
        cp.netns = NetnsLab.create()
        _add_node(cp, "kwok-loop", LOOP_CIDR, "loop")
        if cp.netns is not None:
            _add_node(cp, "kwok-netns", NETNS_CIDR, "netns")
        _wait_nodes_ready(cp)
    except BaseException:
        cp.stop()
        raise
    return cp


def _add_node(cp: ControlPlane, name: str, cidr: str, role: str) -> None:
    cp.request("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"meshsim.test/kwok": "true", "meshsim.test/node": role,
                                              "kubernetes.io/hostname": name, "type": "kwok"}},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
    })
    # Admission adds a not-ready taint on create; the node-lifecycle controller (not run: kwok sends no
    # heartbeats) would lift it. Lift it here: updates are not re-tainted.
    for _ in range(20):  # kwok updates the node's status meanwhile: retry on conflict
        node = cp.request("GET", f"/api/v1/nodes/{name}")
        node["spec"]["taints"] = []
        try:
            cp.request("PUT", f"/api/v1/nodes/{name}", node)
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise
            time.sleep(0.1)
    raise RuntimeError(f"could not lift the not-ready taint of node {name}")


def _wait_nodes_ready(cp: ControlPlane, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        nodes = cp.request("GET", "/api/v1/nodes")["items"]
        ready = [n for n in nodes if any(c["type"] == "Ready" and c["status"] == "True"
                                         for c in n.get("status", {}).get("conditions", []))]
        # The default ServiceAccount must exist too (admission refuses pods otherwise).
        if nodes and len(ready) == len(nodes):
            try:
                cp.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
                return
            except OSError:
                pass
        time.sleep(0.3)
    raise RuntimeError(f"kwok nodes not ready after {timeout_s} s; kwok log: "
                       f"{(cp.workdir / 'kwok.log').read_text()[-1500:]}")


def session_control_plane(request: pytest.FixtureRequest) -> ControlPlane:
    """The session's control plane (the ``kube_control_plane`` fixture of tests/conftest.py): started on first use,
    stopped at the session's teardown (which pytest-xdist workers run; config clean-ups they do not)."""
    cp: ControlPlane = request.getfixturevalue("kube_control_plane")
    return cp


def control_plane_for_session() -> Iterator[ControlPlane]:
    cp = start_control_plane()
    try:
        yield cp
    finally:
        cp.stop()
        shutil.rmtree(cp.workdir, ignore_errors=True)
