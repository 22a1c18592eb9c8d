"""The Prometheus client's credentials and TLS: secrets only from the environment or a file, in the Authorization
header only, never in a repr, an error or the command's output; TLS verified unless a CA is added. Against real
HTTP(S) servers on 127.0.0.1 that record what they were sent."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from meshsim.calibrate.measure.prometheus.prom_api import PrometheusApi, PrometheusError
from meshsim.calibrate.measure.prometheus.prom_credentials import (PASSWORD_VAR, TOKEN_VAR, USER_VAR, Credentials,
                                                                    load_credentials)
from meshsim.errors import MeshsimError

TOKEN = "s3cr3t-T0KEN-never-shown"
REPO = Path(__file__).resolve().parents[1]


class _Server:
    """A loopback HTTP(S) server answering every request with ``status`` and ``body``; records the headers."""

    def __init__(self, status: int, body: dict, tls: ssl.SSLContext | None = None) -> None:
        seen: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                seen.append({"path": self.path, **dict(self.headers)})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.seen = seen
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.port = self.httpd.server_address[1]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server_factory():
    servers: list[_Server] = []

    def make(status: int = 200, body: dict | None = None, tls: ssl.SSLContext | None = None) -> _Server:
        servers.append(_Server(status, body or {"status": "success", "data": {"resultType": "vector", "result": []}},
                               tls))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def test_token_from_the_environment_goes_in_the_header_only(server_factory):
    creds = load_credentials(environ={TOKEN_VAR: TOKEN})
    assert TOKEN not in repr(creds) and TOKEN not in creds.describe()
    server = server_factory(500, {"status": "error", "errorType": "internal", "error": "storage broke"})
    api = PrometheusApi(f"http://127.0.0.1:{server.port}", creds)
    assert TOKEN not in repr(api)
    with pytest.raises(PrometheusError) as caught:
        api.instant("up", 0)
    message = str(caught.value)
    assert "storage broke" in message and f"127.0.0.1:{server.port}" in message and "'up'" in message
    assert TOKEN not in message and "\n" not in message
    assert server.seen[0]["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in server.seen[0]["path"]


def test_basic_auth_from_a_file(tmp_path, server_factory):
    file = tmp_path / "creds.yaml"
    file.write_text(f"username: meshsim\npassword: {TOKEN}\n")
    creds = load_credentials(file, environ={})
    assert creds.kind == "basic" and TOKEN not in repr(creds)
    server = server_factory()
    assert PrometheusApi(f"http://127.0.0.1:{server.port}", creds).instant("up", 0) == []
    assert server.seen[0]["Authorization"].startswith("Basic ")


@pytest.mark.parametrize("text, problem", [
    (f"token: [{TOKEN}\n", "not YAML"),                       # the parser's error would quote the line
    (f"tokn: {TOKEN}\n", "expected the keys"),
    (f"username: u\n", "password is missing"),
    (f"token: {TOKEN}\npassword: {TOKEN}\n", "not both"),
])
def test_bad_credentials_files_name_the_file_never_the_secret(tmp_path, text, problem):
    file = tmp_path / "creds.yaml"
    file.write_text(text)
    with pytest.raises(MeshsimError) as caught:
        load_credentials(file, environ={})
    assert problem in str(caught.value) and str(file) in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_two_sources_and_half_of_basic_auth_are_refused(tmp_path):
    file = tmp_path / "creds.yaml"
    file.write_text(f"token: {TOKEN}\n")
    with pytest.raises(MeshsimError, match="one source"):
        load_credentials(file, environ={TOKEN_VAR: TOKEN})
    with pytest.raises(MeshsimError, match=PASSWORD_VAR):
        load_credentials(environ={USER_VAR: "u"})
    assert load_credentials(environ={}) == Credentials()


def test_urls_with_user_info_or_clear_text_to_another_host_are_refused():
    with pytest.raises(MeshsimError) as caught:
        PrometheusApi(f"https://u:{TOKEN}@prometheus.example:9090")
    assert TOKEN not in str(caught.value) and "MESHSIM_PROMETHEUS_TOKEN" in str(caught.value)
    bearer = Credentials("bearer", "the environment", secret=TOKEN)
    with pytest.raises(MeshsimError, match="plain http"):
        PrometheusApi("http://prometheus.example:9090", bearer)
    PrometheusApi("http://127.0.0.1:9090", bearer)  # loopback: nothing leaves the machine
    with pytest.raises(MeshsimError, match="expected http"):
        PrometheusApi("prometheus:9090")


def test_tls_is_verified_and_a_given_ca_is_trusted(tmp_path, server_factory):
    pytest.importorskip("cryptography")
    from meshsim.calibrate.measure.lab.certs import make_lab_pki

    ca, certs = make_lab_pki(tmp_path / "pki", ["localhost"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs["localhost"].cert, certs["localhost"].key)
    server = server_factory(tls=context)
    url = f"https://localhost:{server.port}"
    with pytest.raises(PrometheusError, match="not trusted.*--prometheus-ca"):
        PrometheusApi(url).instant("up", 0)
    assert PrometheusApi(url, ca_file=ca).instant("up", 0) == []
    with pytest.raises(MeshsimError, match="--prometheus-ca"):
        PrometheusApi(url, ca_file=tmp_path / "missing.pem")


def test_the_command_never_prints_the_token(server_factory):
    server = server_factory()  # an empty answer to every query: the metric is missing
    env = {**os.environ, TOKEN_VAR: TOKEN}
    out = subprocess.run([sys.executable, "-m", "meshsim", "validate", "--prometheus",
                          f"http://127.0.0.1:{server.port}", "--window", "5m", "--model", "models/meshes/istio.yaml",
                          "--topology", "single", "--metrics", "envoy"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "metric envoy_http_downstream_rq_time_bucket missing" in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 2  # the progress line and the error, no traceback
    assert TOKEN not in out.stdout + out.stderr
    assert all(h.get("Authorization") == f"Bearer {TOKEN}" for h in server.seen)
