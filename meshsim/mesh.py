"""Mesh models: how a mesh's proxies spend time on each pass of a request, and what each feature adds.

Data in ``models/meshes/*.yaml`` (schema ``meshsim/mesh/v1``, documented in models/README.md). The dispatch
discipline is part of the model because it changes queueing: Envoy pins each downstream connection to one worker
(W separate FIFO queues), tokio- and Go-based proxies share work across their workers (one queue, W servers).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from meshsim.cluster_facts import ClusterFacts, parse_cluster
from meshsim.distributions import MS, Distribution
from meshsim.distribution_spec import distribution_at, parse_distribution
from meshsim.errors import FieldError, ModelError
from meshsim.limits import MAX_CORES, MAX_MEMORY_MB, MAX_MESSAGE_BYTES, MAX_WORKERS, MIN_CPU_LIMIT, check_finite
from meshsim.wakeup import WakeUp, parse_wakeup
from meshsim.yamlio import Section

SCHEMA = "meshsim/mesh/v1"
PASS_KINDS = ("inbound_request", "inbound_response", "outbound_request", "outbound_response")
SIDES = ("inbound", "outbound")  # a sidecar's two halves: the server's (inbound passes) and the caller's (outbound)
LB_PASS_KINDS = ("request", "response")
DISPATCH = ("pinned", "shared")
PLACEMENT = ("sidecar", "node")
# How a proxy's listener hands new connections to its workers: ``hash`` -- one listening socket per worker
# (SO_REUSEPORT, Envoy's default on Linux since 1.20): the kernel hashes each connection to a worker; ``round_robin``
# -- Envoy's exact_balance; ``shared_listener`` -- every worker waits on one listening socket (Envoy before
# reuse_port became its default: Istio 1.2's Envoy 1.11, 1.7's 1.15, 1.11's 1.19): all are woken, the one whose core
# is still warm (the one busy most recently) reaches accept() first and takes the connection, and a busy worker
# cannot accept at all, so connections opened together or one after another land on one worker. (Envoy 1.40 on a
# 6.18 kernel piles connections opened together on one worker but spreads those opened one after another; the
# Istio 1.7 rows of 2020 fit the one-worker reading best: measurements/lab-shared-listener-2026-11-29.)
BALANCE = ("hash", "round_robin", "shared_listener")
MIN_ACCEPT_WINDOW = 0.05 * MS  # an idle thread woken by epoll is running again within tens of microseconds
LB_POLICIES = ("round_robin", "least_request", "random", "ewma")
# a caller without a proxy of its own: each keep-alive connection of the load generator stays on the replica
# kube-proxy picked when it opened (sim/engine/system.py System.caller_policy)
KUBE_PROXY = "kube_proxy"


@dataclass(frozen=True)
class Memory:
    """A proxy's resident memory: what it holds idle, per open connection and per request in flight.

    resident = base + per_connection x open downstream connections (each with the upstream connection it drives:
    socket buffers, codec and TLS state) + per_in_flight x mean requests held (a stream's headers and body
    buffers, from its first byte in to its last byte out: by Little's law rps x time held) + each enabled
    feature's constant (``Feature.memory_mb``: stats filters keep their series, TLS its contexts)."""

    base_mb: float = 0.0
    per_connection_mb: float = 0.0
    per_in_flight_mb: float = 0.0

    def __post_init__(self) -> None:
        for name in ("base_mb", "per_connection_mb", "per_in_flight_mb"):
            check_finite(f"memory.{name}", getattr(self, name), low=0.0, high=MAX_MEMORY_MB)

    def resident_mb(self, connections: float, in_flight: float, features_mb: float = 0.0) -> float:
        """Resident MB with ``connections`` open, ``in_flight`` requests held on average and the features' part."""
        return self.base_mb + self.per_connection_mb * connections + self.per_in_flight_mb * in_flight + features_mb


@dataclass(frozen=True)
class SideCpu:
    """The CPU one side of a sidecar spends per request, where it differs from the proxy's defaults.

    Envoy's outbound half (the caller's sidecar) does more work off the latency path than on it (stream and stats
    teardown, access logs after the response is written), while much of its inbound half's latency is kernel and
    scheduling delay: measured per side, their CPU per request is close although their latencies differ by 3-4x.
    ``cpu_fraction`` is the part of this side's pass time that holds the worker; ``post_response`` the work after
    this side's last pass (it replaces the proxy's ``post_response`` on this side)."""

    cpu_fraction: float = 1.0
    post_response: Distribution | None = None


def pass_side(kind: str) -> str:
    """The side of a pass kind ('inbound_request' -> 'inbound'); a load balancer's passes have none ('')."""
    side = kind.split("_", 1)[0]
    return side if side in SIDES else ""


@dataclass(frozen=True)
class ProxyModel:
    """One proxy process: its workers, dispatch, per-pass service times and resource model."""

    kind: str
    passes: Mapping[str, Distribution]
    workers: int = 2
    dispatch: str = "pinned"
    placement: str = "sidecar"
    connection_balance: str = "hash"
    # shared_listener: how long after accepting a connection the accepting worker still takes the next one (its
    # accept loop runs while an idle worker is being woken); None: the proxy's cold-wake delay, at least 50 us (an
    # idle thread's scheduling on Linux)
    accept_window: float | None = None
    cpu_limit: float | None = None
    header_bytes: int = 0
    per_kb: float = 0.0
    post_response: Distribution | None = None
    wakeup: WakeUp | None = None
    memory: Memory = field(default_factory=Memory)
    policy: str = "round_robin"
    # Fraction of the passes' mean time that is CPU work holding the worker (and the CPU quota); the rest is delay
    # (kernel network path, scheduling) that does not stop the worker serving others. A pass holds its worker up to
    # the ceiling that keeps this mean (meshsim/hold_ceiling.py), not this share of itself.
    cpu_fraction: float = 1.0
    # CPU a proxy spends with no traffic at all (stats flushes, health checks, configuration pushes), on its main
    # thread rather than its workers: it adds to the CPU a proxy reports, not to any request's latency.
    idle_cores: float = 0.0
    # a sidecar side's own held fraction and post-response work, where calibration measured them per side
    sides: Mapping[str, SideCpu] = field(default_factory=dict)
    # the passes were fitted as a mode's latency beyond its baseline's (meshsim fit): they hold the loopback hops
    # between an app and its sidecar, which a prediction then must not add again
    loopback_in_passes: bool = False

    @property
    def accept_window_s(self) -> float:
        """A shared listener's accept window: given, else the time an idle worker needs to wake and reach accept()."""
        if self.accept_window is not None:
            return self.accept_window
        return max(MIN_ACCEPT_WINDOW, self.wakeup.delay if self.wakeup is not None else 0.0)

    def side_fraction(self, side: str) -> float:
        """The held fraction of a side's passes ('' for a load balancer's): its own, else ``cpu_fraction``."""
        own = self.sides.get(side)
        return own.cpu_fraction if own is not None else self.cpu_fraction


@dataclass(frozen=True)
class Handshake:
    cpu: Distribution
    round_trips: int = 1


@dataclass(frozen=True)
class Collector:
    """A station receiving exported spans; its saturation backs up nothing but shows in CPU.

    ``node``: the topology node it runs on, whose cores it then shares (the lab runs it beside the sidecars);
    None, or a node the topology does not declare, gives it cores of its own. ``wakeup``: what a span costs beyond
    its ``service`` when it finds the collector idle (``resume_cpu``: paid per span at a low rate, per batch when
    spans queue)."""

    workers: int
    service: Distribution
    node: str | None = None
    wakeup: WakeUp | None = None


@dataclass(frozen=True)
class Feature:
    """An add-on such as mtls or tracing: extra time per pass and per KB, handshakes, export work."""

    name: str
    default: bool = False
    per_pass: Mapping[str, Distribution] = field(default_factory=dict)
    per_kb: float = 0.0
    header_bytes: int = 0
    handshake: Handshake | None = None
    post_response: Distribution | None = None
    collector: Collector | None = None
    sampling: float = 1.0
    description: str = ""
    # what the feature adds to every proxy's resident memory, MB (stats series, TLS contexts): see Memory
    memory_mb: float = 0.0
    # what the feature adds to a proxy's cold wake (its code and data are cold too): delay and CPU, seconds
    cold_delay: float = 0.0
    cold_cpu: float = 0.0
    # what the feature adds to every wake of a worker from idle, however short, seconds of CPU: requests that arrive
    # while the worker is busy share it (mTLS in the lab: its extra CPU falls with the requests a wake finds)
    resume_cpu: float = 0.0
    # part of the fitted passes: every calibration run had it on, so turning it off is not identified (refused)
    fixed: bool = False
    # side -> the part of this feature's per-pass time that holds the worker, where it differs from the side's own
    # (Mixer's filter computes more of its time than the pass it rides on): fitted from bursts with the feature on
    sides: Mapping[str, float] = field(default_factory=dict)

    def side_fraction(self, side: str, default: float) -> float:
        """The held fraction of this feature's per-pass time on ``side``: its own, else ``default`` (the side's)."""
        return self.sides.get(side, default)


@dataclass(frozen=True)
class MeshModel:
    name: str
    proxy: ProxyModel | None
    features: Mapping[str, Feature]
    load_balancer: ProxyModel | None
    client_lb_policy: str = "round_robin"
    version: str = ""
    description: str = ""
    calibration: Mapping[str, Any] = field(default_factory=dict)
    origin: str = ""
    content_hash: str = ""
    cluster: ClusterFacts | None = None  # the calibration cluster's network hop and wake-ups (meshsim.cluster)

    def with_proxy_overrides(self, workers: int | None = None, cpu_limit: float | None = None) -> "MeshModel":
        if self.proxy is None or (workers is None and cpu_limit is None):
            return self
        proxy = self.proxy
        if workers is not None:
            if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
                raise FieldError("proxy_workers", f"an integer in [1, {MAX_WORKERS}], got {workers!r}")
            proxy = replace(proxy, workers=workers)
        if cpu_limit is not None:
            check_finite("proxy_cpu_limit", cpu_limit, low=MIN_CPU_LIMIT, high=MAX_CORES)
            proxy = replace(proxy, cpu_limit=cpu_limit)
        return replace(self, proxy=proxy)


# ---------------------------------------------------------------------------------------------------------------

_META = ("source", "note", "fit", "description")
# A second per KB is a 8 kbit/s link; beyond it a payload-sized request never finishes in simulated time.
MAX_PER_KB_MS = 1000.0


def _memory(s: Section | None) -> Memory:
    if s is None:
        return Memory()
    s.reject_unknown(("base_mb", "per_connection_mb", "per_in_flight_mb", *_META))
    return Memory(*(s.number(k, 0.0, maximum=MAX_MEMORY_MB) for k in ("base_mb", "per_connection_mb",
                                                                      "per_in_flight_mb")))


def _cpu_limit(s: Section) -> float | None:
    return s.number("cpu_limit", minimum=MIN_CPU_LIMIT, maximum=MAX_CORES) if s.has("cpu_limit") else None


def _fraction(s: Section) -> float:
    cpu_fraction = s.number("cpu_fraction", 1.0, strictly_positive=True)
    if cpu_fraction > 1:
        raise ModelError(f"{s.key('cpu_fraction')}: a fraction in (0, 1], got {cpu_fraction}")
    return cpu_fraction


def _sides(s: Section, pass_kinds: tuple[str, ...]) -> dict[str, SideCpu]:
    """``sides: {inbound: {cpu_fraction, post_response}, outbound: {...}}``: a sidecar's per-side CPU."""
    sides_sec = s.section("sides", required=False)
    if sides_sec is None:
        return {}
    if pass_kinds != PASS_KINDS:
        raise ModelError(f"{s.key('sides')}: only a sidecar or node proxy has sides (inbound, outbound)")
    sides_sec.reject_unknown((*SIDES, *_META))
    out = {}
    for name in SIDES:
        side = sides_sec.section(name, required=False)
        if side is not None:
            side.reject_unknown(("cpu_fraction", "post_response", *_META))
            out[name] = SideCpu(_fraction(side), distribution_at(side, "post_response", required=False))
    return out


def _proxy(s: Section, pass_kinds: tuple[str, ...]) -> ProxyModel:
    s.reject_unknown(("kind", "placement", "dispatch", "connection_balance", "accept_window_ms", "workers", "cpu_limit",
                      "header_bytes", "per_kb_ms", "passes", "post_response", "wakeup", "memory", "policy",
                      "cpu_fraction", "idle_millicores", "sides", "loopback_in_passes", *_META))
    cpu_fraction = _fraction(s)
    passes_sec = s.section("passes")
    assert passes_sec is not None
    passes_sec.reject_unknown((*pass_kinds, *_META))
    passes = {k: distribution_at(passes_sec, k) for k in pass_kinds}
    return ProxyModel(
        kind=s.string("kind", "envoy"),
        passes=passes,
        workers=s.integer("workers", 2, maximum=MAX_WORKERS),
        dispatch=s.choice("dispatch", DISPATCH, "pinned"),
        placement=s.choice("placement", PLACEMENT, "sidecar"),
        connection_balance=s.choice("connection_balance", BALANCE, "hash"),
        accept_window=s.number("accept_window_ms", maximum=1000.0) * MS if s.has("accept_window_ms") else None,
        cpu_limit=_cpu_limit(s),
        header_bytes=s.integer("header_bytes", 0, minimum=0, maximum=MAX_MESSAGE_BYTES),
        per_kb=s.number("per_kb_ms", 0.0, maximum=MAX_PER_KB_MS) * MS,
        post_response=distribution_at(s, "post_response", required=False),
        wakeup=parse_wakeup(s.section("wakeup", required=False)),
        memory=_memory(s.section("memory", required=False)),
        policy=s.choice("policy", LB_POLICIES, "round_robin"),
        cpu_fraction=cpu_fraction,
        idle_cores=s.number("idle_millicores", 0.0, maximum=1000.0 * MAX_WORKERS) / 1000.0,
        sides=_sides(s, pass_kinds),
        loopback_in_passes=s.boolean("loopback_in_passes"),
    )


def _per_pass(s: Section) -> dict[str, Distribution]:
    if not s.has("per_pass"):
        return {}
    raw = s.data["per_pass"]
    if isinstance(raw, Mapping) and "family" not in raw:
        sub = Section(raw, s.key("per_pass"))
        sub.reject_unknown((*PASS_KINDS, *_META))
        return {k: parse_distribution(sub.data[k], sub.key(k)) for k in PASS_KINDS if sub.has(k)}
    dist = parse_distribution(raw, s.key("per_pass"))
    return {k: dist for k in PASS_KINDS}


def _feature(name: str, s: Section) -> Feature:
    s.reject_unknown(("default", "per_pass", "per_kb_ms", "header_bytes", "handshake", "post_response",
                      "collector", "sampling", "cold_wake", "resume_cpu_ms", "memory_mb", "fixed", "sides", *_META))
    cold = s.section("cold_wake", required=False)
    if cold is not None:
        cold.reject_unknown(("delay_ms", "cpu_ms", *_META))
    handshake = None
    hs = s.section("handshake", required=False)
    if hs is not None:
        hs.reject_unknown(("cpu", "round_trips", *_META))
        handshake = Handshake(distribution_at(hs, "cpu"), hs.integer("round_trips", 1, minimum=0, maximum=100))
    collector = None
    cs = s.section("collector", required=False)
    if cs is not None:
        cs.reject_unknown(("workers", "service", "node", "wakeup", *_META))
        node = cs.get("node")
        if node is not None and (not isinstance(node, str) or not node):
            raise ModelError(f"{cs.key('node')}: expected a node name, got {node!r}")
        collector = Collector(cs.integer("workers", 1, maximum=MAX_WORKERS), distribution_at(cs, "service"), node,
                              parse_wakeup(cs.section("wakeup", required=False)))
    sampling = s.number("sampling", 1.0)
    if sampling > 1:
        raise ModelError(f"{s.key('sampling')}: a fraction in [0, 1], got {sampling}")
    default, fixed = s.boolean("default"), s.boolean("fixed")
    if fixed and not default:
        raise ModelError(f"{s.key('fixed')}: a fixed feature is part of the fitted passes, so it must be default: true")
    feature = Feature(name, default, _per_pass(s), s.number("per_kb_ms", 0.0, maximum=MAX_PER_KB_MS) * MS,
                   s.integer("header_bytes", 0, minimum=0, maximum=MAX_MESSAGE_BYTES),
                   handshake, distribution_at(s, "post_response", required=False), collector, sampling,
                   s.get("description", ""), s.number("memory_mb", 0.0, maximum=MAX_MEMORY_MB),
                   cold.number("delay_ms", 0.0, maximum=1000.0) * MS if cold is not None else 0.0,
                   cold.number("cpu_ms", 0.0, maximum=1000.0) * MS if cold is not None else 0.0,
                   s.number("resume_cpu_ms", 0.0, maximum=1000.0) * MS)
    return replace(feature, fixed=fixed, sides=_feature_sides(s))


def _feature_sides(s: Section) -> dict[str, float]:
    """``sides: {inbound: {cpu_fraction}, outbound: {...}}``: the held fraction of a feature's per-pass time."""
    sides_sec = s.section("sides", required=False)
    if sides_sec is None:
        return {}
    sides_sec.reject_unknown((*SIDES, *_META))
    out = {}
    for name in SIDES:
        side = sides_sec.section(name, required=False)
        if side is not None:
            side.reject_unknown(("cpu_fraction", *_META))
            if not side.has("cpu_fraction"):
                raise ModelError(f"{side.key('cpu_fraction')}: missing (the held fraction of the feature's passes)")
            out[name] = _fraction(side)
    return out


def mesh_from_data(data: Any, where: str, digest: str = "") -> MeshModel:
    top = Section(data, f"{where}:")
    top.reject_unknown(("schema", "name", "version", "description", "sources", "proxy", "features",
                        "load_balancer", "client_lb_policy", "calibration", "cluster", *_META))
    if top.get("schema", SCHEMA) != SCHEMA:
        raise ModelError(f"{top.key('schema')}: expected {SCHEMA!r}, got {top.get('schema')!r}")
    proxy_sec = top.section("proxy", required=False)
    proxy = _proxy(proxy_sec, PASS_KINDS) if proxy_sec is not None else None
    features: dict[str, Feature] = {}
    feat_sec = top.section("features", required=False)
    if feat_sec is not None:
        if proxy is None and feat_sec.data:
            raise ModelError(f"{feat_sec.where}: features need a proxy (this mesh has none)")
        for fname in feat_sec.data:
            features[str(fname)] = _feature(str(fname), Section(feat_sec.data[fname], feat_sec.key(str(fname))))
    if any(f.cold_delay or f.cold_cpu or f.resume_cpu for f in features.values()) and \
            (proxy is None or proxy.wakeup is None):
        raise ModelError(f"{where}: features.*.cold_wake and resume_cpu_ms add to the proxy's wake-ups, but "
                         "proxy.wakeup is missing")
    lb_sec = top.section("load_balancer", required=False)
    lb = _proxy(lb_sec, LB_PASS_KINDS) if lb_sec is not None else None
    calibration = top.get("calibration", {})
    return MeshModel(
        name=top.string("name"),
        proxy=proxy,
        features=features,
        load_balancer=lb,
        client_lb_policy=top.choice("client_lb_policy", (*LB_POLICIES, KUBE_PROXY), "round_robin"),
        version=str(top.get("version", "")),
        description=str(top.get("description", "")),
        calibration=calibration if isinstance(calibration, Mapping) else {},
        origin=where,
        content_hash=digest,
        cluster=parse_cluster(top.section("cluster", required=False)),
    )
