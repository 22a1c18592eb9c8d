"""Benchmark of the what-if app's responsiveness in headless Chromium (not collected by pytest).

    python tests/bench_dash.py [--repeat 3]

Serves the app with its default interactive settings and the real simulator on a free loopback port, then times,
from the browser's point of view: the first view (navigation until both default meshes are drawn), a mesh change
(click until the new mesh is drawn), a rate change (Enter until every curve ends at the new rate), a feature
toggle (click until the curves change), and the full sweep. Each timing starts from a cold prediction cache for
what it asks (a fresh app per run), so it measures computation, not cache hits.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_dash_browser import (  # noqa: E402
    ENTER, TRACES_JS, WebDriver, curve_traces, meshes_drawn, require_browser, text_of,
)


def serve() -> tuple[str, object, threading.Thread]:
    from werkzeug.serving import make_server

    from meshsim.dash_app import create_app
    from meshsim.sim.engine_choice import load_compiled_engine

    app = create_app()
    load_compiled_engine()  # as `meshsim dash` does before it listens
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{server.server_port}/", server, thread


def p99_signature(driver: WebDriver) -> tuple:
    return tuple((t["name"], tuple(t["x"])) for t in driver.js(TRACES_JS, "latency-graph") or [])


def run_once(chromium: str, chromedriver: str, seed_rate: int) -> dict[str, float]:
    timings: dict[str, float] = {}
    url, server, thread = serve()  # a fresh app: an empty prediction cache
    with tempfile.TemporaryDirectory() as profile:
        driver = WebDriver(chromium, chromedriver, Path(profile))
        try:
            started = time.monotonic()
            driver.get(url)
            driver.wait("first view", lambda: meshes_drawn(driver) == {"istio", "linkerd"}, 60)
            timings["first view (empty cache)"] = time.monotonic() - started
            driver.type("#rate-min", f"{seed_rate}{ENTER}")
            started = time.monotonic()
            driver.wait("new rate floor", lambda: curve_traces(driver, "latency-graph") and all(
                t["x"] and min(t["x"]) == seed_rate for t in curve_traces(driver, "latency-graph")), 60)
            timings["rate change: first curves redrawn"] = time.monotonic() - started
            started = time.monotonic()
            driver.click("#meshes input[value='none']")
            driver.wait("mesh none", lambda: "none" in meshes_drawn(driver), 60)
            timings["mesh added: first point drawn"] = time.monotonic() - started
            before = p99_signature(driver)
            started = time.monotonic()
            driver.click("#features input[value='tracing']")
            driver.wait("tracing", lambda: p99_signature(driver) != before, 60)
            timings["feature toggled: curves redrawn"] = time.monotonic() - started
            started = time.monotonic()
            driver.wait("complete sweep", lambda: "all points computed" in text_of(driver, "#progress-text"), 300)
            timings["rest of the sweep completed"] = time.monotonic() - started
            severe = [e for e in driver.browser_log() if e.get("level") == "SEVERE"]
            if severe:
                print("browser errors:", severe, file=sys.stderr)
        finally:
            driver.close()
            server.shutdown()  # type: ignore[attr-defined]
            thread.join(timeout=10)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    chromium, chromedriver = require_browser()
    results: dict[str, list[float]] = {}
    for i in range(args.repeat):
        for key, value in run_once(chromium, chromedriver, seed_rate=111 + 7 * i).items():
            results.setdefault(key, []).append(value)
            print(f"run {i + 1}: {key}: {value:.2f} s", flush=True)
    print("\nmedian over runs (s):")
    for key, values in results.items():
        print(f"  {key:48s} {statistics.median(values):6.2f}   (max {max(values):.2f})")


if __name__ == "__main__":
    main()
