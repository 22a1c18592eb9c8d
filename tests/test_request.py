"""One typed request: the builder validates once, refuses options that do not apply, and names fields; the CLI says
flags. Nothing is simulated here."""

from __future__ import annotations

import pytest

from meshsim.cli.entry_point import main
from meshsim.errors import FieldError
from meshsim.request import PredictOptions, build_request
from meshsim.workload import FortioLoad, OpenLoad, RateProfile, SequentialLoad


def field_of(**options: object) -> str:
    with pytest.raises(FieldError) as err:
        build_request(PredictOptions(**options))  # type: ignore[arg-type]
    return err.value.field


def test_a_request_holds_scenario_workload_and_settings() -> None:
    req = build_request(PredictOptions(topology="single", mesh="istio", rps=500, load="fortio", connections=4,
                                       uniform=True, features=("mtls",), seed=7, saturation=False))
    assert isinstance(req.workload.load, FortioLoad)
    assert (req.workload.load.rps, req.workload.load.connections, req.workload.load.uniform) == (500.0, 4, True)
    assert "mtls" in req.scenario.features and "telemetry" in req.scenario.features  # istio's default stays on
    assert req.settings.seed == 7 and req.settings.saturation_search is False
    assert req.scenario.topology.name == "single"


def test_defaults_per_load_model_and_zero_is_not_a_default() -> None:
    assert build_request(PredictOptions(rps=100)).workload.load == OpenLoad(100.0, 1000)
    assert build_request(PredictOptions(rps=100, load="fortio")).workload.load.connections == 8  # type: ignore[union-attr]
    seq = build_request(PredictOptions(load="sequential")).workload.load
    assert isinstance(seq, SequentialLoad) and seq.users == 1 and seq.rps == pytest.approx(20.0)
    assert field_of(rps=100, load="fortio", connections=0) == "connections"  # 0 no longer means "the default"


@pytest.mark.parametrize("options, field", [
    (dict(rps=100, think_ms=10), "think_ms"),  # open load has no think time
    (dict(rps=100, load="fortio", think_ms=10), "think_ms"),
    (dict(rps=100, uniform=True), "uniform"),  # fortio's flags on the open load
    (dict(load="sequential", jitter=True), "jitter"),
    (dict(rps=100, nocatchup=True), "nocatchup"),
    (dict(load="sequential", rps=100), "rps"),  # users and think time set the sequential rate
    (dict(rps=100, profile=RateProfile.ramp(100, 200, 10)), "rps"),  # a rate and a profile
    (dict(load="fortio", rps=100, profile=RateProfile.ramp(100, 200, 10)), "profile"),
    (dict(scope="none", features=("mtls",)), "features"),  # nobody has a proxy
    (dict(rps=100, fortio_version="1.3.1"), "fortio_version"),  # fortio's warm-up without fortio
    (dict(load="fortio", rps=100, fortio_version="dev"), "fortio_version"),
    (dict(load="fortio", rps=100, fortio_version="1.3.1", fortio_warmup="parallel"), "fortio_warmup"),
])
def test_options_that_do_not_apply_are_refused(options: dict, field: str) -> None:
    assert field_of(**options) == field


@pytest.mark.parametrize("options, field", [
    (dict(rps=float("nan")), "rps"), (dict(rps=float("inf")), "rps"), (dict(rps=-1), "rps"), (dict(), "rps"),
    (dict(load="sequential", think_ms=float("nan")), "think_ms"),
    (dict(rps=10, proxy_cpu_limit=float("nan")), "proxy_cpu_limit"),
    (dict(rps=10, duration_s=float("nan")), "duration_s"), (dict(rps=10, warmup_s=float("nan")), "warmup_s"),
    (dict(rps=10, processes=0), "processes"), (dict(rps=10, processes=-4), "processes"),
    (dict(rps=10, payload_bytes=-1), "payload_bytes"), (dict(rps=10, proxy_workers=0), "proxy_workers"),
    (dict(profile=RateProfile.ramp(100, 200, -10)), "profile"), (dict(profile=RateProfile.ramp(100, 200, 0)), "profile"),
    (dict(profile=RateProfile.ramp(float("nan"), 100, 10)), "profile"),
    (dict(rps=10, topology="nope"), "topology"), (dict(rps=10, mesh="nope"), "mesh"),
    (dict(rps=10, lb="nope"), "lb"), (dict(rps=10, scope="nope"), "scope"), (dict(rps=10, load="nope"), "load"),
    (dict(rps=10, features=("nope",)), "features"),
])
def test_impossible_values_name_their_field(options: dict, field: str) -> None:
    assert field_of(**options) == field


def test_scope_none_turns_the_mesh_defaults_off() -> None:
    assert build_request(PredictOptions(rps=100, scope="none")).scenario.features == ()


@pytest.mark.parametrize("argv, flag", [
    (["--load", "sequential", "--rps", "10"], "--rps:"),
    (["--rps", "10", "--think", "5"], "--think:"),
    (["--load", "fortio", "--rps", "10", "--think", "5"], "--think:"),
    (["--rps", "10", "--uniform"], "--uniform:"),
    (["--rps", "10", "--profile", "ramp:100:200:10"], "--rps:"),
    (["--profile", "ramp:nan:100:10"], "--profile:"),  # not "--rps: must be > 0"
    (["--rps", "10", "--processes", "0"], "--processes:"),
    (["--rps", "10", "--scope", "none", "--features", "mtls"], "--features:"),
    (["--rps", "10", "--mesh-model", "missing.yaml"], "--mesh-model:"),
    (["--rps", "10", "--payload", "-3"], "--payload:"),
])
def test_the_cli_says_the_flag_in_one_line(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--topology", "single", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"meshsim: error: {flag}"), err
