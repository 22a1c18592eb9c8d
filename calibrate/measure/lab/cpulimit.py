"""CPU quota per lab process through cgroups (v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us`` where only v1 is mounted).

A limit of L cores is a CFS quota of L * 100 ms per 100 ms period, the same mechanism as a Kubernetes CPU limit.
The lab makes one child cgroup per limited process under its own parent group and removes them at ``down``.
Where no writable cpu controller exists, asking for a limit fails with one line saying so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from meshsim.errors import RunFailed

PERIOD_US = 100_000
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass
class CpuLimiter:
    """Creates ``<root>/meshsim-lab-<tag>/<process>`` cgroups with a CFS quota."""

    root: Path  # the cpu controller's hierarchy root
    version: int  # 1 or 2
    tag: str
    created: list[Path] = field(default_factory=list)

    @property
    def parent(self) -> Path:
        return self.root / f"meshsim-lab-{self.tag}"

    def limit(self, name: str, pid: int, cores: float) -> Path:
        if cores <= 0:
            raise RunFailed(f"lab: --cpu-limit must be > 0 cores, got {cores}")
        quota = max(1000, int(round(cores * PERIOD_US)))
        group = self.parent / name.replace("/", "_").replace(":", "_")
        try:
            if not self.parent.exists():
                self.parent.mkdir()
                self.created.append(self.parent)
                if self.version == 2:
                    (self.parent / "cgroup.subtree_control").write_text("+cpu")
            group.mkdir(exist_ok=True)
            self.created.append(group)
            if self.version == 2:
                (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            else:
                (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (group / "cpu.cfs_quota_us").write_text(str(quota))
            (group / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            raise RunFailed(f"lab: cannot set a CPU limit for {name} in {group}: {exc.strerror or exc}") from None
        return group

    def cleanup(self) -> None:
        """Remove the groups made (their processes must be gone first); leftovers are harmless empty dirs."""
        for group in reversed(self.created):
            try:
                group.rmdir()
            except OSError:
                pass
        self.created.clear()


def _v2_root() -> Path | None:
    for root in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        controllers = root / "cgroup.controllers"
        try:
            if "cpu" in controllers.read_text().split() and os.access(root, os.W_OK):
                return root
        except OSError:
            continue
    return None


def _v1_root() -> Path | None:
    for root in (CGROUP_ROOT / "cpu", CGROUP_ROOT / "cpu,cpuacct"):
        if (root / "cpu.cfs_quota_us").exists() and os.access(root, os.W_OK):
            return root
    return None


def find_cpu_limiter(tag: str) -> CpuLimiter:
    """A limiter on a writable cpu controller, or RunFailed explaining that CPU limits are unavailable here."""
    v2 = _v2_root()
    if v2 is not None:
        return CpuLimiter(v2, 2, tag)
    v1 = _v1_root()
    if v1 is not None:
        return CpuLimiter(v1, 1, tag)
    raise RunFailed(
        "lab: --cpu-limit is unavailable on this machine: no writable cgroup cpu controller "
        f"(neither {CGROUP_ROOT}/cgroup.controllers with 'cpu' nor {CGROUP_ROOT}/cpu/cpu.cfs_quota_us); "
        "run as root on a host with cgroups, or use --cpus to pin proxies instead"
    )
