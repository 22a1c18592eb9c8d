"""The lab's span collector's count of received spans, read around a probe's load: how many spans a traced run
exported, once the Envoys' reporters have flushed their last batch."""

from __future__ import annotations

import json
import time
import urllib.request

from meshsim.calibrate.measure.lab.envoy_config import ZIPKIN_FLUSH_MS
from meshsim.calibrate.measure.lab.running import LabState


def collector_spans(state: LabState) -> int | None:
    if state.collector_port is None:
        return None
    with urllib.request.urlopen(f"http://127.0.0.1:{state.collector_port}/stats", timeout=2) as resp:  # noqa: S310
        return int(json.load(resp)["spans"])


def wait_for_span_export(state: LabState, limit_s: float = 5.0) -> None:
    """Span export finishes after the last response: wait until the count holds still for longer than a flush
    interval (a last batch smaller than the flush size waits for the reporter's timer)."""
    settle_s = ZIPKIN_FLUSH_MS / 1000 + 0.3
    time.sleep(settle_s)
    deadline = time.monotonic() + limit_s
    last = collector_spans(state)
    while time.monotonic() < deadline:
        time.sleep(settle_s)
        now = collector_spans(state)
        if now == last:
            return
        last = now
