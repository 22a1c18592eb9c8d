"""A real Prometheus for tests (``tools/install/prometheus.sh``): started on a configuration, bound to 127.0.0.1,
its data in a test folder, stopped by pid when the block ends; and its HTTP API's instant query."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

from conftest import require_component

READY_S = 60.0  # generous: the machine is shared
T = TypeVar("T")


def query(url: str, text: str, at: float | None = None) -> list[dict]:
    """An instant query's result list (``at``: Unix seconds; default now)."""
    params = {"query": text, **({"time": f"{at:.3f}"} if at is not None else {})}
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=5) as resp:
        return json.load(resp)["data"]["result"]


def poll(what: str, check: Callable[[], T], deadline_s: float = READY_S) -> T:
    """``check()`` until it is true (returned; an OSError counts as not yet); fail at the deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if value := check():
                return value
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail(f"{what}: not within {deadline_s:g} s")


def last_scrape(url: str) -> float:
    """When Prometheus last scraped any target (Unix seconds)."""
    return float(query(url, "max(timestamp(up))")[0]["value"][1])


@contextmanager
def real_prometheus(config: Path, folder: Path, targets: int) -> Iterator[str]:
    """Prometheus on ``config`` until the block ends; yields its URL once ``targets`` targets are up."""
    from meshsim.calibrate.measure.lab.supervisor import free_port

    binary = require_component("prometheus")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(folder / "prometheus.log", "wb") as log:
        server = subprocess.Popen([str(binary), f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
                                   f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    try:
        poll(f"{targets} targets scraped", lambda: len(query(url, "up == 1")) == targets)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
