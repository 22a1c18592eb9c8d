"""Each load kind answers the same questions (meshsim/workload.py) and is known to both engines' registries."""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import get_args

import pytest

from meshsim.distributions import Deterministic
from meshsim.errors import FieldError
from meshsim.workload import FortioLoad, Load, OpenLoad, RateProfile, SequentialLoad, Wrk2Load
from meshsim.sim.fast.fast_setup import LOWERINGS
from meshsim.sim.engine.loadgen import GENERATORS

ROOT = Path(__file__).resolve().parents[1]
KINDS = get_args(Load)
EXAMPLES = [OpenLoad(1000.0), OpenLoad(1000.0, profile=RateProfile.ramp(100, 900, 10)), FortioLoad(1000.0, 8),
            SequentialLoad(Deterministic(0.05), users=4), Wrk2Load(1000.0, 10, 2)]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_both_engines_know_every_load_kind(kind: type) -> None:
    assert kind in GENERATORS, f"the SimPy engine cannot start {kind.__name__} (sim/engine/loadgen.py GENERATORS)"
    assert kind in LOWERINGS, f"the compiled engine cannot lower {kind.__name__} (sim/fast/fast_setup.py LOWERINGS)"


@pytest.mark.parametrize("load", EXAMPLES, ids=lambda x: type(x).__name__)
def test_every_load_kind_answers_the_engines_questions(load: Load) -> None:
    assert load.processes >= 1
    assert load.rate_field in ("rps", "profile", "think_ms")
    assert load.in_flight_field in ("rps", "connections")
    assert 0.0 <= load.default_warmup_share < 1.0
    assert load.offered_rps(0.001) > 0
    described = load.described()
    assert described["model"] == type(load).__name__
    load.validate()


def test_only_a_poisson_load_at_a_constant_rate_has_expected_arrivals() -> None:
    assert OpenLoad(1000.0).expected_arrivals(2.0) == pytest.approx(2000.0)
    assert OpenLoad(1000.0, profile=RateProfile.ramp(100, 900, 10)).expected_arrivals(2.0) is None
    assert FortioLoad(1000.0, 8).expected_arrivals(2.0) is None
    assert SequentialLoad(Deterministic(0.05)).expected_arrivals(2.0) is None


def test_sequential_users_offer_one_request_per_think_and_idle_latency() -> None:
    load = SequentialLoad(Deterministic(0.05), users=4)
    assert load.offered_rps(0.05) == pytest.approx(40.0)
    assert load.offered_between(0, 1) is None
    assert load.described()["think_ms"] == pytest.approx(50.0) and "think" not in load.described()
    assert SequentialLoad(Deterministic(0.0)).offered_rps(0.0) == math.inf


def test_a_closed_load_that_falls_short_says_why() -> None:
    assert "fortio achieved 500 of 1000 rps" in FortioLoad(1000.0, 8).shortfall(500.0)
    assert "wrk2 achieved 500 of 1000 rps" in Wrk2Load(1000.0, 10, 2).shortfall(500.0)
    assert FortioLoad(1000.0, 8).shortfall(990.0) is None
    assert OpenLoad(1000.0).shortfall(10.0) is None  # an open load past capacity is reported as saturation


@pytest.mark.parametrize("load, field", [(OpenLoad(math.inf), "rps"), (FortioLoad(10.0, 0), "connections"),
                                         (SequentialLoad(Deterministic(0.05), users=0), "connections"),
                                         (Wrk2Load(100.0, 1, 2), "connections"), (Wrk2Load(100.0, 4, True), "threads")])
def test_each_load_kind_names_its_bad_field(load: Load, field: str) -> None:
    with pytest.raises(FieldError) as caught:
        load.validate()
    assert caught.value.field == field


def test_no_isinstance_on_load_kinds_outside_the_load_types() -> None:
    names = {kind.__name__ for kind in KINDS}
    found = []
    for folder in ("sim", "meshsim", "calibrate", "dash_app"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "meshsim" / "workload.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and \
                        len(node.args) == 2 and names & {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "ask the load (meshsim/workload.py) or a registry keyed by its type instead: " + ", ".join(found)
