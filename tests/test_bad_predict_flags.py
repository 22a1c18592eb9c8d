"""Bad predict flags: every listed value, then generated values of every flag, give exit 0 with a result or exit 2
with one line naming the flag; contradictory flags and values no run can honour are refused before anything runs,
never resolved silently; generated feature lists; and ``--help`` parses without the heavy imports."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from meshsim.catalog import load_mesh
from meshsim.cli import main
from meshsim.errors import FieldError
from meshsim.scenario import resolve_features

from refusals import ROOT, cli_refuses

LINKERD = str(ROOT / "models/meshes/linkerd.yaml")

PREDICT_CASES = [
    (["--duration", "nan"], "--duration: expected a finite number, got nan"),
    (["--warmup", "nan"], "--warmup: expected a finite number, got nan"),
    (["--payload", "1000000000000"], "--payload: must be an integer in [0, 1073741824]"),
    (["--proxy-workers", "100000000"], "--proxy-workers: an integer in [1, 1024]"),
    (["--connections", "3567587328"], "--connections: must be <= 1000000"),  # hypothesis found 26.6 GiB asked for
    (["--proxy-cpu-limit", "nan"], "--proxy-cpu-limit: "),
    (["--proxy-cpu-limit", "1e-9"], "--proxy-cpu-limit: must be >= 0.001"),
    (["--rps", "inf"], "--rps: expected a finite number, got inf"),
    (["--rps", "nan"], "--rps: expected a finite number, got nan"),
    (["--load", "sequential", "--think", "nan"], "--think: "),
    (["--profile", "ramp:100:200:-10"], "--profile: times and rates must be >= 0, got -10 s"),
    (["--profile", "ramp:100:200:0"], "--profile: times must increase"),
    (["--profile", "ramp:nan:100:10"], "--profile: times and rates must be finite"),
    (["--topology", "chain100000"], "chain100000: a chain has 1 to 1000 services"),
]


@pytest.mark.parametrize(("args", "needle"), PREDICT_CASES)
def test_predict_refuses_each_listed_value(capsys, args: list[str], needle: str) -> None:
    base = [] if any(a in ("--rps", "--profile", "--load") for a in args) else ["--rps", "100"]
    assert main(["predict", *base, *args, "--replications", "2", "--processes", "1"]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err, err


CLI_FLAGS = ["--rps", "--duration", "--warmup", "--connections", "--think", "--payload", "--proxy-workers",
             "--proxy-cpu-limit", "--profile", "--replications", "--min-replications", "--precision", "--seed",
             "--processes", "--max-events", "--time-limit"]
CLI_VALUES = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "0", "-1", "1e12", "1e-9", "1e308", "100000000", "", "ramp:1:2:0",
                     "steps:0=5,0=6", "ramp:nan:1:1", "steps:", "1_000"]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr), st.integers(-10**12, 10**12).map(str),
    st.text(max_size=8))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(CLI_FLAGS), CLI_VALUES)
def test_generated_predict_values(capsys, flag: str, value: str) -> None:
    """Any value of any flag: exit 0 with a result, or exit 2 with one line naming a flag; every accepted run is
    small (a tiny budget), so nothing can hang."""
    quick = {"--rps": "200", "--duration": "0.2", "--replications": "1", "--processes": "1", "--max-events": "3e4",
             "--time-limit": "5"}
    quick.pop(flag, None)
    extra = ["--load", "sequential"] if flag == "--think" else []
    if flag in ("--think", "--profile"):
        quick.pop("--rps")
    args = ["predict", "--topology", "single", "--mesh", "none", *extra, *(x for kv in quick.items() for x in kv)]
    try:
        code = main([*args, f"{flag}={value}", "--json"])
    except SystemExit as exc:  # argparse refused the value's type: one line, exit 2
        code = exc.code
    err = capsys.readouterr().err
    assert code in (0, 2), err
    if code == 2:
        assert err.count("\n") == 1 and "Traceback" not in err and "--" in err, err


def test_help_parses_without_importing_scipy() -> None:
    """``meshsim --help`` took 1.5-4.4 s because scipy was imported before the arguments were parsed."""
    import subprocess
    import sys

    code = ("import sys; from meshsim.cli.entry_point import build_parser; build_parser(); "
            "assert 'scipy' not in sys.modules, sorted(m for m in sys.modules if m.startswith('scipy'))[:3]")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


CONTRADICTORY_CASES = [
    (["--rps", "100", "--mesh", "istio", "--mesh-model", LINKERD],
     f"--mesh-model: give either --mesh istio or --mesh-model {LINKERD}, not both"),
    (["--rps", "100", "--features", "mtls,no-mtls"], "--features: mtls and no-mtls: mtls is turned on and off"),
    (["--rps", "100", "--features", "tracing,tracing"], "--features: tracing and tracing: tracing is named twice"),
    (["--rps", "1e-300"], "--rps: a replication would last 5e+303 simulated seconds, beyond the engine's clock"),
    (["--rps", "100", "--duration", "1e-300"], "--duration: a replication expects 1e-298 requests"),
    (["--rps", "1e-300", "--duration", "10"], "--rps: a replication expects"),
    (["--rps", "1e308", "--duration", "1"], "--rps: this run would take"),  # the rate, not the duration
    (["--rps", "100", "--mesh", ""], "--mesh: empty: give a built-in name or a FILE.yaml"),
    (["--rps", "100", "--topology", ""], "--topology: empty: give a built-in name or a FILE.yaml"),
    (["--load", "sequential", "--think", "1e12"], "--think: a replication would last"),
]


@pytest.mark.parametrize(("args", "needle"), CONTRADICTORY_CASES)
def test_predict_refuses(capsys, args: list[str], needle: str) -> None:
    cli_refuses(capsys, ["predict", *args, "--replications", "2", "--processes", "1"], needle)


# -- generated feature lists ----------------------------------------------------------------------------------------

ISTIO = load_mesh("istio")
FEATURE_WORDS = [w for name in ISTIO.features for w in (name, f"no-{name}")]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(FEATURE_WORDS), max_size=5))
def test_generated_feature_lists_name_each_feature_at_most_once(words: list[str]) -> None:
    """Accepted exactly when no feature is named twice (on and off, or on twice); then each is as it was asked."""
    bases = [w.removeprefix("no-") for w in words]
    if len(set(bases)) < len(bases):
        with pytest.raises(FieldError, match="name each feature once"):
            resolve_features(ISTIO, words)
        return
    active = set(resolve_features(ISTIO, words))
    for word in words:
        assert (word in active) if not word.startswith("no-") else (word[3:] not in active)
