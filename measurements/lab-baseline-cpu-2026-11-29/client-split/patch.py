"""Experiment (not in the replay): fortio's CPU per call at the client (before the request leaves, on the host's
cores), the baseline service shortened by as much (its lognormal components scaled) and holding a core for the app's
CPU only. FORTIO_MS and APP_MS: client/app and server/app CPU per request in the calibration's most loaded baseline
run (lab-single-baseline-q9000-c16-b1024-20261129T003729048). Imported by run.py, which then runs meshsim's CLI:

    python run.py calibrate --lab --resume --model-out envoy-lab.yaml --lab-out CALIBRATION_COPY
    python run.py validate --model envoy-lab.yaml ../baselines ../baselines-loaded ../closed ../paced
"""
import copy
import meshsim.calibrate.fit.sim_check as sc
import meshsim.calibrate.validation.replay as rp
from meshsim.distribution_spec import parse_distribution

FORTIO_MS, APP_MS = 0.034, 0.031
service = sc.baseline_service


def _scaled(spec, f):
    spec = copy.deepcopy(spec)
    parts = spec["components"] if spec.get("family") == "mixture" else [spec]
    for c in parts:
        assert c["family"] == "lognormal", c
        c["median_ms"] *= f
        if "shift_ms" in c:
            c["shift_ms"] *= f
    return spec


def split(model, replicas, source):
    s = service(model, replicas, source)
    cpu = (model.get("calibration") or {}).get("baseline_cpu")
    base = (model.get("calibration") or {}).get("baseline")
    if cpu and base:
        mean = parse_distribution(base, "b").mean * 1e3
        f = (mean - FORTIO_MS) / mean
        s["handler"] = [{"compute": _scaled(base, f)}]
        s["cpu_fraction"] = round(min(1.0, APP_MS / (mean - FORTIO_MS)), 5)
    return s


def with_client(data, model):
    if (model.get("calibration") or {}).get("baseline_cpu"):
        data["client"]["cpu_per_call"] = {"family": "deterministic", "value_ms": FORTIO_MS}
    return data


sc.baseline_service = split
rp.baseline_service = split
topo_data = sc.calibration_topology_data
sc.calibration_topology_data = lambda model: with_client(topo_data(model), model)
skeleton = rp._skeleton
def _skel(name, entry, services, source):
    data = skeleton(name, entry, services, source)
    data["client"]["cpu_per_call"] = {"family": "deterministic", "value_ms": FORTIO_MS}
    return data
rp._skeleton = _skel
