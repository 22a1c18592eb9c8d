"""What the benchmarks that compare ways of doing one thing share: interleaved rounds and a table of medians.

Each round runs every way once, in reverse order every other round, so that a machine that drifts over the sitting
does not favour the ways that ran first.
"""

from __future__ import annotations

import statistics
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def interleaved(ways: Sequence[str], rounds: int, run: Callable[[str], tuple[float, T]]
                ) -> tuple[dict[str, list[float]], list[tuple[str, T]]]:
    """Every way ``rounds`` times: the wall times per way, and each run's (way, result) in the order they ran."""
    walls: dict[str, list[float]] = {way: [] for way in ways}
    results: list[tuple[str, T]] = []
    for round_ in range(rounds):
        for way in (ways if round_ % 2 == 0 else ways[::-1]):
            wall, result = run(way)
            walls[way].append(wall)
            results.append((way, result))
            print(f"round {round_ + 1}: {way}: {wall:.1f} s", flush=True)
    return walls, results


def print_medians(walls: dict[str, list[float]], reference: str) -> None:
    """Each way's median wall time and how many times faster than the reference way's it is."""
    width = max(len(way) for way in walls) + 2
    base = statistics.median(walls[reference])
    for way, times in walls.items():
        wall = statistics.median(times)
        print(f"  {way:<{width}} {wall:7.1f} s   {base / wall:4.2f}x")
