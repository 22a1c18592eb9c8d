"""Is a run fit to calibrate from? Saturated and failed runs are flagged, never fitted silently.

Saturated: fortio fell well behind the requested rate (ActualQPS < ``min_rate_fraction`` x RequestedQPS), so the
load the proxies saw is not the load the manifest claims. Failed: non-2xx answers or socket errors (fortio code -1)
above ``max_error_fraction`` of the calls, so the latencies mix fast error paths with real work.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshsim.calibrate.measure.fortio_result import FortioResult

MIN_RATE_FRACTION = 0.9
MAX_ERROR_FRACTION = 0.01


@dataclass(frozen=True)
class Quality:
    status: str  # ok | saturated | failed
    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def assess(
    result: FortioResult,
    min_rate_fraction: float = MIN_RATE_FRACTION,
    max_error_fraction: float = MAX_ERROR_FRACTION,
) -> Quality:
    """Flag a result as saturated or failed (failed wins) with one reason per finding."""
    reasons: list[str] = []
    status = "ok"
    calls = result.total_calls
    errors = calls - result.ok_count
    if calls and errors / calls > max_error_fraction:
        status = "failed"
        codes = ", ".join(f"{c}: {n}" for c, n in sorted(result.ret_codes.items()) if not c.startswith("2"))
        reasons.append(f"{errors / calls:.1%} of {calls} calls were not 2xx ({codes}; -1 = socket error)")
    if result.requested_rps is not None and result.actual_rps < min_rate_fraction * result.requested_rps:
        if status == "ok":
            status = "saturated"
        reasons.append(
            f"ActualQPS {result.actual_rps:.1f} is {result.actual_rps / result.requested_rps:.0%} of the requested "
            f"{result.requested_rps:g} (saturated: the client could not keep the rate)"
        )
    if result.socket_count is not None and result.socket_count > result.num_threads:
        reasons.append(f"{result.socket_count} sockets for {result.num_threads} connections (reconnects)")
    return Quality(status, tuple(reasons))


def worst(*statuses: str) -> str:
    order = {"ok": 0, "saturated": 1, "failed": 2}
    return max(statuses, key=lambda s: order.get(s, 2))
