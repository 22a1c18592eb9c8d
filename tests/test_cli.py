"""The CLI shell: a front end whose optional dependency is missing says which extra to install."""

from __future__ import annotations

import sys

import pytest

from meshsim.cli import entry_point as cli


@pytest.fixture
def broken_front_end(tmp_path, monkeypatch):
    (tmp_path / "meshsim_fake_front.py").write_text(
        "def register(sub):\n"
        "    p = sub.add_parser('fake')\n"
        "    import not_a_real_package_xyz  # noqa: F401\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "SUBCOMMANDS", {**cli.SUBCOMMANDS, "meshsim_fake_front": ("fake", "lab")})
    yield
    sys.modules.pop("meshsim_fake_front", None)


def test_missing_optional_package_gives_install_hint(broken_front_end, capsys):
    assert cli.main(["fake", "--anything"]) == 3
    err = capsys.readouterr().err.strip()
    assert err == ("meshsim: error: fake needs the Python package 'not_a_real_package_xyz': "
                   "pip install 'meshsim[lab]'")


def test_other_commands_still_work_when_one_front_end_is_broken(broken_front_end, capsys):
    assert cli.main(["predict", "--rps", "-1"]) == 2
    assert "--rps: must be > 0" in capsys.readouterr().err


def test_unknown_command_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["frobnicate"])
    assert exc.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
