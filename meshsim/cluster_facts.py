"""What a fitted mesh model measured about the cluster it was calibrated on, beyond its proxies.

A cluster's own runs show more than the sidecars: how long a request takes between two of its nodes, and how an
app on its nodes wakes after being idle (a vCPU halted by the hypervisor, a core in a deep idle state). Those are
facts of the cluster, not of the topology a user draws, and a topology file's values for them are generic
(``single``'s cross-node hop was fitted on one cluster, its wake-up on another). A mesh model fitted from a
cluster's runs carries them in its ``cluster:`` block, and a prediction with that model uses them in place of the
topology's (``PredictOptions.cluster = "mesh"``, the default; ``"topology"`` keeps the topology as written).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from meshsim.distribution_spec import distribution_at
from meshsim.distributions import Distribution
from meshsim.topology import Topology
from meshsim.wakeup import WakeUp, parse_wakeup
from meshsim.yamlio import Section

CLUSTER_CHOICES = ("mesh", "topology")  # whose network hop and app wake-up a prediction uses


@dataclass(frozen=True)
class ClusterFacts:
    """``cross_node``: one hop between two nodes; ``wakeup``: every app's idle wake-up on the cluster's nodes."""

    cross_node: Distribution | None = None
    wakeup: WakeUp | None = None
    source: str = ""

    def applied_to(self, topology: Topology) -> Topology:
        """``topology`` on this cluster: its cross-node hop and every service's wake-up replaced where measured."""
        out = topology
        if self.cross_node is not None:
            out = replace(out, network=replace(out.network, cross_node=self.cross_node))
        if self.wakeup is not None:
            services = {name: replace(svc, wakeup=self.wakeup) for name, svc in out.services.items()}
            out = replace(out, services=services)
        return out


def parse_cluster(section: Section | None) -> ClusterFacts | None:
    if section is None:
        return None
    section.reject_unknown(("cross_node", "wakeup", "source", "note", "fit"))
    return ClusterFacts(distribution_at(section, "cross_node", required=False),
                        parse_wakeup(section.section("wakeup", required=False)), str(section.get("source", "")))
