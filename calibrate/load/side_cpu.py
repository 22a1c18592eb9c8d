"""Each side of a sidecar's CPU per request: ``proxy.sides`` of a fitted model.

The latency decomposition gives each side its pass time (the inbound side's from the server-sidecar runs, the
outbound side's from what the client's sidecar adds on top), but a side's CPU is not its latency: in the lab's
Envoy runs with both sidecars, each burned about 0.35 ms of CPU per request at 1000 rps while the inbound passes
added 0.47 ms of latency and the outbound ones 0.13 ms. One held fraction for the whole proxy (CPU over pass time,
pooled and capped at 1) then books the server's sidecar 50 % too much and the caller's 45 % too little, so a CPU
quota saturates on the wrong side, too early. Here each side gets its own CPU per request, measured where both
sidecars ran together (the deployment a mesh model predicts by default; the server-sidecar runs are the fallback
for the inbound side): a side that burns less than its passes holds its worker for that part of them
(``cpu_fraction`` < 1, the rest is kernel and scheduling delay); a side that burns more holds it for all of them and
works on after its last pass (``post_response``: only the mean is identified, so a constant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from meshsim.calibrate.fit.decomposition import Decomposition
from meshsim.calibrate.load.load_dependence import preferred_cpu_entry

# side -> (the cpu_seconds key of its sidecar, the fitted pass components it may match)
SIDE_SOURCES = {"inbound": ("server/sidecar", ("proxy.inbound_pass", "proxy.pass")),
                "outbound": ("client/sidecar", ("proxy.outbound_pass", "proxy.pass"))}
PREFERRED_PATH = "both-sidecars"
POST_FLOOR_S = 1e-6  # below a microsecond after the passes is no post-response work, just rounding


@dataclass(frozen=True)
class SideCpuFit:
    side: str
    cpu_s: float  # CPU per request with no wake-up
    pass_s: float  # the side's fitted mean pass (a request makes two)
    why: str  # where the CPU per request came from

    @property
    def fraction(self) -> float:
        return min(1.0, self.cpu_s / (2.0 * self.pass_s))

    @property
    def post_s(self) -> float:
        extra = self.cpu_s - 2.0 * self.pass_s
        return extra if extra > POST_FLOOR_S else 0.0

    def block(self) -> dict[str, Any]:
        """The side's entry in ``proxy.sides`` (schema meshsim/mesh/v1)."""
        split = (f"CPU per request {self.cpu_s * 1e3:.4g} ms over 2 x {self.pass_s * 1e3:.4g} ms fitted mean pass "
                 f"({self.why})")
        out: dict[str, Any] = {"cpu_fraction": round(self.fraction, 4)}
        if self.post_s > 0:
            out["post_response"] = {"family": "deterministic", "value_ms": round(self.post_s * 1e3, 4),
                                    "source": "CPU per request beyond the side's passes, after its last pass (only "
                                              "its mean is identified by CPU readings)"}
            out["source"] = f"{split}: every pass holds the worker, and the rest follows the response"
        else:
            out["source"] = f"{split}: cpu_fraction = CPU per request / pass time"
        return out


def fit_sides(cpu_entries: Sequence[dict[str, Any]], decomp: Decomposition,
              without_wake: dict[str, tuple[float, str]]) -> dict[str, SideCpuFit]:
    """Each side with a fitted pass and a CPU per request: the no-wake-up CPU of the cold wake fit when there is
    one, else the linear slope of cores against rate (both-sidecars runs first)."""
    fits: dict[str, SideCpuFit] = {}
    for side, (key, comps) in SIDE_SOURCES.items():
        fitted = next((decomp.components[c] for c in comps if c in decomp.components), None)
        if fitted is None or not fitted.best.distribution.mean > 0:
            continue
        cost = _cpu_per_request(key, cpu_entries, without_wake)
        if cost is not None:
            fits[side] = SideCpuFit(side, cost[0], fitted.best.distribution.mean, cost[1])
    return fits


def _cpu_per_request(key: str, cpu_entries: Sequence[dict[str, Any]],
                     without_wake: dict[str, tuple[float, str]]) -> tuple[float, str] | None:
    if key in without_wake and without_wake[key][0] > 0:
        return without_wake[key]
    e = preferred_cpu_entry(cpu_entries, key, PREFERRED_PATH)
    if e is None or not float(e["cpu_ms_per_request"]) > 0:
        return None
    rates = "/".join(f"{q:.0f}" for q in e["rates"])
    return float(e["cpu_ms_per_request"]) * 1e-3, f"slope of {key}'s cores over {e['path']} runs at {rates} rps"


def apply_sides(proxy: dict[str, Any], fits: dict[str, SideCpuFit], notes: list[str]) -> None:
    """Write ``proxy.sides`` (the proxy-wide ``cpu_fraction`` stays for passes without a side)."""
    if not fits:
        return
    proxy["sides"] = {side: fit.block() for side, fit in fits.items()}
    notes.append("proxy.sides: each side's CPU per request, measured: " + "; ".join(
        f"{side} {fit.cpu_s * 1e3:.4g} ms (cpu_fraction {fit.fraction:.3g}"
        + (f", {fit.post_s * 1e3:.3g} ms after the response)" if fit.post_s else ")") for side, fit in fits.items()))
