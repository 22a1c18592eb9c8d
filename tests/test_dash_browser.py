"""The what-if app in a real headless Chromium (Debian's chromium + chromium-driver), driven over WebDriver.

The app runs with the real simulator in a thread of this process. The browser loads it, the test changes the mesh
and the rate like a user, waits for the graphs to show the change, checks the page reports a bad rate instead of
crashing, that the browser logged no errors, and saves a screenshot under the test's tmp_path.

The WebDriver client is a few HTTP calls to chromedriver (W3C protocol): the selenium that dash[testing] pins
(3.141) cannot talk to urllib3 2.x, and nothing else is needed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.unmeasured]  # asserts no timing: may run beside the simulations

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage",
                  "--window-size=1400,1700"]
ENTER = "\ue007"
CONTROL = "\ue009"  # WebDriver key: pressed until sent again
INSTALL = "sudo tools/install/chromium.sh  (apt-get install chromium chromium-driver)"


def find(name: str, *candidates: str) -> str | None:
    for c in (shutil.which(name), *candidates):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    return None


def require_browser() -> tuple[str, str]:
    chromium = find("chromium", "/usr/bin/chromium", "/usr/lib/chromium/chromium")
    driver = find("chromedriver", "/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
    if chromium and driver:
        return chromium, driver
    missing = "chromium" if not chromium else "chromedriver"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{missing} is not installed; install with: {INSTALL}")
    pytest.skip(f"{missing} is not installed; install with: {INSTALL}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDriver:
    """Just enough of the W3C WebDriver protocol, spoken to a chromedriver this object starts and stops."""

    def __init__(self, chromium: str, chromedriver: str, profile: Path) -> None:
        self.port = free_port()
        self.process = subprocess.Popen([chromedriver, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        self.session = ""
        deadline = time.monotonic() + 20
        while True:
            try:
                self.call("GET", "/status")
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.close()
                    raise RuntimeError("chromedriver did not start")
                time.sleep(0.05)
        caps = {"browserName": "chrome", "goog:loggingPrefs": {"browser": "ALL"},
                "goog:chromeOptions": {"binary": chromium, "args": [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]}}
        self.session = self.call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})["sessionId"]

    def call(self, method: str, path: str, body: dict | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.load(response)["value"]
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"WebDriver {method} {path}: {exc.read().decode()[:400]}") from None

    def s(self, path: str) -> str:
        return f"/session/{self.session}{path}"

    def get(self, url: str) -> None:
        self.call("POST", self.s("/url"), {"url": url})

    def element(self, css: str) -> str:
        return next(iter(self.call("POST", self.s("/element"), {"using": "css selector", "value": css}).values()))

    def click(self, css: str) -> None:
        self.call("POST", self.s(f"/element/{self.element(css)}/click"), {})

    def type(self, css: str, text: str) -> None:
        """Replace the field's content like a user: select all, then type (WebDriver's clear would commit an
        empty value first)."""
        element = self.element(css)
        self.call("POST", self.s(f"/element/{element}/value"), {"text": CONTROL + "a" + CONTROL + text})

    def js(self, script: str, *args: Any) -> Any:
        return self.call("POST", self.s("/execute/sync"), {"script": script, "args": list(args)})

    def browser_log(self) -> list[dict]:
        return self.call("POST", self.s("/se/log"), {"type": "browser"})

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("GET", self.s("/screenshot"))))
        return path

    def wait(self, what: str, condition: Callable[[], Any], timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                state = self.js("return ['#message', '#progress-text'].map("
                                "s => (document.querySelector(s) || {}).innerText)")
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; page says {state}")
            time.sleep(0.1)

    def close(self) -> None:
        try:
            if self.session:
                self.call("DELETE", self.s(""))
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


# Reads what the page shows: trace names and x values of a graph, as drawn by plotly in the browser.
TRACES_JS = """
const div = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
if (!div || !div.data) { return null; }
return div.data.map(t => ({name: t.name || '', x: Array.from(t.x || []), mode: t.mode || ''}));
"""

TITLE_JS = """
const div = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
return div && div.layout && div.layout.title ? div.layout.title.text : null;
"""


def curve_traces(driver: WebDriver, graph: str) -> list[dict]:
    return [t for t in driver.js(TRACES_JS, graph) or [] if t["mode"] == "lines+markers"]


def meshes_drawn(driver: WebDriver, graph: str = "latency-graph") -> set[str]:
    return {t["name"].split()[0] for t in curve_traces(driver, graph)}


def text_of(driver: WebDriver, css: str) -> str:
    return driver.js("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css)


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` (a Dash app) served by werkzeug from a thread on a free loopback port; yields its URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        thread.join(timeout=10)


@pytest.fixture
def app_url():
    """The app with the real simulator, served on a free loopback port."""
    from meshsim.dash_app import create_app
    from meshsim.dash_app.sweep import PointSettings

    # Fewer, shorter points than the app's defaults keep the test quick; the code path is the same.
    app = create_app(settings=PointSettings(replications=2, requests_per_replication=500, coarse_points=3,
                                            fine_points=5))
    with serving(app) as url:
        yield url


@pytest.fixture
def browser(tmp_path):
    chromium, chromedriver = require_browser()
    driver = WebDriver(chromium, chromedriver, tmp_path / "chromium-profile")
    yield driver
    driver.close()


@contextmanager
def screenshot_on_failure(browser: "WebDriver", folder: Path) -> Iterator[None]:
    """A failed assertion leaves ``folder/failure.png``, the page as it was, for whoever reads the failure."""
    try:
        yield
    except AssertionError:
        browser.screenshot(folder / "failure.png")
        raise


def test_change_mesh_and_rate_in_headless_chromium(app_url, browser, tmp_path):
    with screenshot_on_failure(browser, tmp_path):
        drive_the_app(app_url, browser, tmp_path)


def drive_the_app(app_url: str, browser: WebDriver, tmp_path: Path) -> None:
    started = time.monotonic()
    browser.get(app_url)
    browser.wait("the first curves", lambda: meshes_drawn(browser) == {"istio", "linkerd"})
    first_view_s = time.monotonic() - started
    browser.wait("the utilisation panels", lambda: curve_traces(browser, "util-graph"))

    # Change the mesh: drop linkerd, add none (the no-mesh baseline).
    browser.click("#meshes input[value='linkerd']")
    browser.click("#meshes input[value='none']")
    browser.wait("the new mesh in the latency graph", lambda: meshes_drawn(browser) == {"istio", "none"})
    browser.wait("the new mesh in the CDF", lambda: {t["name"] for t in browser.js(TRACES_JS, "cdf-graph") or []}
                 >= {"istio predicted", "none predicted"})
    title = browser.wait("the proxy views", lambda: {t["name"] for t in browser.js(TRACES_JS, "proxy-graph") or []}
                         >= {"istio p50", "none p50"} and browser.js(TITLE_JS, "proxy-graph"))
    assert title.startswith("What each proxy sees at 1,000 rps")

    # Change the rate range: the curves must end at the new upper rate.
    browser.type("#rate-max", f"1500{ENTER}")
    browser.wait("curves ending at 1500 rps", lambda: curve_traces(browser, "latency-graph") and all(
        t["x"] and max(t["x"]) == 1500 for t in curve_traces(browser, "latency-graph")))
    table = browser.wait("the table at 1500 rps", lambda: "1500" in text_of(browser, "#table") and
                         text_of(browser, "#table"))
    assert "none" in table and "linkerd" not in table

    # A negative rate is reported on the page; the graphs keep their last good state.
    browser.type("#rate-min", f"-5{ENTER}")
    message = browser.wait("the error message", lambda: text_of(browser, "#message"))
    assert message == "rate from (rps): must be greater than 0, got -5"
    assert meshes_drawn(browser) == {"istio", "none"}
    browser.type("#rate-min", f"100{ENTER}")
    browser.wait("the message to clear", lambda: text_of(browser, "#message") == "")

    shot = browser.screenshot(tmp_path / "meshsim-dash.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    errors = [e for e in browser.browser_log() if e.get("level") == "SEVERE"]
    assert errors == [], errors
    print(f"first view after {first_view_s:.2f} s; screenshot {shot}")
