"""A small client of Prometheus's HTTP API (``/api/v1/query``, ``/api/v1/query_range``), on urllib.

TLS is verified against the system's CAs, plus the one ``--prometheus-ca FILE`` adds; there is no switch to turn
verification off (a test server gets its CA passed, not an exception). Credentials (``prom_credentials``) go in the
Authorization header only, and only over TLS or to a loopback address. Every failure is one line naming the URL
(without any user info) and the query.
"""

from __future__ import annotations

import ipaddress
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from meshsim.calibrate.measure.prometheus.prom_credentials import Credentials
from meshsim.errors import MeshsimError


class PrometheusError(MeshsimError):
    """Prometheus could not be asked, or refused or could not answer a query."""


@dataclass(frozen=True)
class Sample:
    """One series of an instant vector: its labels and value."""

    labels: Mapping[str, str]
    value: float


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def checked_url(url: str, credentials: Credentials) -> str:
    """The base URL without a trailing slash; refused when it carries user info, is not http(s), or would send
    credentials in clear text to another machine."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MeshsimError(f"--prometheus {url!r}: expected http(s)://HOST[:PORT][/PATH]")
    if parts.username or parts.password:
        raise MeshsimError(f"--prometheus {parts.scheme}://...@{parts.hostname}: credentials do not belong in the URL "
                           "(it shows in process lists and logs); use MESHSIM_PROMETHEUS_TOKEN or "
                           "--prometheus-credentials FILE")
    if credentials.kind != "none" and parts.scheme == "http" and not _loopback(parts.hostname):
        raise MeshsimError(f"--prometheus {url}: refusing to send {credentials.describe()} over plain http to "
                           f"{parts.hostname}; use https")
    return url.rstrip("/")


@dataclass(frozen=True)
class PrometheusApi:
    url: str
    credentials: Credentials = Credentials()
    ca_file: str | Path | None = None
    timeout_s: float = 30.0
    _context: ssl.SSLContext = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", checked_url(self.url, self.credentials))
        context = ssl.create_default_context()
        if self.ca_file is not None:
            try:
                context.load_verify_locations(cafile=str(self.ca_file))
            except (OSError, ssl.SSLError) as exc:
                raise MeshsimError(f"--prometheus-ca {self.ca_file}: not a readable PEM CA file ({exc})") from None
        object.__setattr__(self, "_context", context)

    def instant(self, query: str, at: float) -> list[Sample]:
        """An instant query's vector (a scalar answer becomes one sample without labels)."""
        data = self._get("query", {"query": query, "time": f"{at:.3f}"})
        if data.get("resultType") == "scalar":
            return [Sample({}, float(data["result"][1]))]
        return [Sample(dict(r.get("metric") or {}), float(r["value"][1])) for r in data.get("result") or []]

    def range(self, query: str, start: float, end: float, step_s: float) -> list[tuple[Mapping[str, str],
                                                                                   list[tuple[float, float]]]]:
        """A range query's matrix: per series, its labels and (time, value) points."""
        data = self._get("query_range", {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                         "step": f"{step_s:g}"})
        return [(dict(r.get("metric") or {}), [(float(t), float(v)) for t, v in r.get("values") or []])
                for r in data.get("result") or []]

    def _get(self, endpoint: str, params: Mapping[str, str]) -> dict[str, Any]:
        where = f"prometheus {self.url}/api/v1/{endpoint} query {params['query']!r}"
        request = urllib.request.Request(f"{self.url}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}",
                                         headers={"Accept": "application/json", **self.credentials.header()})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._context) as resp:  # noqa: S310
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise PrometheusError(f"{where}: HTTP {exc.code} {_api_error(exc)}") from None
        except urllib.error.URLError as exc:
            raise PrometheusError(f"{where}: unreachable ({_reason(exc.reason)})") from None
        except (OSError, ValueError) as exc:
            raise PrometheusError(f"{where}: no usable answer ({type(exc).__name__}: {exc})") from None
        if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(body.get("data"), dict):
            raise PrometheusError(f"{where}: {body.get('error', 'not a success') if isinstance(body, dict) else body}")
        return body["data"]


def _api_error(exc: urllib.error.HTTPError) -> str:
    """Prometheus's own error text from an error response (``{"status": "error", "error": ...}``), else the reason."""
    try:
        body = json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        body = {}
    text = body.get("error") if isinstance(body, dict) else None
    return str(text or exc.reason).splitlines()[0] if (text or exc.reason) else ""


def _reason(reason: object) -> str:
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted: {reason.verify_message}; add its CA with --prometheus-ca FILE"
    return str(reason)
