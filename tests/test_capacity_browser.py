"""The Dash capacity view in a real headless Chromium: a user picks meshes, the load and an SLO, presses the button,
and the page draws one bar per mesh with its 95 % CI -- the numbers ``find_capacity`` (the CLI's function) gives for
the same options and seeds. A bad SLO is a line on the page, not a traceback.

Uses the WebDriver client of tests/test_dash_browser.py (Debian's chromium + chromedriver; under CI=true a missing
browser fails). The app runs with the real simulator in a thread of this process, on the view's own short settings
(3 bisections, 1 simulated second per probe) on the one-service topology.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

from meshsim.capacity_slo import parse_slo
from meshsim.request import PredictOptions
from meshsim.sim.experiments.capacity_search import find_capacity
from test_dash_browser import ENTER, WebDriver, require_browser, screenshot_on_failure, serving, text_of

pytestmark = [pytest.mark.browser, pytest.mark.unmeasured]  # asserts no timing: may run beside the simulations

MESHES = ["istio", "none"]  # what the test ticks (linkerd, ticked by default, is unticked)
SLO = "p99=4ms"

# The bars as plotly holds them in the page: x, y, the error bars and the hover's binding / bottleneck.
BARS_JS = """
const div = document.querySelector('#capacity-graph .js-plotly-plot');
if (!div || !div.data || !div.data.length) { return null; }
const t = div.data[0];
return {x: Array.from(t.x || []), y: Array.from(t.y || []),
        plus: Array.from((t.error_y || {}).array || []), minus: Array.from((t.error_y || {}).arrayminus || []),
        hover: Array.from(t.customdata || []).map(c => Array.from(c)), title: div.layout.title.text || ''};
"""


@pytest.fixture
def capacity_app_url() -> Iterator[str]:
    """The app (the real simulator and the real find_capacity) on a free loopback port, served from a thread."""
    from meshsim.dash_app import create_app
    from meshsim.dash_app.sweep import PointSettings

    # The curves the page draws on load are not under test: few, short points keep the machine free for the view.
    app = create_app(include_shipped=False, topologies=["single"], meshes=["istio", "linkerd", "none"],
                     settings=PointSettings(replications=2, requests_per_replication=300, coarse_points=3,
                                            fine_points=3))
    with serving(app) as url:
        yield url


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[WebDriver]:
    browser, chromedriver = require_browser()
    driver = WebDriver(browser, chromedriver, tmp_path / "chromium-profile")
    yield driver
    driver.close()


def expected_capacity(mesh: str) -> dict:
    """What the library gives for the options the page's controls describe (its defaults plus the test's choices)."""
    options = PredictOptions(topology="single", mesh=mesh, lb="client", load="open", connections=16, features=(),
                             seed=1, rps=100.0, duration_s=1.0, processes=1)
    return find_capacity(options, parse_slo(SLO), replications=3, processes=1).to_dict()


def test_capacity_bars_in_headless_chromium(capacity_app_url: str, chromium: WebDriver, tmp_path: Path) -> None:
    with screenshot_on_failure(chromium, tmp_path):
        drive_the_capacity_view(capacity_app_url, chromium, tmp_path)


def drive_the_capacity_view(url: str, browser: WebDriver, tmp_path: Path) -> None:
    browser.get(url)
    browser.wait("the capacity view", lambda: browser.js(BARS_JS) is not None)
    assert browser.js(BARS_JS)["x"] == []  # nothing is computed before the button is pressed
    browser.click("#meshes input[value='linkerd']")
    browser.click("#meshes input[value='none']")
    browser.click("#load input[value='open']")
    browser.type("#capacity-slo", f"{SLO}{ENTER}")
    started = time.monotonic()
    browser.click("#capacity-run")
    bars = browser.wait("one bar per mesh", lambda: (b := browser.js(BARS_JS)) and b["x"] == MESHES and b,
                        timeout=240)
    took = time.monotonic() - started
    assert SLO in bars["title"] and "2 mesh(es), 3 bisections each" in text_of(browser, "#capacity-message")
    for i, mesh in enumerate(MESHES):
        want = expected_capacity(mesh)  # the same options and seeds as the page's: the same numbers
        lo, hi = want["max_rps_ci95"]
        assert bars["y"][i] == want["max_rps"] and bars["y"][i] > 0, (mesh, bars, want)
        assert bars["minus"][i] == pytest.approx(want["max_rps"] - lo) and bars["minus"][i] > 0
        assert bars["plus"][i] == pytest.approx(hi - want["max_rps"]) and bars["plus"][i] > 0
        assert bars["hover"][i] == [want["binding"], want["bottleneck"]]
    assert bars["y"][MESHES.index("none")] > bars["y"][MESHES.index("istio")]  # sidecars cost capacity
    drawn = browser.js("return document.querySelectorAll('#capacity-graph g.errorbar').length")
    assert drawn == len(MESHES), drawn  # the error bars are on the screen, not only in the data
    shot = browser.screenshot(tmp_path / "capacity-view.png")

    # A bad SLO: one line on the page naming it; the bars are cleared; no traceback anywhere.
    browser.type("#capacity-slo", f"p99=soon{ENTER}")
    browser.click("#capacity-run")
    message = browser.wait("the SLO message", lambda: (m := text_of(browser, "#capacity-message")).startswith("SLO")
                           and m)
    assert message == "SLO: expected PERCENTILE=LIMIT like p99=20ms, got 'p99=soon'", message
    browser.wait("the bars to be cleared", lambda: browser.js(BARS_JS)["x"] == [])
    page = text_of(browser, "body")
    assert "Traceback" not in page and "internal error" not in page
    errors = [e for e in browser.browser_log() if e.get("level") == "SEVERE"]
    assert errors == [], errors
    print(f"bars after {took:.1f} s; screenshot {shot}")
