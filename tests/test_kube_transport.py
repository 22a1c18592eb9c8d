"""The probe transport: fortio's REST API (all values strings) and result parsing, against a real fortio on 127.0.0.1."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from kube_cluster import ends_with_this_process, free_port, require
from meshsim.calibrate.measure.kube.transport import DirectTransport, FortioRequest, parse_probe
from meshsim.errors import RunFailed


def start_fortio(tmp: Path, bind: str = "127.0.0.1:0") -> tuple[subprocess.Popen, str]:
    """A real `fortio server` (echo + REST API); returns the process and its base URL."""
    fortio = require("fortio")
    log = tmp / f"fortio-{time.monotonic_ns()}.log"
    proc = subprocess.Popen([str(fortio), "server", "-http-port", bind, "-grpc-port", "disabled",
                             "-redirect-port", "disabled", "-tcp-port", "disabled", "-udp-port", "disabled"],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=tmp,
                            preexec_fn=ends_with_this_process())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        match = re.search(r"http-echo server listening on tcp (\S+:\d+)", log.read_text())
        if match:
            return proc, f"http://{match.group(1)}"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"fortio did not start: {log.read_text()[-500:]}")


@pytest.fixture
def fortio(tmp_path: Path) -> Iterator[str]:
    proc, url = start_fortio(tmp_path)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_rest_run_returns_a_result_the_calibration_reader_accepts(fortio: str) -> None:
    request = FortioRequest(url=f"{fortio}/echo?size=1024", rps=50, connections=1, duration_s=2,
                            uniform=True, labels="kube-none-test-baseline-c1-q50")
    params = request.params()
    assert all(isinstance(v, str) for v in params.values())  # fortio's REST API wants strings only
    raw = DirectTransport(fortio).run("ns", request)
    result = parse_probe(raw, "probe test")
    assert result.checked  # went through meshsim.calibrate.measure.fortio_result
    data = result.data
    assert data["Labels"] == "kube-none-test-baseline-c1-q50"
    assert data["NumThreads"] == 1 and float(data["RequestedQPS"]) == 50
    assert 95 <= result.ok_requests <= 101  # 50 rps for 2 s, paced
    assert data["Uniform"] is True
    assert data["DurationHistogram"]["Count"] == result.ok_requests


def test_probe_against_a_stopped_service_is_a_failure_not_data(fortio: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}/echo"
    raw = DirectTransport(fortio).run("ns", FortioRequest(url=dead, rps=20, connections=1, duration_s=1))
    with pytest.raises(RunFailed, match="no successful request .* not stored as a measurement"):
        parse_probe(raw, "probe dead")


def test_unreachable_fortio_rest_api_is_one_line() -> None:
    base = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RunFailed, match=f"cannot reach fortio at {re.escape(base)}"):
        DirectTransport(base).run("ns", FortioRequest(url="http://127.0.0.1:1/", rps=1, connections=1, duration_s=1))


def test_garbage_answer_is_refused() -> None:
    with pytest.raises(RunFailed, match="not JSON"):
        parse_probe(b"<html>proxy error</html>", "probe x")
    with pytest.raises(RunFailed, match="fortio did not run the probe"):
        parse_probe(b'{"Error": "bad url"}', "probe x")
