"""A Prometheus configuration that scrapes a running lab, written by ``meshsim lab up`` into the lab folder.

One ``envoy`` job with every Envoy's admin ``/stats/prometheus`` as a target, each labelled ``workload`` with its
service (``client``, ``server``, ``s1``, ``lb:server``): the label the ``envoy`` metric sets
(``prom_metric_sets``) read the calling workload from. One ``lab-processes`` job for the lab's process exporter
(``proc_exporter``: the processes' CPU and memory under cAdvisor's names). Scrapes every second: a lab's loads last
seconds, and a window read from Prometheus needs a few scrapes inside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from meshsim.calibrate.measure.lab.running import LabState

PROMETHEUS_CONFIG = "prometheus.yml"
SCRAPE_INTERVAL = "1s"


def _workload(process_name: str) -> str:
    return process_name.split("/", 1)[0]


def scrape_config(state: LabState) -> dict[str, Any]:
    """Prometheus's configuration for the lab (a mapping; ``write_scrape_config`` writes it as YAML)."""
    envoys = [{"targets": [f"127.0.0.1:{p.admin_port}"], "labels": {"workload": _workload(p.name)}}
              for p in state.processes if p.admin_port is not None]
    jobs: list[dict[str, Any]] = []
    if envoys:
        jobs.append({"job_name": "envoy", "metrics_path": "/stats/prometheus", "static_configs": envoys})
    if state.exporter_port is not None:  # a lab started without it (``Lab(exporter=False)``) has its Envoys only
        jobs.append({"job_name": "lab-processes",
                     "static_configs": [{"targets": [f"127.0.0.1:{state.exporter_port}"]}]})
    return {"global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                       "evaluation_interval": SCRAPE_INTERVAL},
            "scrape_configs": jobs}


def write_scrape_config(state: LabState, path: Path) -> Path:
    """Write the lab's Prometheus configuration to ``path`` (replacing an older lab's) and return it."""
    header = (f"# Prometheus configuration for the meshsim lab in {state.lab_dir} ({state.spec.topology} "
              f"{state.spec.mode}); valid while that lab is up.\n"
              f"# prometheus --config.file {path} --storage.tsdb.path DATA --web.listen-address 127.0.0.1:9090\n")
    path.write_text(header + yaml.safe_dump(scrape_config(state), sort_keys=False), encoding="utf-8")
    return path
