"""The README stays a user's page that works: every `meshsim ...` command in its code blocks exists and its flags
parse (the real argparse parser, without running the command's work), it stays within 300 lines, and every relative
link in it, and in docs/, points at a file (and a heading) that exists, as does every file of the repository they
name in code (`tests/test_x.py`, `measurements/...`): a module that moved is a broken sentence."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from meshsim.cli.entry_point import build_parser

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MAX_LINES = 300
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
NAMED_PATH = re.compile(r"`((?:sim|meshsim|calibrate|dash_app|tests|tools|models|measurements|docs)/[\w./*-]*)`")
# placeholders, schema names (`meshsim/mesh/v1`) and the folder the lab writes into by default are not files
PLACEHOLDER = re.compile(r"NAME|MESH|CHECKOUT|DIR|OUT|FILE|\bX\b|\*|<|^meshsim/\w+/v\d+$|^measurements/lab/$")


def code_blocks(text: str) -> list[str]:
    return FENCE.findall(text)


def _logical_lines(block: str) -> list[str]:
    """The block's lines with backslash continuations joined."""
    lines: list[str] = []
    pending = ""
    for raw in block.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        lines.append(pending + raw)
        pending = ""
    return lines + ([pending] if pending else [])


def meshsim_commands(block: str) -> list[list[str]]:
    """Each `meshsim` invocation of a code block, as argv after the program name. In a block with a shell prompt
    (`$ `) only the prompt's lines are commands (the rest is their output); elsewhere every line is, and a line may
    chain commands with `&&` or `;` (`L=folder; meshsim validate ... $L/runs`)."""
    lines = _logical_lines(block)
    prompted = [line[2:] for line in lines if line.startswith("$ ")]
    commands = []
    for line in prompted or lines:
        for segment in re.split(r"&&|;", line):
            words = shlex.split(segment, comments=True)
            if words and Path(words[0]).name == "meshsim":
                commands.append(words[1:])
    return commands


README_TEXT = README.read_text(encoding="utf-8")
COMMANDS = [argv for block in code_blocks(README_TEXT) for argv in meshsim_commands(block)]


def test_the_readme_is_a_page_not_a_notebook() -> None:
    lines = README_TEXT.count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines; at most {MAX_LINES} (move reference to docs/)"
    assert len(COMMANDS) >= 15, "the README's code blocks lost their commands"
    # every command of the tool is shown at least once
    assert {argv[0] for argv in COMMANDS} >= {"predict", "fit", "lab", "calibrate", "validate", "dash", "study",
                                               "sweep", "capacity", "factorial"}


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(argv)[:60] for argv in COMMANDS])
def test_every_readme_command_exists_and_its_flags_parse(argv: list[str], capsys) -> None:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        pytest.fail(f"meshsim {' '.join(argv)}: argparse refused it (exit {stop.code}): "
                    f"{capsys.readouterr().err.strip()}")
    assert callable(getattr(args, "handler", None)), f"meshsim {' '.join(argv)}: no command runs it"


def test_the_parser_check_would_catch_a_wrong_flag(capsys) -> None:
    """The check above is not vacuous: a misspelt flag or an unknown command is refused by the same parse."""
    for argv in (["predict", "--topolgy", "chain3"], ["simulate", "--rps", "1"], ["validate", "--by", "colour"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
    assert meshsim_commands("$ meshsim predict --rps 1\nmeshsim predict: output line\n") == [["predict", "--rps", "1"]]
    assert meshsim_commands("a && .venv/bin/meshsim study list  # comment\nmeshsim fit X \\\n  --out Y\n") == [
        ["study", "list"], ["fit", "X", "--out", "Y"]]


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page (lower case, punctuation dropped, spaces as hyphens)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    heads = re.findall(r"^#+\s+(.*)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def _relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [target for target in LINK.findall(text) if not re.match(r"^[a-z]+:", target)]


PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    links = _relative_links(page)
    if page == README:
        assert any(link.startswith("docs/") for link in links), "the README links no docs/ page"
    for link in links:
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: link {link} points at nothing"
        if anchor and target.suffix == ".md":
            assert anchor in _anchors(target), f"{page.name}: link {link}: no such heading in {target.name}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_repository_path_named_in_code_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    named = {m for m in NAMED_PATH.findall(text) if not PLACEHOLDER.search(m)}
    missing = sorted(m for m in named if not (REPO / m).exists())
    assert not missing, f"{page.name} names files that do not exist: {', '.join(missing)}"
