"""Shared by the bad-input tests (test_bad_model_files, test_bad_run_folders, test_bad_*_flags): the
contract each asserts -- a clean result, or one clean error line (a MeshsimError; exit code 2 from the CLI) naming the
file, key or flag, never a traceback, never a hang -- and the generated values they throw at it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings, strategies as st

from meshsim.cli import main
from meshsim.errors import MeshsimError
from meshsim.mesh import MeshModel, mesh_from_data
from meshsim.yamlio import parse_yaml_text

ROOT = Path(__file__).resolve().parents[1]
# hypothesis: few examples, no per-example deadline (the first YAML parse warms caches), each file < 1 min
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])
HOSTILE_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-10**30, max_value=10**30),
    st.sampled_from([0, -1, 1e-300, 1e300, 2**63, "1", "nan", None, True, [], {}]))


def load_mesh_text(text: str) -> MeshModel:
    return mesh_from_data(parse_yaml_text(text, "mesh.yaml"), "mesh.yaml")


def one_clean_line(exc: MeshsimError) -> str:
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text
    return text


def refused(load, text: str, *needles: str) -> str:
    with pytest.raises(MeshsimError) as info:
        load(text)
    message = one_clean_line(info.value)
    for needle in needles:
        assert needle in message, message
    return message


def cli_refuses(capsys, argv: list[str], needle: str) -> str:
    """The command exits 2 with one line holding ``needle`` (and no traceback)."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("meshsim: error: ") and needle in err, err
    return err
