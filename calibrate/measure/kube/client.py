"""A thin JSON client over the kubernetes Python client: kubeconfig, auth and TLS come from the official
client; requests and watches are plain JSON so manifests stay plain dicts (the same ones ``--dry-run`` prints).

Every failure becomes one line naming what went wrong: no kubeconfig, unreachable API server, forbidden
(verb and resource), missing API (a mesh's CRDs not installed), or the API server's own message.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from meshsim.errors import ComponentMissing, FieldError, MeshsimError, RunFailed

_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class Forbidden(MeshsimError):
    """The credentials lack a permission (RBAC)."""


class NotFound(RunFailed):
    """The object or the whole API does not exist."""


@dataclass(frozen=True)
class Target:
    kubeconfig: str
    context: str
    host: str


def _kubeconfig_path(kubeconfig: str | None) -> str:
    if kubeconfig:
        if not Path(kubeconfig).is_file():
            raise FieldError("kubeconfig", f"{kubeconfig} does not exist")
        return kubeconfig
    env = os.environ.get("KUBECONFIG", "")
    for candidate in [p for p in env.split(os.pathsep) if p]:
        if Path(candidate).is_file():
            return candidate
    default = Path.home() / ".kube" / "config"
    if default.is_file():
        return str(default)
    raise FieldError("kubeconfig", "none found: give a kubeconfig file or set KUBECONFIG "
                                   f"({env or default} does not exist)")


def _resource_of(path: str) -> str:
    """'/apis/apps/v1/namespaces/x/deployments/y' -> 'deployments.apps'; for error messages only."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    group = "" if parts[:1] == ["api"] else (parts[1] if len(parts) > 1 else "")
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    resource = rest[0] if rest else "?"
    if len(rest) >= 3:  # subresource, e.g. services/x/proxy
        resource = f"{resource}/{rest[2]}"
    return f"{resource}.{group}" if group else resource


class KubeApi:
    """One API server connection (one kubeconfig context)."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, timeout_s: float = 30.0) -> None:
        try:
            from kubernetes import client, config
        except ImportError:  # pragma: no cover - depends on the install
            raise ComponentMissing("the kubernetes Python client is missing; install it with: "
                                   "pip install 'meshsim[kube]'") from None
        path = _kubeconfig_path(kubeconfig)
        configuration = client.Configuration()
        try:
            config.load_kube_config(config_file=path, context=context, client_configuration=configuration,
                                    persist_config=False)
        except config.ConfigException as exc:
            field = "context" if context and "context" in str(exc).lower() else "kubeconfig"
            raise FieldError(field, f"{path}: {str(exc).splitlines()[0]}") from None
        configuration.retries = 0  # an unreachable API server should fail now, not after urllib3's retries
        self.client = client.ApiClient(configuration)
        self.timeout_s = timeout_s
        self.target = Target(kubeconfig=path, context=context or "(current)", host=configuration.host)

    def close(self) -> None:
        self.client.close()

    # -- requests -------------------------------------------------------------------------------------------
    def _send(self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None,
              timeout_s: float | None = None, stream: bool = False, content_type: str = "application/json",
              accept: str = "application/json") -> Any:
        import urllib3

        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        method_, url, headers, body_, _ = self.client.param_serialize(
            method=method, resource_path=path, query_params=list((query or {}).items()),
            header_params=headers, body=body, auth_settings=["BearerToken"])
        try:
            response = self.client.call_api(method_, url, header_params=headers, body=body_,
                                            _request_timeout=timeout_s or self.timeout_s)
        except ApiException as exc:  # pragma: no cover - call_api only raises for transport problems
            raise RunFailed(f"API server {self.target.host}: {exc.reason}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise RunFailed(f"cannot reach the Kubernetes API server at {self.target.host} "
                            f"(kubeconfig {self.target.kubeconfig}, context {self.target.context}): "
                            f"{str(reason).splitlines()[0]}") from None
        if stream and 200 <= response.status < 300:
            return response.response
        data = response.read()
        if not 200 <= response.status < 300:
            self._raise(method, path, response.status, data, query)
        return data

    def _raise(self, method: str, path: str, status: int, data: bytes, query: Mapping[str, Any] | None) -> None:
        try:
            status_obj = json.loads(data)
            message = str(status_obj.get("message") or status_obj)
        except (ValueError, AttributeError):
            message = data.decode("utf-8", "replace").strip()[:300] or f"HTTP {status}"
        verb = _VERBS.get(method, method.lower())
        if method == "GET" and query and query.get("watch"):
            verb = "watch"
        elif method == "GET" and path.rstrip("/").split("/")[-1] in ("namespaces", "pods", "events", "nodes",
                                                                       "services", "deployments"):
            verb = "list"
        resource = _resource_of(path)
        if status == 401:
            raise MeshsimError(f"API server {self.target.host} rejected the credentials of context "
                               f"{self.target.context} (401 Unauthorized)")
        if status == 403:
            raise Forbidden(f"forbidden: cannot {verb} {resource} on {self.target.host} "
                            f"(context {self.target.context}): {message}")
        if status == 404:
            raise NotFound(f"{verb} {resource}: not found ({message})")
        raise RunFailed(f"{verb} {resource} failed (HTTP {status}): {message}")

    def get(self, path: str, query: Mapping[str, Any] | None = None, timeout_s: float | None = None) -> Any:
        return json.loads(self._send("GET", path, query=query, timeout_s=timeout_s))

    def get_raw(self, path: str, query: Mapping[str, Any] | None = None, timeout_s: float | None = None) -> bytes:
        return self._send("GET", path, query=query, timeout_s=timeout_s, accept="*/*")

    def post(self, path: str, body: Any, timeout_s: float | None = None, query: Mapping[str, Any] | None = None,
             accept: str = "application/json") -> bytes:
        return self._send("POST", path, body=body, timeout_s=timeout_s, query=query, accept=accept)

    def delete(self, path: str, body: Any = None) -> Any:
        return json.loads(self._send("DELETE", path, body=body))

    def watch(self, path: str, query: Mapping[str, Any], timeout_s: float) -> Iterator[dict[str, Any]]:
        """Watch events (dicts with type and object) until the server closes the watch after ``timeout_s``."""
        q = {**query, "watch": "true", "timeoutSeconds": max(1, int(timeout_s)), "allowWatchBookmarks": "false"}
        response = self._send("GET", path, query=q, timeout_s=timeout_s + 10, stream=True)
        buffer = b""
        try:
            for chunk in response.stream(amt=None, decode_content=False):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()


def object_path(manifest: Mapping[str, Any], plural: str) -> tuple[str, str]:
    """(collection path, object path) of a manifest, e.g. /apis/apps/v1/namespaces/ns/deployments[/name]."""
    api_version = manifest["apiVersion"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    ns = manifest["metadata"].get("namespace")
    collection = f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
    return collection, f"{collection}/{manifest['metadata']['name']}"
