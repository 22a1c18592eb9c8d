"""Documented upper bounds on sizes in models and options, and why each is where it is.

The engine allocates per worker, per core, per replica, per service and per connection, so an absurd size
(workers 100000000) exhausted memory instead of giving an error. Every bound below is far above any real
deployment we model, and low enough that building the simulated system stays within a few hundred MB.
"""

from __future__ import annotations

import math

from meshsim.errors import FieldError

# Envoy's --concurrency and Linkerd/Ztunnel worker pools are sized to cores; 1024 is beyond any node sold today.
MAX_WORKERS = 1024
# Cores of one replica or one node: the largest x86/ARM servers have 384-512 cores.
MAX_CORES = 1024
# Replicas of one service: each replica is a simulated process with its own proxy; 1000 covers the largest
# per-service fleets of the published meshes we calibrate against and keeps a topology under ~10^5 stations.
MAX_REPLICAS = 1000
# Services in one topology: the call chains we model have at most tens of services (Bookinfo 4, Online
# Boutique 11); the graph check, the system builder and the nested SimPy processes of a chain grow with it.
MAX_SERVICES = 1000
# Client connections (or sequential users) of one load: the compiled engine keeps a table row per connection and
# proxy; 10^6 is beyond what one load generator opens (a Linux host runs out of ephemeral ports at ~28 000 per
# destination) and keeps that table within ~8 MB per proxy.
MAX_CONNECTIONS = 1_000_000
# Bytes of one request or response (and the --payload option): 1 GiB; a message beyond that is no RPC.
MAX_MESSAGE_BYTES = 2**30
# Smallest CPU limit: one millicore, Kubernetes' smallest unit. Below it, every pass takes hours of simulated
# time per request and the run never ends.
MIN_CPU_LIMIT = 0.001
# Link bandwidth: 10 Tb/s is beyond any NIC; above, the per-byte time underflows to nothing anyway.
MAX_BANDWIDTH_GBPS = 10_000.0
# Memory of one proxy and each of its terms, MB: 1 TiB, the largest single machines' RAM; beyond it a
# coefficient is a typo (a per-connection figure in KB written as MB gives at most GBs, still below).
MAX_MEMORY_MB = 2.0**20


def check_finite(field: str, value: float, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False) -> float:
    """``value`` as a float if finite and within [low, high] (``low_open``: > low); else one error naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(field, f"expected a number, got {value!r}")
    if not math.isfinite(value):
        raise FieldError(field, f"expected a finite number, got {value}")
    if low is not None and (value <= low if low_open else value < low):
        raise FieldError(field, f"must be {'>' if low_open else '>='} {low:g}, got {value:g}")
    if high is not None and value > high:
        raise FieldError(field, f"must be <= {high:g}, got {value:g}")
    return float(value)

# A network hop's Pareto stall (meshsim.distributions.ParetoStall): its tail exponent alpha must exceed 2, or the
# stall's variance is infinite and no confidence interval of a mean or a percentile converges; above 50 the Lomax is
# an exponential for every practical purpose (a stall that is not heavy-tailed needs no Pareto).
STALL_MIN_ALPHA = 2.0  # exclusive
STALL_MAX_ALPHA = 50.0
# A stall is the exception on a hop, not its normal path: at most half of the packets stall (fitted hops: < 1 %).
STALL_MAX_PROBABILITY = 0.5
