"""How long-running library calls report what they are doing: one line of text at a time.

The caller decides where the lines go (the CLI prints them to stderr, the Dash app and the tests collect them).
"""

from __future__ import annotations

from typing import Callable

Progress = Callable[[str], None]
