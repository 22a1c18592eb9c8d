"""The proxies' CPU the three-mesh paper's CPU table identifies: idle CPU, CPU per pass, and the held fraction.

Tables 5, 11 and 17 print the data plane's CPU at 50, 450 and 3500 rps, read as cores of one proxy of the busiest
kind (the study's CPU note). A proxy's CPU is its idle CPU (stats flushes, health checks, configuration pushes) plus
what its requests burn: cores = idle + r x passes x CPU per pass, with r the requests per second through it. At
50 rps the idle CPU is nearly all of it (Istio's busiest sidecar passes 5 requests a second), so the fit column alone
cannot see the per-request part; the 3500 rps cell can. The two cells (medians of the five repetitions) fix both
unknowns: they are the fit's cells (role ``fit``); the 450 rps cell is predicted.

The engine books a pass's held part (its work x ``cpu_fraction``) as CPU and holds the worker for exactly that; the
rest of the pass is delay that frees the worker. So the held fraction is the CPU per pass over the mean pass work
(the fitted mixture's mean; per_kb_ms adds about 0.0003 ms on these messages, 0.01 % of a pass, left out), and the
model books at the fitted rates what the paper measured: a proxy that measured a few hundredths of a core cannot
saturate its workers there. The table has one number per proxy, so it cannot split a sidecar's CPU between its
inbound and outbound sides: one fraction serves both (no ``proxy.sides``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Mapping

from meshsim.errors import ModelError

from meshsim.calibrate.load.cpu_cost import fit_cpu
from meshsim.calibrate.measure.tables import load_table

CPU_FIT_RPS = (50.0, 3500.0)  # the cells that feed the fit: idle CPU at the lowest rate, CPU per request at the top


@dataclass(frozen=True)
class BusiestProxy:
    """One proxy of the busiest kind: its share of a stage's requests and its passes per request."""

    share: float
    passes: int
    what: str


SIDECAR = BusiestProxy(0.1, 6, "web's sidecar (1 of 10 instances): its inbound request and response and web's two "
                               "outbound calls of two passes each")
BUSIEST = {"istio": SIDECAR, "linkerd": SIDECAR,
           "traefik-mesh": BusiestProxy(0.2, 4, "a node's Traefik proxy (2 of the 10 web instances per node): web's "
                                                "two outbound calls of two passes each")}


def published_cpu(mesh: str, rps: float) -> float:
    """Median over the five repetitions of a mesh's data-plane CPU (cores of one proxy) at one stage."""
    rows = load_table("paper001_cpu").where(mesh=mesh, rate_rps=float(rps), layer="data-plane")
    return statistics.median(r["cpu_percent"] for r in rows)


@dataclass(frozen=True)
class ProxyCpuFit:
    mesh: str
    idle_cores: float
    cpu_per_pass_ms: float
    mean_pass_ms: float
    cells: tuple[tuple[float, float], ...]  # (stage rps, cores) the fit read

    @property
    def busiest(self) -> BusiestProxy:
        return BUSIEST[self.mesh]

    @property
    def held_fraction(self) -> float:
        return self.cpu_per_pass_ms / self.mean_pass_ms

    def cores(self, rps: float) -> float:
        """The cores the model books one busiest proxy at stage rate ``rps`` (when it carries that rate)."""
        return self.idle_cores + rps * self.busiest.share * self.busiest.passes * self.cpu_per_pass_ms * 1e-3

    def worker_utilisation(self, rps: float, workers: int) -> float:
        """The share of its workers' time the busiest proxy's passes hold at ``rps`` (idle CPU is on its main
        thread, not on the workers)."""
        return (self.cores(rps) - self.idle_cores) / workers

    def source(self) -> str:
        cells = ", ".join(f"{c:g} at {r:g} rps" for r, c in self.cells)
        return (f"fitted by meshsim study mesh-comparison (mesh_comparison_cpu.fit_proxy_cpu) from the data-plane "
                f"CPU cells of Tables 5 and 17 (medians, cores of one proxy: {cells}): cores = idle + r x "
                f"{self.busiest.passes} passes x CPU per pass through {self.busiest.what}, r = {self.busiest.share:g} "
                f"x the stage's rate; idle {self.idle_cores * 1e3:.4g} millicores, CPU per pass "
                f"{self.cpu_per_pass_ms * 1e3:.4g} us; cpu_fraction = CPU per pass / fitted mean pass "
                f"({self.mean_pass_ms:.4g} ms): the rest of a pass is delay that frees the worker")


def fit_proxy_cpu(mesh: str, mean_pass_ms: float, cores_by_rps: Mapping[float, float] | None = None) -> ProxyCpuFit:
    """Idle CPU and CPU per pass of ``mesh``'s busiest proxy from its CPU at the fit's stages (the paper's medians,
    or ``cores_by_rps``: stage rps -> cores), and the held fraction over a mean pass of ``mean_pass_ms``."""
    cores = dict(cores_by_rps) if cores_by_rps is not None else {r: published_cpu(mesh, r) for r in CPU_FIT_RPS}
    busiest = BUSIEST[mesh]
    rates = sorted(cores)
    line = fit_cpu(f"{mesh} data plane", [r * busiest.share for r in rates], [cores[r] for r in rates])
    where = f"paper001_cpu: {mesh}'s data-plane CPU at {'/'.join(f'{r:g}' for r in rates)} rps"
    if not line.cost_s > 0 or not line.idle_cores >= 0:
        raise ModelError(f"{where} ({', '.join(f'{cores[r]:g}' for r in rates)} cores) gives no positive CPU per "
                         f"request and idle CPU (per request {line.cost_s * 1e3:.3g} ms, idle {line.idle_cores:.3g})")
    per_pass_ms = line.cost_s * 1e3 / busiest.passes
    if per_pass_ms > mean_pass_ms:
        raise ModelError(f"{where}: {per_pass_ms:.3g} ms of CPU per pass is more than the mean pass "
                         f"({mean_pass_ms:.3g} ms); a pass cannot hold its worker longer than it lasts")
    return ProxyCpuFit(mesh, line.idle_cores, per_pass_ms, mean_pass_ms, tuple((r, cores[r]) for r in rates))
