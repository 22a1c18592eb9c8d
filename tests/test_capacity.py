"""``meshsim capacity``: the SLO parser, the CRN bisection against M/M/1 theory, sizing, and the CLI's errors.

M/M/1 (FCFS, service rate mu): the sojourn time is exponential with rate mu - lambda, so its q-quantile is
-ln(1 - q) / (mu - lambda) and the highest rate meeting ``pq <= L`` is mu + ln(1 - q) / L.
"""

from __future__ import annotations

import json
import math

import pytest

from meshsim.capacity_slo import SizingQuestion, parse_slo
from meshsim.cli import main
from meshsim.distributions import Exponential
from meshsim.errors import FieldError
from meshsim.request import PredictOptions
from meshsim.sim.capacity_search import bisect_capacity, find_capacity, find_size, replication_seeds
from simkit import NO_MESH, station_topology

MU = 1000.0  # 1 ms mean service
STATION = PredictOptions(topology=station_topology(Exponential(1 / MU)), mesh=NO_MESH, duration_s=8.0, seed=7)


def test_slo_parses_units_and_refuses_nonsense() -> None:
    slo = parse_slo("p99=20ms, p50=500us,max=1s")
    assert slo.limits == (("p99", 0.02), ("p50", 0.0005), ("max", 1.0))
    assert parse_slo("p99.9=3").limits == (("p999", 0.003),)
    assert slo.met({"p99": 0.019, "p50": 0.0004, "max": 0.9}) and not slo.met({"p99": 0.021, "p50": 0, "max": 0})
    for bad in ("", "p99", "p99=", "p98=3ms", "p99=-1ms", "p99=3ms,p99=4ms", "p99=3 hours", "p99=nanms"):
        with pytest.raises(FieldError) as info:
            parse_slo(bad)
        assert info.value.field == "slo", bad
    with pytest.raises(FieldError) as info:
        SizingQuestion("cores", 100)
    assert info.value.field == "size"


def test_capacity_of_an_mm1_station_matches_theory() -> None:
    theory = MU + math.log(1 - 0.90) / 0.010  # p90 <= 10 ms: 769.7 rps
    capacity = find_capacity(STATION, parse_slo("p90=10ms"), replications=3, processes=2)
    lo, hi = capacity.max_rps_ci95
    # 3 seeded bisections; 2 % slack for the finite run that starts empty (latency a little low at first)
    assert lo - 0.02 * theory <= theory <= hi + 0.02 * theory, capacity.to_dict()
    assert abs(capacity.max_rps - theory) < 0.06 * theory and hi - lo < 0.15 * theory
    assert capacity.binding == "p90" and capacity.bottleneck == "q/app"
    d = capacity.to_dict()
    assert {"max_rps", "max_rps_ci95", "binding", "bottleneck"} <= set(d) and "size" not in d


def test_a_bisection_is_a_function_of_its_seed() -> None:
    """Common random numbers: the same seed at every probed rate, so the same crossing every time; another seed,
    another (independent) crossing."""
    slo = parse_slo("p50=3ms")  # M/M/1 p50 = ln 2 / (mu - lambda): 768.9 rps
    options = STATION.with_changes(duration_s=2.0)
    seed_a, seed_b = replication_seeds(7, 2)
    first, again = bisect_capacity(options, slo, seed_a), bisect_capacity(options, slo, seed_a)
    assert first == again and first.probes >= 5
    assert bisect_capacity(options, slo, seed_b).max_rps != first.max_rps


def test_a_slo_below_the_no_load_latency_is_refused() -> None:
    with pytest.raises(FieldError) as info:
        find_capacity(STATION.with_changes(duration_s=2.0), parse_slo("p50=0.1ms"), replications=2)
    assert info.value.field == "slo" and "light load" in info.value.problem


def test_sizing_replicas_for_a_rate_one_station_cannot_serve() -> None:
    """1500 rps on 1 ms exponential servers with p90 <= 10 ms: one replica saturates; two replicas at 750 each
    meet it (M/M/1 p90 at 750 rps is 9.2 ms with a Poisson split, less with round robin)."""
    capacity = find_size(STATION.with_changes(duration_s=4.0), parse_slo("p90=10ms"),
                         SizingQuestion("replicas", 1500.0), replications=2, processes=2)
    assert capacity.size == {"kind": "replicas", "value": 2, "target_rps": 1500.0}
    assert capacity.max_rps >= 1500.0 and capacity.to_dict()["size"]["value"] == 2


def test_sizing_the_proxy_refuses_a_mesh_without_proxies() -> None:
    with pytest.raises(FieldError) as info:
        find_size(STATION, parse_slo("p99=10ms"), SizingQuestion("proxy-workers", 100.0))
    assert info.value.field == "size"


@pytest.mark.parametrize("args, flag", [
    (["--slo", "p99=fast"], "--slo"),
    (["--slo", "p99=10ms", "--size", "replicas"], "--target-rps"),
    (["--slo", "p99=10ms", "--target-rps", "100"], "--size"),
    (["--slo", "p99=10ms", "--mesh", "nosuchmesh"], "--mesh"),
    (["--slo", "p99=10ms", "--replications", "1"], "--replications"),
])
def test_capacity_bad_input_is_one_line_naming_the_flag(args: list[str], flag: str,
                                                        capsys: pytest.CaptureFixture) -> None:
    assert main(["capacity", "--topology", "single", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"meshsim: error: {flag}:"), lines


def test_capacity_json_from_the_command_line(capsys: pytest.CaptureFixture) -> None:
    args = ["capacity", "--topology", "single", "--mesh", "istio", "--slo", "p99=5ms", "--duration", "0.2",
            "--replications", "2", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    lo, hi = out["max_rps_ci95"]
    assert lo <= out["max_rps"] <= hi and out["binding"] == "p99" and out["bottleneck"].endswith("/sidecar")
    assert len(out["replications"]) == 2 and "size" not in out
    assert main(args) == 0 and json.loads(capsys.readouterr().out) == out  # the same seed, the same answer
