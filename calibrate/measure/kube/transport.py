"""Running one probe: a POST to the fortio client's REST API (``/fortio/rest/run``, every JSON value a string),
either through the API server's service proxy (no kubectl, no port-forward) or straight to a fortio URL.
The answer is fortio's result JSON, checked by the calibration reader before it is kept.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol

from meshsim.errors import MeshsimError, RunFailed

from .client import KubeApi
from .meshes import REST_PORT
from .objects import CLIENT

REST_RUN = "fortio/rest/run"


@dataclass(frozen=True)
class FortioRequest:
    url: str
    rps: float
    connections: int
    duration_s: float
    resolution_s: float = 0.00001
    uniform: bool = False
    jitter: bool = False
    nocatchup: bool = False
    labels: str = ""

    def params(self) -> dict[str, str]:
        """fortio's REST API takes strings only (numbers as text, booleans as "on")."""
        params = {"url": self.url, "qps": f"{self.rps:g}", "c": str(self.connections), "t": f"{self.duration_s:g}s",
                  "r": f"{self.resolution_s:g}", "p": "50,75,90,99,99.9", "labels": self.labels}
        for key, on in (("uniform", self.uniform), ("jitter", self.jitter), ("nocatchup", self.nocatchup)):
            if on:
                params[key] = "on"
        return params


class Transport(Protocol):
    def prepare(self, namespace: str, timeout_s: float) -> None: ...

    def run(self, namespace: str, request: FortioRequest) -> bytes: ...


def _timeout(request: FortioRequest) -> float:
    return request.duration_s + 60.0  # fortio answers only when the run is over


class ServiceProxyTransport:
    """Through the API server: /api/v1/namespaces/NS/services/http:client:8080/proxy/fortio/rest/run."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def prepare(self, namespace: str, timeout_s: float) -> None:
        """Wait until the client Service has a ready endpoint: the proxy answers 503 before that."""
        path = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
        deadline = time.monotonic() + timeout_s
        while True:
            slices = self.api.get(path, {"labelSelector": f"kubernetes.io/service-name={CLIENT}"}).get("items", [])
            if any((ep.get("conditions") or {}).get("ready") for s in slices for ep in s.get("endpoints") or []):
                return
            if time.monotonic() >= deadline:
                raise RunFailed(f"service {CLIENT} in namespace {namespace} has no ready endpoint after "
                                f"{timeout_s:g} s: the API server cannot proxy probes to the fortio client")
            time.sleep(0.5)

    def run(self, namespace: str, request: FortioRequest) -> bytes:
        path = f"/api/v1/namespaces/{namespace}/services/http:{CLIENT}:{REST_PORT}/proxy/{REST_RUN}"
        try:
            return self.api.post(path, request.params(), timeout_s=_timeout(request), accept="*/*")
        except MeshsimError as exc:
            raise RunFailed(f"probe {request.labels}: fortio REST call through the API server failed: {exc}") from None


class DirectTransport:
    """Straight to a fortio REST endpoint (a local fortio, or a port-forward the user opened)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def prepare(self, namespace: str, timeout_s: float) -> None:
        pass

    def run(self, namespace: str, request: FortioRequest) -> bytes:
        body = json.dumps(request.params()).encode()
        req = urllib.request.Request(f"{self.base_url}/{REST_RUN}", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=_timeout(request)) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace").strip()[:200]
            raise RunFailed(f"probe {request.labels}: fortio REST call to {self.base_url} failed "
                            f"(HTTP {exc.code}): {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise RunFailed(f"probe {request.labels}: cannot reach fortio at {self.base_url}: "
                            f"{getattr(exc, 'reason', exc)}") from None


@dataclass(frozen=True)
class ProbeResult:
    data: dict[str, Any]
    raw: bytes
    checked: bool  # went through the calibration reader
    ok_requests: int
    summary: str


def parse_probe(raw: bytes, where: str) -> ProbeResult:
    """Check a fortio answer: valid result JSON, successful requests; through the calibration reader when present."""
    try:
        data = json.loads(raw)
    except ValueError:
        raise RunFailed(f"{where}: fortio answered with something that is not JSON: "
                        f"{raw[:120].decode('utf-8', 'replace')!r}") from None
    if not isinstance(data, dict) or "DurationHistogram" not in data:
        message = data.get("Error") or data.get("message") if isinstance(data, dict) else None
        raise RunFailed(f"{where}: fortio did not run the probe: {message or str(data)[:200]}")
    codes = data.get("RetCodes") or {}
    ok = sum(int(n) for code, n in codes.items() if str(code).isdigit() and 200 <= int(code) < 300)
    total = sum(int(n) for n in codes.values())
    if ok == 0:
        raise RunFailed(f"{where}: no successful request ({total} calls, return codes {dict(codes)}); "
                        f"not stored as a measurement")
    try:
        from meshsim.calibrate.measure.fortio_result import parse_result
    except ImportError:
        return ProbeResult(data, raw, False, ok, f"{ok}/{total} ok (raw JSON kept: calibration reader missing)")
    result = parse_result(data, where)
    hist = data["DurationHistogram"]
    pct = {p["Percentile"]: p["Value"] for p in hist.get("Percentiles") or []}
    shown = " ".join(f"p{k:g}={v * 1e3:.2f}ms" for k, v in pct.items() if k in (50, 90, 99))
    return ProbeResult(data, raw, True, result.ok_count, f"{result.ok_count}/{result.total_calls} ok {shown}")
