"""SimPy-only experiment (not shipped): a burst that finds every core of its node busy waits, with probability Q,
behind a thread that keeps its core until the scheduler's next tick (a uniform residual of TICK ms: CONFIG_HZ=250,
4 ms, where EEVDF notices an expired slice) before it queues as the engine queues it; a burst that finds a core
idle runs at once, as in the engine. Q is a property of the host, so it is chosen on a model's calibration runs
(the ladder's c=16 runs and the bursts) and then kept for its held-out runs.

    python busy_tick.py Q TICK_MS MODEL.yaml RUN_DIR...      (run from this folder)
"""
import random
import sys

from replay_runs import replayed
from meshsim.sim.engine import stations
from meshsim.calibrate.validation.compare import measured_latency

Q, TICK = float(sys.argv[1]), float(sys.argv[2]) * 1e-3
_queue = stations.NodeCores._fit  # called only when no core is idle at the burst's start
_rng = random.Random(1)


def _fit(self, start: float, work: float) -> float:
    if Q > 0 and _rng.random() < Q:
        start += _rng.random() * TICK
    return _queue(self, start, work)


stations.NodeCores._fit = _fit
for run, pred in replayed(sys.argv[3], sys.argv[4:]):
    lat = pred["latency_ms"]
    meas, _ = measured_latency(run)
    print(f"Q={Q} {run.id[4:48]:44} meas p50 {meas['p50']:.3f} p99 {meas['p99']:.3f} rps {run.result.actual_rps:.0f}"
          f" | pred p50 {lat['p50']:.3f} p99 {lat['p99']:.3f} rps {pred['achieved_rps']:.0f}", flush=True)
