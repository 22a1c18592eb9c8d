"""How busy the whole host was during a lab run, beside the lab's own processes.

Every lab process shares the host's cores with whatever else runs there: on a shared VM, other test runs took
0.3-0.7 of 2 cores while the lab was measured. A run's manifest records it (``where.host_load``), so that a reader
knows what the run competed with, and ``meshsim validate`` gives the simulated lab of a saturated run only the
cores the other processes left it (below saturation a niced neighbour runs in the time the lab leaves idle: at
200 rps other processes filled 1.77 of 2 cores and took nothing from the lab).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

NOISE_CORES = 0.05  # less than this many cores of other work is the probe's own bookkeeping, not a neighbour


def host_seconds() -> tuple[float, float]:
    """(busy, irq + softirq) CPU seconds of the whole host since boot (all cores), from the first line of /proc/stat.

    Interrupt time is accounted apart from processes (IRQ time accounting): the loopback receive path (NET_RX
    softirq) lands there, while the send path and the copy to user space run in the process's syscalls (stime)."""
    with open("/proc/stat", encoding="ascii") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, (irq + softirq) / tick


def host_load(before: tuple[float, float], after: tuple[float, float], window_s: float,
              lab_cpu_seconds: Mapping[str, float]) -> dict[str, Any]:
    """The host's load over a run's window: busy, interrupt, the lab's processes', and the rest (other processes),
    in cores (CPU seconds per second)."""
    busy = (after[0] - before[0]) / window_s
    irq = (after[1] - before[1]) / window_s
    lab = sum(lab_cpu_seconds.values()) / window_s
    return {"window_s": round(window_s, 3), "busy_cores": round(busy, 3), "irq_cores": round(irq, 3),
            "lab_cores": round(lab, 3), "other_cores": round(max(0.0, busy - irq - lab), 3),
            "source": "/proc/stat (user + nice + system + irq + softirq, 10 ms ticks) over the window; lab_cores: the "
                      "lab processes' cpu_seconds; other_cores: the rest without interrupts (other processes, and "
                      "the probe's own bookkeeping)"}


def cores_left(where: Mapping[str, Any]) -> float | None:
    """The cores a lab run's processes could use: the host's minus what other processes took (None: not recorded)."""
    cpus, load = where.get("cpus"), where.get("host_load")
    if not isinstance(cpus, (int, float)) or not isinstance(load, Mapping):
        return None
    other = load.get("other_cores")
    if not isinstance(other, (int, float)) or other < NOISE_CORES:
        return None
    return max(float(cpus) - float(other), 0.5)
