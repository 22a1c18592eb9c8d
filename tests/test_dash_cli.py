"""`meshsim dash`: the command serves the app on loopback, and bad flags give one line, not a traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from meshsim.cli.entry_point import build_parser, main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_defaults_bind_loopback_port_8050():
    args = build_parser().parse_args(["dash"])
    assert (args.host, args.port, args.measurements) == ("127.0.0.1", 8050, None)


def test_bad_flags_give_one_line(tmp_path, capsys):
    assert main(["dash", "--measurements", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("meshsim: error: --measurements:") and "\n" not in err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert main(["dash", "--port", str(busy.getsockname()[1])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("meshsim: error: --port: cannot listen on 127.0.0.1:") and "Traceback" not in err


def test_serves_the_app_until_interrupted(tmp_path):
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "meshsim", "dash", "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    page = response.read().decode()
                break
            except OSError:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "the app did not answer within 60 s"
                time.sleep(0.2)
        assert "<title>meshsim what-if</title>" in page
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_dash-layout", timeout=10) as response:
            layout = json.dumps(json.load(response))
        for control in ("topology", "meshes", "features", "rate-min", "rate-max", "connections", "cpu-limit"):
            assert f'"id": "{control}"' in layout
        assert '"ui":false' in page and '"props_check":false' in page  # debug and dev tools off
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert f"meshsim dash: http://127.0.0.1:{port}/" in err
    assert "Traceback" not in err
