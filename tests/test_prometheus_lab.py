"""Validation through a real Prometheus agrees with validation of the fortio result of the same run.

A lab (both sidecars, one service) runs under a real Prometheus (configuration written here, 1 s scrapes, bound to
127.0.0.1, data in a temporary folder) scraping each Envoy's admin ``/stats/prometheus`` and the lab's process
exporter; fortio loads the lab for a few seconds and its result is stored as a run folder. The same model is then
validated twice on the same topology: against that run folder, and against Prometheus's window of the same load.

What agrees, and how closely: the rate within 10 %; each process's CPU within the spread of the same window's two
halves; the predictions (one model, topology and load) within the simulator's intervals; and the percentile this
code interpolates is the one Prometheus's ``histogram_quantile`` returns for the same buckets.

What is compared like with like: the latency. Envoy's histogram times a request from the client sidecar's worker
taking it to the response leaving that sidecar; fortio times it from its own send to its own receive. The
Prometheus validation compares the histogram with the model's prediction of that same span (the client sidecar's
view, sim/engine/proxy_views.py), so in the measurement as in the model the view's percentiles lie below fortio's.
The two validations' errors agree only as far as the model puts the time in the right places: with the lab model
fitted on this machine (2026-11-27, measurements/lab-tracing-2026-11-27) the view's p50 was predicted 1.72 ms
against 0.82 ms in Envoy's histogram, while fortio's p50 was predicted 2.07 against 1.58 ms: the fit gives the
sidecars time that lies outside them (the test prints both). On a busy machine the sidecar's view was 0.94 ms
against 2.11 ms by fortio at 200 rps on 2 connections, 13.8 against 33.4 ms while the machine was saturated.
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
LAB_MODEL = "measurements/lab-tracing-2026-11-27/envoy-lab.yaml"
REPO = Path(__file__).resolve().parents[1]
RPS, CONNECTIONS, SECONDS = 200.0, 4, 6.0
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
    text = re.sub(r"\.(\d+)", lambda m: "." + m.group(1)[:6].ljust(6, "0"), data["StartTime"]).replace("Z", "+00:00")
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
    by_fortio = json.loads(validate(ValidateOptions(REPO / LAB_MODEL, (folder,), topology="single", replications=3,
                                                    include_fit_runs=True), report).text)["runs"][0]
    window = f"{int((end - start) * 1000)}ms"
    source = PrometheusSource(url, window, f"{end:.3f}", "envoy", source="client", destination="outbound")
    cores = load_run(folder).lab_host_cores
    # the lab's plain Envoy has no telemetry filter: the model's default-on feature off, as the replay of the run
    prediction = PrometheusPrediction(REPO / LAB_MODEL, "single", CONNECTIONS, payload_bytes=0,
                                      replications=3,
                                      one_host_cores=cores)
    outcome = validate_prometheus(source, prediction, report)
    from meshsim.calibrate.validation.text_report import table

    data = json.loads(outcome.text)
    return by_fortio, data["runs"][0], table(outcome.validation), data["settings"]


def test_prometheus_and_fortio_validations_of_one_run_agree(measured):
    by_fortio, by_prometheus, text, settings = _validations(measured)
    assert by_prometheus["role"] == "held-out"
    # the client sidecar's histogram is compared with the prediction of the same span: that sidecar's own view
    assert settings["prometheus"]["proxy_view"] == "client/sidecar to server"
    held_rate = by_fortio["achieved_rps"]["measured"] >= 0.95 * RPS
    for key in ("p50", "p90"):
        f, p = by_fortio["latency_ms"][key], by_prometheus["latency_ms"][key]
        lower, upper = p["resolution"]
        assert lower <= p["measured"] <= upper
        # Envoy times each request from its worker taking it to the response leaving the client's sidecar, a part
        # of the time fortio sees for the same request: every percentile of it is at most fortio's (to its bucket).
        # It is not the same time: the gap is the client's own time and the sidecar's wake-ups (module docstring).
        assert 0.05 < p["measured"] <= f["measured"] + (upper - lower), (key, p, f)
        # and so in the model: one model, topology and load on one host, predicted for the rate fortio achieved
        # (alike unless fortio fell behind on a busy machine): the view's percentile below the caller's
        if held_rate:
            assert p["predicted"] < f["predicted"] + (f["ci95"][1] - f["ci95"][0]), (key, p, f)
    # the prediction is made for the rate Prometheus saw, which is the rate fortio achieved
    assert by_prometheus["achieved_rps"]["measured"] == pytest.approx(by_fortio["achieved_rps"]["measured"], rel=0.10)
    assert "measured in bucket" in text and "reporting proxy's own view" in text
    for key in ("p50", "p90", "p99"):
        f, p = by_fortio["latency_ms"][key], by_prometheus["latency_ms"][key]
        print(f"{key}: fortio {f['measured']:.3f} ms measured, {f['predicted']:.3f} predicted; client sidecar's view "
              f"{p['measured']:.3f} in {p['resolution']}, {p['predicted']:.3f} predicted")


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
    # a range query over the load: one point a second, their mean the window's rate
    series = PrometheusApi(url).range(f"sum(rate(envoy_http_downstream_rq_total{window.traffic}[2s]))", start + 2,
                                      end, 1.0)
    points = [v for _t, v in series[0][1]]
    assert len(points) >= 3 and sum(points) / len(points) == pytest.approx(window.rps, rel=0.25)
    for key, q in PERCENTILES.items():
        theirs = _query(url, f"histogram_quantile({q}, sum by (le) (increase(envoy_http_downstream_rq_time_bucket"
                             f"{window.traffic}[{ms}ms])))", end)
        assert window.quantile(key).value == pytest.approx(float(theirs[0]["value"][1]), rel=1e-9), key


def test_the_commands_read_the_same_window(measured, tmp_path):
    """``meshsim validate --prometheus`` and ``meshsim fit --prometheus`` as a user runs them: the window's row is
    kept in --rows-out even though a fit from one sidecar row alone is refused (it needs baseline rows)."""
    import os
    import sys

    from meshsim.calibrate.measure.summary_rows import read_rows

    _folder, url, start, end = measured
    window = ["--prometheus", url, "--window", f"{int((end - start) * 1000)}ms", "--end", f"{end:.3f}",
              "--metrics", "envoy", "--source", "client", "--destination", "outbound"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHSIM_PROMETHEUS_")}
    validated = subprocess.run([sys.executable, "-m", "meshsim", "validate", *window, "--model", MODEL, "--topology",
                                "single", "--connections", str(CONNECTIONS), "--features", "no-telemetry",
                                "--replications", "2", "--json", "--html", str(tmp_path / "report.html")], cwd=REPO, env=env, capture_output=True, text=True,
                               timeout=600)
    assert validated.returncode == 0, validated.stderr
    run = json.loads(validated.stdout)["runs"][0]
    assert "reporting proxy" in (tmp_path / "report.html").read_text()  # the HTML report carries the window's notes
    assert run["achieved_rps"]["measured"] > 0.5 * RPS and run["latency_ms"]["p50"]["resolution"]
    rows = tmp_path / "rows.csv"
    fitted = subprocess.run([sys.executable, "-m", "meshsim", "fit", *window, "--row-mode", "none_mtls_both",
                             "--connections", str(CONNECTIONS), "--payload", "0", "--rows-out", str(rows),
                             "--mesh", "lab", "--out", str(tmp_path / "lab.yaml")],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert fitted.returncode == 2 and "need baseline rows" in fitted.stderr.strip().splitlines()[-1], fitted.stderr
    (row,), _ = read_rows([rows])
    assert row.quantiles_s[0.5] * 1e3 == pytest.approx(run["latency_ms"]["p50"]["measured"], rel=1e-3)
    assert row.rps == pytest.approx(run["achieved_rps"]["measured"], rel=1e-3)
    assert set(row.cpu_cores) == {"client/sidecar", "server/sidecar"} and all(v > 0 for v in row.cpu_cores.values())
    assert not (tmp_path / "lab.yaml").exists()
