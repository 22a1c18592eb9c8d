"""Experiment on the shipped host (sim/engine/woken_first_cores.py), SimPy engine only: an other-class burst's
completion drawn from a gamma with the M/G/1 preemptive-resume delay busy period's mean x / (1 - rho) and variance
x rho 2 E[S] / (1 - rho)^3 (the woken work taken as exponential, E[S] its mean size over the window), where the
shipped host gives every such burst the mean. Used by validate_simpy.py --random-stretch."""
import math
import numpy as np
from meshsim.sim.engine.woken_first_cores import WokenFirstCores
from meshsim.woken_first import RHO_CAP

RNG = np.random.default_rng(20261129)
_orig_init = WokenFirstCores.__init__
_orig_woken = WokenFirstCores.run_woken


def __init__(self, *a, **k):
    _orig_init(self, *a, **k)
    self.woken_n = 0.0


def run_woken(self, start, work):
    if work > 0.0:
        if start > self.woken_at:
            self.woken_n *= math.exp(-(start - self.woken_at) / self.window)
        self.woken_n += 1.0
    return _orig_woken(self, start, work)


def run(self, start, work):
    if work <= 0.0:
        return start
    x = self.booked(work)
    rho = self.recent_load(start)
    if rho <= 1e-9 or self.woken_n <= 1e-9:
        return self.place(start, x)
    mean_s = self.woken_load / self.woken_n
    m = x / (1.0 - rho)
    v = x * rho * 2.0 * mean_s / (1.0 - rho) ** 3
    t = RNG.gamma(m * m / v, v / m) if v > 0 else m
    return self.place(start, max(t, x))


WokenFirstCores.__init__ = __init__
WokenFirstCores.run_woken = run_woken
WokenFirstCores.run = run
