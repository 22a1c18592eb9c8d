"""Validation through a real Prometheus agrees with validation of the fortio result of the same run.

A lab (both sidecars, one service) runs under a real Prometheus (configuration written here, 1 s scrapes, bound to
127.0.0.1, data in a temporary folder) scraping each Envoy's admin ``/stats/prometheus`` and the lab's process
exporter; fortio loads the lab for a few seconds and its result is stored as a run folder. The same model is then
validated twice on the same topology: against that run folder, and against Prometheus's window of the same load.

What must agree, and how closely: the measured percentiles within the Prometheus bucket they were interpolated in
(one bucket's width: Envoy's downstream time starts and ends inside the client's sidecar, fortio's a loopback hop
outside it), so the errors agree within that width over the measured value plus the simulator's own interval;
the rate within 10 %; each process's CPU within the spread of the same window's two halves. And the percentile
this code interpolates is the one Prometheus's ``histogram_quantile`` returns for the same buckets.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import require_component

pytestmark = pytest.mark.lab

MODEL = "models/meshes/istio.yaml"
REPO = Path(__file__).resolve().parents[1]
RPS, CONNECTIONS, SECONDS = 200.0, 2, 6.0
READY_S = 60.0  # generous: the machine is shared


def _config(envoys: dict[str, int], exporter_port: int) -> str:
    """Prometheus's configuration (JSON is YAML): each Envoy's admin, labelled with its workload, and the exporter."""
    envoy_targets = [{"targets": [f"127.0.0.1:{port}"], "labels": {"workload": name}} for name, port in envoys.items()]
    return json.dumps({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "envoy", "metrics_path": "/stats/prometheus", "static_configs": envoy_targets},
            {"job_name": "lab-processes", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}]})


def _query(url: str, query: str, at: float | None = None) -> list[dict]:
    params = {"query": query, **({"time": f"{at:.3f}"} if at is not None else {})}
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=5) as resp:
        return json.load(resp)["data"]["result"]


def _poll(what: str, check, deadline_s: float = READY_S):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if value := check():
                return value
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail(f"{what}: not within {deadline_s:g} s")


def _fortio_window(run_folder: Path) -> tuple[float, float]:
    """(start, end) in Unix seconds of fortio's timed load, from its result's StartTime and ActualDuration."""
    data = json.loads((run_folder / "fortio.json").read_text())
    text = re.sub(r"(\.\d{6})\d+", r"\1", data["StartTime"]).replace("Z", "+00:00")
    start = dt.datetime.fromisoformat(text).timestamp()
    return start, start + data["ActualDuration"] / 1e9


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One lab run seen by fortio and by Prometheus: (run folder, Prometheus URL, window start, end)."""
    require_component("fortio")
    require_component("envoy")
    prometheus = require_component("prometheus")
    from meshsim.calibrate.measure.lab.probe import ProbeSettings, probe
    from meshsim.calibrate.measure.lab.proc_exporter import ProcessExporter, Watched
    from meshsim.calibrate.measure.lab.running import Lab
    from meshsim.calibrate.measure.lab.spec import LabSpec
    from meshsim.calibrate.measure.lab.supervisor import free_port

    tmp = tmp_path_factory.mktemp("prometheus-lab")
    with Lab(LabSpec(topology="single", mode="sidecar"), tmp / "lab") as state, \
            ProcessExporter([Watched(p.name, p.pid) for p in state.processes]) as exporter:
        envoys = {p.name.split("/")[0]: p.admin_port for p in state.processes if p.admin_port is not None}
        config = tmp / "prometheus.yml"
        config.write_text(_config(envoys, exporter.port))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with open(tmp / "prometheus.log", "wb") as log:
            server = subprocess.Popen([str(prometheus), f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                                       f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
        try:
            targets = len(envoys) + 1
            _poll("every target scraped", lambda: len(_query(url, "up == 1")) == targets)
            result = probe(state, ProbeSettings(rps=RPS, connections=CONNECTIONS, duration_s=SECONDS), tmp / "runs")
            start, end = _fortio_window(result.folder)
            # two scrapes after the load's end, so the window's last second is in the data
            _poll("scrapes after the load", lambda: float(_query(url, "max(timestamp(up))")[0]["value"][1]) > end + 2)
            yield result.folder, url, start, end
        finally:
            server.terminate()
            server.wait(timeout=30)


def _validations(measured):
    from meshsim.calibrate.validation.prometheus_check import PrometheusPrediction, PrometheusSource, \
        validate_prometheus
    from meshsim.calibrate.validation.validate import ReportOptions, validate
    from meshsim.calibrate.validation.validate_options import ValidateOptions
    from meshsim.calibrate.measure.dataset import load_run

    folder, url, start, end = measured
    report = ReportOptions(as_json=True)
    by_fortio = json.loads(validate(ValidateOptions(REPO / MODEL, (folder,), topology="single", replications=3,
                                                    include_fit_runs=True), report).text)["runs"][0]
    window = f"{int((end - start) * 1000)}ms"
    source = PrometheusSource(url, window, f"{end:.3f}", "envoy", source="client", destination="outbound")
    cores = load_run(folder).lab_host_cores
    outcome = validate_prometheus(source, PrometheusPrediction(REPO / MODEL, "single", CONNECTIONS, replications=3,
                                                               one_host_cores=cores), report)
    return by_fortio, json.loads(outcome.text)["runs"][0], outcome.text


def test_prometheus_and_fortio_validations_of_one_run_agree(measured):
    by_fortio, by_prometheus, text = _validations(measured)
    assert by_prometheus["role"] == "held-out"
    for key in ("p50", "p90"):
        f, p = by_fortio["latency_ms"][key], by_prometheus["latency_ms"][key]
        lower, upper = p["resolution"]
        width = upper - lower
        assert lower <= p["measured"] <= upper
        assert abs(p["measured"] - f["measured"]) <= width, (key, p, f)
        # the predictions differ only by the rate they were made for (measured vs requested) and the seed's noise
        spread = max(hi - lo for lo, hi in (f["ci95"], p["ci95"]))
        assert abs(p["predicted"] - f["predicted"]) <= spread, (key, p, f)
        allowed = width / p["measured"] + spread / p["measured"]
        assert abs(p["rel_error"] - f["rel_error"]) <= allowed, (key, p, f, allowed)
    assert by_prometheus["achieved_rps"]["measured"] == pytest.approx(by_fortio["achieved_rps"]["measured"], rel=0.10)
    assert "measured in bucket" in text


def test_cpu_agrees_within_the_noise_of_the_same_run(measured):
    folder, url, start, end = measured
    from meshsim.calibrate.measure.dataset import load_run

    run = load_run(folder)
    half = (end - start) / 2
    rng = f"[{int(half * 1000)}ms]"
    halves = [{r["metric"]["container"]: float(r["value"][1])
               for r in _query(url, f"sum by (container) (rate(container_cpu_usage_seconds_total{rng}))", at)}
              for at in (start + half, end)]
    whole = {r["metric"]["container"]: float(r["value"][1])
             for r in _query(url, f"sum by (container) (rate(container_cpu_usage_seconds_total"
                                  f"[{int((end - start) * 1000)}ms]))", end)}
    compared = 0
    for component, seconds in run.manifest.cpu_seconds.items():
        if component not in whole:
            continue
        by_fortio_run = seconds / run.result.duration_s
        noise = abs(halves[0][component] - halves[1][component])
        assert abs(whole[component] - by_fortio_run) <= 3 * noise + 0.01, (component, whole, by_fortio_run, noise)
        compared += 1
    assert compared >= 3  # client and server sidecars and the app


def test_our_percentiles_are_prometheus_histogram_quantile(measured):
    from meshsim.calibrate.measure.prometheus.prom_api import PrometheusApi
    from meshsim.calibrate.measure.prometheus.prom_metric_sets import METRIC_SETS
    from meshsim.calibrate.measure.prometheus.prom_window import PERCENTILES, measure_window

    _folder, url, start, end = measured
    ms = int((end - start) * 1000)
    window = measure_window(PrometheusApi(url), METRIC_SETS["envoy"], source="client", destination="outbound",
                            window_s=ms / 1000, end=end)
    for key, q in PERCENTILES.items():
        theirs = _query(url, f"histogram_quantile({q}, sum by (le) (increase(envoy_http_downstream_rq_time_bucket"
                             f"{window.traffic}[{ms}ms])))", end)
        assert window.quantile(key).value == pytest.approx(float(theirs[0]["value"][1]), rel=1e-9), key
