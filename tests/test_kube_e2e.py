"""Whole `meshsim calibrate --kube` end to end through the API server's service proxy to real fortio processes.

The kwok node ``kwok-netns`` has a pod CIDR routed into a network namespace this test session made itself: once
kwok reports the pods Running, the test gives their addresses to that namespace and starts real fortio there
(the client's REST API on the client pod's address, the echo server on the server pod's), with the Service's
DNS name in the namespace's own hosts file. The API server then proxies the probe's REST call to the "pod" and
fortio sends its load to the "server pod": all of it inside the test's namespace, nothing anywhere else.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from kube_cluster import ControlPlane, require, session_control_plane
from meshsim.calibrate.measure.kube import calibrate_kube
from meshsim.calibrate.measure.kube.probe_plan import plan_from_dict
from meshsim.run_folder import read_manifest

pytestmark = pytest.mark.kube


def _wait_listening(netns: str, ip: str, port: int, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["ip", "netns", "exec", netns, "ss", "-ltnH", f"src {ip}:{port}"],
                             capture_output=True, text=True).stdout
        if out.strip():
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listening on {ip}:{port} in {netns}")


def test_calibration_through_the_service_proxy_to_real_fortio(request: pytest.FixtureRequest,
                                                             tmp_path: Path) -> None:
    fortio = str(require("fortio"))
    cp: ControlPlane = session_control_plane(request)
    if cp.netns is None:
        message = "needs root to make its own network namespace (ip netns)"
        pytest.fail(message) if os.environ.get("CI") == "true" else pytest.skip(message)
    netns = cp.netns
    started: dict[str, Any] = {}

    def start_pods(step: str, info: dict[str, Any]) -> None:
        if step != "probe" or started:
            return
        ns = info["namespace"]
        pods = cp.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        for pod in pods:
            ip, app = pod["status"]["podIP"], pod["metadata"]["labels"]["app.kubernetes.io/name"]
            assert ip.startswith("10.213.0."), ip  # inside the test's namespace, nowhere else
            netns.add_address(ip)
            ports = [8080, 8077] if app == "server" else [8080]
            for port in ports:
                proc = netns.spawn([fortio, "server", "-http-port", f"{ip}:{port}", "-grpc-port", "disabled",
                                    "-redirect-port", "disabled", "-tcp-port", "disabled", "-udp-port", "disabled"],
                                   tmp_path / f"{app}-{port}.log")
                started[f"{app}:{port}"] = proc
            if app == "server":
                netns.add_host(ip, f"server.{ns}.svc.cluster.local")
            for port in ports:
                _wait_listening(netns.name, ip, port)

    plan = plan_from_dict({"duration_s": 2, "rps": [50], "ready_timeout_s": 60, "resources": {},
                           "node_selector": {"meshsim.test/node": "netns"},
                           "configurations": [{"name": "e2e", "paths": ["baseline"]}]}, "e2e-plan")
    err = io.StringIO()
    result = calibrate_kube(kubeconfig=str(cp.kubeconfig), context="admin", plan=plan, out=tmp_path / "runs",
                            on_step=start_pods, stderr=err)
    try:
        assert len(result.written) == 1, err.getvalue()
        manifest = read_manifest(result.written[0])
        assert "service proxy" in manifest.provenance
        assert manifest.load.url.startswith(f"http://server.{result.namespaces[0]}.svc.cluster.local:8077/echo")
        fortio_result = json.loads((result.written[0] / "fortio.json").read_text())
        assert fortio_result["URL"] == manifest.load.url
        assert 95 <= fortio_result["RetCodes"]["200"] <= 101  # 50 rps x 2 s, all through the netns "pods"
        assert cp.managed_namespaces() == []
    finally:
        for proc in started.values():
            proc.terminate()
        for proc in started.values():
            proc.wait(timeout=10)
    assert all(proc.poll() is not None for proc in started.values())
