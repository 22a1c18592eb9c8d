"""What a fitted mesh model measured about the cluster it was calibrated on, beyond its proxies.

A cluster's own runs show more than the sidecars: how long a request takes between two of its nodes, and how an
app on its nodes wakes after being idle (a vCPU halted by the hypervisor, a core in a deep idle state). Those are
facts of the cluster, not of the topology a user draws, and a topology file's values for them are generic
(``single``'s cross-node hop was fitted on one cluster, its wake-up on another). A mesh model fitted from a
cluster's runs carries them in its ``cluster:`` block, and a prediction with that model uses them in place of the
topology's (``PredictOptions.cluster = "mesh"``, the default; ``"topology"`` keeps the topology as written).

How the cluster's runs drove their load (fortio's warm-up, -jitter, -uniform) is a fact of those runs too, and one
that moves a prediction at many connections (a shared listener hands the connections of a one-after-another
warm-up to one worker; synchronised connections fire bursts that -jitter spreads). A prediction's load is the user's
to choose where it says so: a fortio load takes the runs' driving for whatever its flags leave unsaid (a model
fitted on a pipeline predicts that pipeline's other runs as it makes them, and says what it took), and a prediction
whose fortio flags differ says so, with the flags that match the runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from meshsim.distribution_spec import distribution_at
from meshsim.distributions import Distribution
from meshsim.errors import FieldError, ModelError
from meshsim.fortio_warmup import DEFAULT_VERSION, WARMUP_MODES, warmup_mode
from meshsim.tick_hold import TickHold, parse_tick_hold
from meshsim.woken_first import WokenFirst, parse_woken_first
from meshsim.topology import Topology
from meshsim.wakeup import WakeUp, parse_wakeup
from meshsim.workload import Load
from meshsim.yamlio import Section

CLUSTER_CHOICES = ("mesh", "topology")  # whose network hop and app wake-up a prediction uses


WARMUP_WORDS = {"parallel": "all connections at once", "sequential": "one connection after another",
                "none": "none (-exactly)"}


@dataclass(frozen=True)
class LoadFacts:
    """How the cluster's runs drove fortio: its warm-up (``version``'s, or the runs' flag), -jitter, -uniform."""

    warmup: str
    jitter: bool
    uniform: bool
    version: str = ""
    source: str = ""

    def taken_words(self, taken: dict[str, object]) -> str:
        """What a prediction took from these facts (``taken``: option name -> value) that differs from fortio's plain
        defaults, and the flags that undo it ('' when nothing differs)."""
        said, undo = [], []
        if ("fortio_version" in taken or "fortio_warmup" in taken) and \
                (self.version or self.warmup != warmup_mode(DEFAULT_VERSION, None)):
            said.append(f"warm-up {WARMUP_WORDS[self.warmup]}" + (f" (fortio {self.version})" if self.version else ""))
            undo.append(f"--fortio-version {DEFAULT_VERSION}")
        for name in ("jitter", "uniform"):
            if taken.get(name):
                said.append(f"-{name}")
                undo.append(f"--no-{name}")
        if not said:
            return ""
        return (f"fortio driven as the calibration cluster's runs (the mesh model's cluster.load): {', '.join(said)}; "
                f"{', '.join(undo)} to drive it otherwise")

    def unlike(self, load: Load) -> str:
        """'' when ``load`` drives fortio as the runs did (or is not fortio); else what differs and the flags that
        match the runs."""
        driving = load.fortio_driving()
        if driving is None:
            return ""
        warmup, jitter, uniform = driving
        differs, flags = [], []
        if warmup != self.warmup:
            differs.append(f"warm-up {WARMUP_WORDS[self.warmup]} there, {WARMUP_WORDS[warmup]} here")
            flags.append(f"--fortio-version {self.version}" if self.version else f"--fortio-warmup {self.warmup}")
        for name, theirs, ours in (("jitter", self.jitter, jitter), ("uniform", self.uniform, uniform)):
            if theirs != ours:
                differs.append(f"-{name} {'on' if theirs else 'off'} there")
                flags.append(f"--{name}" if theirs else f"drop --{name}")
        if not differs:
            return ""
        return (f"fortio is driven unlike the calibration cluster's runs ({'; '.join(differs)}): "
                f"{', '.join(flags)} to predict those runs")


@dataclass(frozen=True)
class ClusterFacts:
    """``cross_node``: one hop between two nodes; ``wakeup``: every app's idle wake-up on the cluster's nodes;
    ``load``: how the cluster's runs drove fortio; ``tick_hold``: how often a thread keeps a core of the cluster's
    nodes till the scheduler's next tick; ``woken_first``: its nodes' scheduler runs a woken thread first."""

    cross_node: Distribution | None = None
    wakeup: WakeUp | None = None
    source: str = ""
    load: LoadFacts | None = None
    tick_hold: TickHold | None = None
    woken_first: WokenFirst | None = None

    def applied_to(self, topology: Topology) -> Topology:
        """``topology`` on this cluster: its cross-node hop and every service's wake-up replaced where measured."""
        out = topology
        if self.cross_node is not None:
            out = replace(out, network=replace(out.network, cross_node=self.cross_node))
        if self.wakeup is not None:
            services = {name: replace(svc, wakeup=self.wakeup) for name, svc in out.services.items()}
            out = replace(out, services=services)
        if self.tick_hold is not None:
            out = replace(out, tick_hold=self.tick_hold)
        if self.woken_first is not None:
            out = replace(out, woken_first=self.woken_first)
        return out


def parse_cluster(section: Section | None) -> ClusterFacts | None:
    if section is None:
        return None
    section.reject_unknown(("cross_node", "wakeup", "load", "tick_hold", "woken_first", "source", "note", "fit"))
    return ClusterFacts(distribution_at(section, "cross_node", required=False),
                        parse_wakeup(section.section("wakeup", required=False)), str(section.get("source", "")),
                        parse_load_facts(section.section("load", required=False)),
                        parse_tick_hold(section.section("tick_hold", required=False)),
                        parse_woken_first(section.section("woken_first", required=False)))


def parse_load_facts(section: Section | None) -> LoadFacts | None:
    if section is None:
        return None
    section.reject_unknown(("generator", "version", "warmup", "jitter", "uniform", "source", "note"))
    generator = section.get("generator", "fortio")
    if generator != "fortio":
        raise ModelError(f"{section.key('generator')}: only fortio runs are described (got {generator!r})")
    version = section.get("version")
    warmup = section.get("warmup")
    if version is None and warmup is None:
        raise ModelError(f"{section.key('version')}: give the runs' fortio version or their warm-up "
                         f"({', '.join(WARMUP_MODES)})")
    try:
        mode = warmup_mode(str(version), warmup) if version is not None else warmup_mode(DEFAULT_VERSION, warmup)
    except FieldError as exc:
        raise ModelError(f"{section.key('warmup' if warmup is not None else 'version')}: {exc.problem}") from None
    return LoadFacts(mode, section.boolean("jitter"), section.boolean("uniform"), str(version or ""),
                     str(section.get("source", "")))
