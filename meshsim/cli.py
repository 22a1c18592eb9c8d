"""The ``meshsim`` command: parse, call one library function, map errors to exit codes. Nothing else."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from meshsim import __version__
from meshsim.errors import MeshsimError

# Each front end registers its own subcommand; a missing optional front end does not break the others.
SUBCOMMANDS = ("meshsim.cli_predict", "meshsim.cli_fit", "meshsim.cli_lab", "meshsim.cli_calibrate",
               "meshsim.cli_validate", "meshsim.cli_dash")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="meshsim", description="Calibrated simulation of service-mesh call chains.")
    parser.add_argument("--version", action="version", version=f"meshsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except MeshsimError as exc:
        print(f"meshsim: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("meshsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
