"""How a container's CPU or memory series becomes a model component (``server/sidecar``, ``reviews-v1/app``), as
data each metric set (``prom_metric_sets``) holds.

The lab's exporter names its ``container`` label after the component already (``ContainerIsComponent``). A
Kubernetes cluster does not: every Istio sidecar container is ``istio-proxy`` and every Linkerd one
``linkerd-proxy``, the app containers have their own names, and which workload a container belongs to is its pod's.
``PodWorkload`` reads the workload from a label naming it (when the set names one and the series carries it) or
else from the pod's name, by the naming rules of the controllers that make pods (``POD_RULES``), and adds
``/sidecar`` for the mesh's proxy container, ``/app`` for any other; the series of every pod of a workload add up
into its component, as the model adds up a service's replicas. A series whose pod name no rule reads is returned
apart, to be counted in a note, never dropped unseen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol

# Kubernetes's SafeEncodeString alphabet (no vowels, no 0/1/3): a ReplicaSet's pod-template-hash and the random
# suffix of a pod's generated name are written in it
_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"
_NAME = r"(?P<workload>[a-z0-9](?:[-.a-z0-9]*[a-z0-9])?)"  # a Kubernetes object name (DNS-1123 subdomain)


@dataclass(frozen=True)
class PodRule:
    """One controller's pod names: ``pattern`` matches a whole pod name, its group ``workload`` the workload."""

    controller: str
    pattern: re.Pattern[str]

    def workload(self, pod: str) -> str | None:
        match = self.pattern.fullmatch(pod)
        return match["workload"] if match else None


POD_RULES = (
    # Deployment -> ReplicaSet <workload>-<pod-template-hash> -> pod <replicaset>-<5 random characters>
    PodRule("Deployment", re.compile(rf"{_NAME}-{_SAFE}{{1,10}}-{_SAFE}{{5}}")),
    # StatefulSet: <workload>-<ordinal>
    PodRule("StatefulSet", re.compile(rf"{_NAME}-(?:0|[1-9][0-9]*)")),
)


class ComponentNaming(Protocol):
    """How a series's labels name the component it is of (None: no rule reads them)."""

    @property
    def group_by(self) -> tuple[str, ...]: ...

    def component(self, labels: Mapping[str, str]) -> str | None: ...


@dataclass(frozen=True)
class ContainerIsComponent:
    """The container label is the component's name (the lab's exporter: ``client/sidecar``, ``server/app``)."""

    container_label: str = "container"
    pod_label: str = "pod"

    @property
    def group_by(self) -> tuple[str, ...]:
        return (self.pod_label, self.container_label)

    def component(self, labels: Mapping[str, str]) -> str | None:
        return labels.get(self.container_label) or None


@dataclass(frozen=True)
class PodWorkload:
    """A Kubernetes container: its pod's workload, ``/sidecar`` for ``proxy_container``, ``/app`` for the others."""

    proxy_container: str
    workload_labels: tuple[str, ...] = ()  # labels naming the workload outright, tried before the pod's name
    rules: tuple[PodRule, ...] = POD_RULES
    container_label: str = "container"
    pod_label: str = "pod"

    @property
    def group_by(self) -> tuple[str, ...]:
        return (self.pod_label, self.container_label, *self.workload_labels)

    def workload(self, labels: Mapping[str, str]) -> str | None:
        named = next((labels[k] for k in self.workload_labels if labels.get(k)), None)
        pod = labels.get(self.pod_label, "")
        return named or next(filter(None, (rule.workload(pod) for rule in self.rules)), None)

    def component(self, labels: Mapping[str, str]) -> str | None:
        workload = self.workload(labels)
        if workload is None:
            return None
        return f"{workload}/{'sidecar' if labels.get(self.container_label) == self.proxy_container else 'app'}"


def series_name(labels: Mapping[str, str]) -> str:
    """A series as a note names it: ``pod/container`` (or its labels when it has neither)."""
    pod, container = labels.get("pod", ""), labels.get("container", "")
    return f"{pod}/{container}" if pod or container else str(dict(labels))


def by_component(naming: ComponentNaming, series: Iterable[tuple[Mapping[str, str], float]]
                 ) -> tuple[dict[str, float], tuple[str, ...]]:
    """The series' values summed per component, and the series no rule named (sorted)."""
    totals: dict[str, float] = {}
    unnamed = []
    for labels, value in series:
        component = naming.component(labels)
        if component is None:
            unnamed.append(series_name(labels))
        else:
            totals[component] = totals.get(component, 0.0) + value
    return totals, tuple(sorted(unnamed))


VERSION_SUFFIX = re.compile(r"-v[0-9]+$")  # Kubernetes's convention for a workload's version (reviews-v1)


def model_workload(workload: str, known: Iterable[str]) -> str:
    """The model's name for a measured workload: the same name when the model has it, else the name without a
    version suffix when the model has that (Bookinfo's productpage-v1 is the topology's productpage; its
    reviews-v1, v2 and v3 are services of their own there)."""
    names = set(known)
    bare = VERSION_SUFFIX.sub("", workload)
    return workload if workload in names or bare not in names else bare
