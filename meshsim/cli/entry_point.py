"""The ``meshsim`` command: parse, call one library function, map errors to exit codes. Nothing else."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from typing import Sequence

from meshsim import __version__
from meshsim.cli.flags import user_message
from meshsim.errors import ComponentMissing, MeshsimError
from meshsim.outputs import check_stdout, print_note

# Each front end registers its own subcommand. A front end whose optional dependencies are not installed still
# appears, and says which extra to install, instead of breaking the others.
SUBCOMMANDS = {
    "meshsim.cli.predict_command": ("predict", ""),
    "meshsim.cli.factorial_command": ("factorial", ""),
    "meshsim.cli.sweep_command": ("sweep", ""),
    "meshsim.cli.capacity_command": ("capacity", ""),
    "meshsim.cli.study_command": ("study", "study"),
    "meshsim.cli.fit_command": ("fit", "fit"),
    "meshsim.cli.lab_command": ("lab", "lab"),
    "meshsim.cli.calibrate_command": ("calibrate", "lab,kube"),
    "meshsim.cli.validate_command": ("validate", "fit"),
    "meshsim.cli.topology_command": ("topology", ""),
    "meshsim.cli.dash_command": ("dash", "dash"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="meshsim", description="Calibrated simulation of service-mesh call chains.")
    parser.add_argument("--version", action="version", version=f"meshsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name, (command, extra) in SUBCOMMANDS.items():
        try:
            importlib.import_module(name).register(sub)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # this front end is not part of the installed version
            if not exc.name or exc.name.startswith("meshsim"):
                raise
            _unavailable(sub, command, extra, exc.name)
    return parser


def _unavailable(sub: argparse._SubParsersAction, command: str, extra: str, missing: str) -> None:  # type: ignore[type-arg]
    message = f"{command} needs the Python package {missing!r}: pip install 'meshsim[{extra}]'"
    # forget whatever the front end registered before its import failed
    sub._name_parser_map.pop(command, None)
    sub._choices_actions[:] = [a for a in sub._choices_actions if a.dest != command]
    p = sub.add_parser(command, help=f"(unavailable: {message})", add_help=False, prefix_chars="\0")
    p.add_argument("rest", nargs=argparse.REMAINDER)

    def handler(_args: argparse.Namespace) -> int:
        raise ComponentMissing(message)

    p.set_defaults(handler=handler)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # SIGTERM and SIGHUP (a `kill`, a closed terminal, a CI timeout) take the Ctrl-C path: every command stops
    # what it started, removes its temporary folders and keeps what it finished, instead of dying on the spot.
    previous = {}
    if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _run(args)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(args: argparse.Namespace) -> int:
    try:
        if getattr(args, "prints_result", True):  # a result with nowhere to go is refused before the work
            check_stdout()
        return int(args.handler(args) or 0)
    except MeshsimError as exc:
        print_note(f"meshsim: error: {user_message(exc, getattr(args, 'flag_overrides', None))}")
        return exc.exit_code
    except ModuleNotFoundError as exc:  # an optional dependency the chosen command needs
        if not exc.name or exc.name.startswith("meshsim"):
            raise
        extra = next((e for c, e in SUBCOMMANDS.values() if c == args.command), "") or "test"
        print_note(f"meshsim: error: {args.command} needs the Python package {exc.name!r}: "
                   f"pip install 'meshsim[{extra}]'")
        return ComponentMissing.exit_code
    except KeyboardInterrupt:
        print_note("meshsim: interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
