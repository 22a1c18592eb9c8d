"""The command line: one module per command (parse, call one library function, render, map errors to exit codes).

Only this package imports the engine, calibration and the app; the rest of ``meshsim`` is the data model.
"""

from meshsim.cli.entry_point import main

__all__ = ["main"]
