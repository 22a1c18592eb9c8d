"""``meshsim calibrate --kube``: run the probe plan on a real cluster and store each probe as a run folder.

For each configuration: create its labelled namespace and objects, wait for the pods, run every probe through
the fortio client's REST API, sample CPU/memory before and after, write the run atomically. Whatever ends the
run (normal end, error, Ctrl-C) deletes exactly the namespaces this run created, selected by its own labels.
"""

from __future__ import annotations

import re
import secrets
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

import yaml

from meshsim.errors import FieldError, Interrupted, MeshsimError, ModelError
from meshsim.outputs import check_folder, print_result
from meshsim.run_folder import LoadSettings, RunManifest, Setup, read_manifest, write_run

from . import usage
from .client import KubeApi
from .cluster import (cluster_facts, create_objects, delete_run_namespaces, istio_tracing_provider, mesh_version,
                      owner_tag, reap_orphan_namespaces, wait_ready)
from .meshes import BYPASS_PORT, MESH_PORT, SERVER_ONLY_PORT, MeshProfile, mesh_profile
from .objects import NamespaceSpec, expected_pods, namespace_objects, run_selector
from .probe_plan import Configuration, Expanded, KubePlan, Probe, expand, load_plan
from .transport import FortioRequest, ServiceProxyTransport, Transport, parse_probe

StepHook = Callable[[str, dict[str, Any]], None]
_PREFIX = re.compile(r"^[a-z0-9]([a-z0-9-]{0,28}[a-z0-9])?$")
_PORTS = {"baseline": BYPASS_PORT, "server-sidecar": SERVER_ONLY_PORT, "both-sidecars": MESH_PORT,
          "client-lb": MESH_PORT, "proxy-lb": MESH_PORT}


@dataclass
class KubeCalibration:
    """What one call did: run id, folders written, probes skipped by --resume, namespaces created."""

    run: str
    mesh: str
    out: Path
    written: list[Path] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    skipped: tuple[str, ...] = ()
    namespaces: list[str] = field(default_factory=list)
    left_behind: list[str] = field(default_factory=list)
    resource_source: str = ""
    notes: list[str] = field(default_factory=list)


def _probe_url(probe: Probe, plan: KubePlan, mesh: MeshProfile, namespace: str) -> str:
    host = mesh.service_host(plan.services[0], namespace, probe.path)
    size = f"?size={plan.payload_bytes}" if plan.payload_bytes else ""
    return f"http://{host}:{_PORTS[probe.path]}/echo{size}"


def _namespace_name(prefix: str, conf: Configuration, run: str) -> str:
    return f"{prefix}-{conf.name}-{run.rsplit('-', 1)[-1]}"


def _finished(out: Path, run_id: str) -> bool:
    folder = out / run_id
    if not (folder / "manifest.yaml").is_file():
        return False
    try:
        return read_manifest(folder).status == "ok"
    except ModelError:
        return False


def _pods_summary(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": p["metadata"]["name"], "node": p["spec"].get("nodeName", ""),
             "containers": [{"name": c["name"], "image": c.get("image", ""), "resources": c.get("resources", {})}
                            for c in p["spec"].get("containers", [])]} for p in pods]


def _proxy_cpu_limit(pods: list[dict[str, Any]], mesh: MeshProfile) -> float | None:
    for p in pods:
        for c in p["spec"].get("containers", []):
            if c["name"] == mesh.sidecar_container:
                limit = (c.get("resources") or {}).get("limits", {}).get("cpu")
                return usage.cpu_quantity(str(limit)) if limit else None
    return None


class _Progress:
    def __init__(self, total: int, per_probe_s: float, stream: TextIO) -> None:
        self.total, self.done, self.per_probe_s, self.stream = total, 0, per_probe_s, stream

    def report_progress(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def probe(self, label: str) -> None:
        left = (self.total - self.done) * self.per_probe_s
        self.report_progress(f"[{self.done + 1}/{self.total}] {label}  (~{int(left // 60)}m{int(left % 60):02d}s of probes left)")


def dry_run_text(expanded: Expanded, plan: KubePlan, mesh: MeshProfile, prefix: str, run: str) -> str:
    docs = []
    for conf in expanded.configurations():
        ns = NamespaceSpec(_namespace_name(prefix, conf, run), run, conf)
        docs.extend(namespace_objects(ns, plan, mesh))
    return yaml.safe_dump_all(docs, sort_keys=False)


def calibrate_kube(
    *,
    mesh: str = "none",
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace_prefix: str = "meshsim-probe",
    out: str | Path = "measurements/kube",
    plan: str | Path | KubePlan | None = None,
    dry_run: bool = False,
    resume: bool = False,
    transport: Callable[[KubeApi], Transport] | None = None,
    on_step: StepHook | None = None,
    stderr: TextIO = sys.stderr,
    stdout: TextIO = sys.stdout,
) -> KubeCalibration:
    """Calibrate a mesh on a real cluster: the one library call behind ``meshsim calibrate --kube``.

    ``transport`` builds how probes reach the fortio client (default: the API server's service proxy);
    ``on_step(step, info)`` is called before each step (namespace, objects, ready, probe, stored, cleanup).
    """
    profile = mesh_profile(mesh)
    if not _PREFIX.match(namespace_prefix):
        raise FieldError("namespace_prefix", f"{namespace_prefix!r} must be 1-30 lowercase letters, digits or '-'")
    the_plan = plan if isinstance(plan, KubePlan) else load_plan(plan)
    expanded = expand(the_plan, profile)
    if not expanded.probes:
        raise FieldError("plan", f"no probe of {the_plan.source} applies to mesh {mesh} "
                           f"({'; '.join(expanded.skipped) or 'empty plan'})")
    run = f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    out_dir = Path(out)
    result = KubeCalibration(run=run, mesh=mesh, out=out_dir, skipped=expanded.skipped)
    hook = on_step or (lambda step, info: None)
    for reason in expanded.skipped:
        print(f"skipped: {reason}", file=stderr)

    if dry_run:
        print_result(dry_run_text(expanded, the_plan, profile, namespace_prefix, run).rstrip("\n"), stdout)
        print(f"dry run: {len(expanded.probes)} probes in {len(expanded.configurations())} namespaces, "
              f"~{expanded.probe_seconds(the_plan.duration_s) / 60:.1f} min of probes; nothing was created",
              file=stderr)
        return result

    check_folder(out_dir, "out")  # before any namespace is made
    result.resumed, todo = _pending(expanded.probes, mesh, out_dir, resume)
    if not todo:
        print(f"all {len(result.resumed)} probes already in {out_dir}; nothing to do", file=stderr)
        return result
    if result.resumed:
        print(f"resume: {len(result.resumed)} probes already done, {len(todo)} to go", file=stderr)

    api = KubeApi(kubeconfig, context)
    progress = _Progress(len(todo), the_plan.duration_s + 2.0, stderr)
    try:
        facts, version = _survey_cluster(api, profile, todo, run, result, progress)
        probe_transport = transport(api) if transport else ServiceProxyTransport(api)
        for conf in expanded.configurations():
            probes = [p for p in todo if p.configuration.name == conf.name]
            if probes:
                _run_configuration(api, the_plan, profile, conf, probes, run, namespace_prefix, out_dir, facts,
                                   version, probe_transport, result, progress, hook)
    except KeyboardInterrupt:
        _cleanup(api, run, result, hook, progress)
        raise Interrupted(f"interrupted: {len(result.written)} probes stored in {out_dir}; "
                          f"run again with --resume to finish") from None
    except BaseException:
        _cleanup(api, run, result, hook, progress)
        raise
    if _cleanup(api, run, result, hook, progress):
        raise Interrupted(f"interrupted while cleaning up: all {len(result.written)} probes stored in {out_dir}")
    progress.report_progress(f"done: {len(result.written)} probes stored in {out_dir}")
    return result


def _pending(probes: Sequence[Probe], mesh: str, out_dir: Path, resume: bool) -> tuple[list[str], list[Probe]]:
    """(run ids already finished in ``out_dir``, probes still to run); finished ones need ``resume``."""
    done = [p.run_id(mesh) for p in probes if _finished(out_dir, p.run_id(mesh))]
    if done and not resume:
        raise FieldError("out", f"{out_dir} already holds {len(done)} finished probes of this plan "
                           f"(e.g. {done[0]}); pass --resume to skip them, or choose another --out")
    return done, [p for p in probes if p.run_id(mesh) not in done]


def _survey_cluster(api: KubeApi, profile: MeshProfile, todo: Sequence[Probe], run: str, result: KubeCalibration,
                    progress: _Progress) -> tuple[dict[str, Any], str]:
    """The cluster's facts and the mesh's version, announced with the usage source (noted in ``result``)."""
    facts = cluster_facts(api)
    reap_orphan_namespaces(api, log=progress.report_progress)
    version = mesh_version(api, profile)
    if profile.name == "istio" and any("tracing" in p.features for p in todo):
        provider = istio_tracing_provider(api)
        result.notes.append(f"istio tracing provider: {provider}")
        progress.report_progress(f"tracing probes export spans to istio's default tracing provider: {provider}")
    result.resource_source = usage.detect_source(api)
    progress.report_progress(f"cluster {facts['kubernetes_version']} at {api.target.host}, {len(facts['nodes'])} nodes; "
                 f"mesh {profile.name} {version}; run {run}; {len(todo)} probes; usage from {result.resource_source}")
    return facts, version


def _cleanup(api: KubeApi, run: str, result: KubeCalibration, hook: StepHook, progress: _Progress) -> bool:
    """Delete this run's namespaces whatever happens; True when Ctrl-C arrived meanwhile."""
    interrupted = False
    if not result.namespaces:  # nothing was created (e.g. the API server is unreachable): nothing to delete
        api.close()
        return interrupted
    try:
        hook("cleanup", {"run": run})
    except KeyboardInterrupt:
        interrupted = True  # Ctrl-C now must not leave namespaces behind: go on deleting
    try:
        result.left_behind = delete_run_namespaces(api, run, log=progress.report_progress, known=result.namespaces)
    except KeyboardInterrupt:
        interrupted = True
        result.left_behind = delete_run_namespaces(api, run, wait_s=0, log=progress.report_progress,
                                                   known=result.namespaces)
    except MeshsimError as exc:
        progress.report_progress(f"cleanup failed: {exc}; delete them with label selector {run_selector(run)}")
        result.left_behind = ["?"]
    if result.left_behind:
        progress.report_progress(f"namespaces still terminating: {', '.join(result.left_behind)}")
    api.close()
    return interrupted


def _run_configuration(api: KubeApi, plan: KubePlan, mesh: MeshProfile, conf: Configuration, probes: list[Probe],
                       run: str, prefix: str, out: Path, facts: dict[str, Any], version: str,
                       transport: Transport, result: KubeCalibration, progress: _Progress, hook: StepHook) -> None:
    ns = NamespaceSpec(_namespace_name(prefix, conf, run), run, conf, owner_tag())
    objects = namespace_objects(ns, plan, mesh)
    hook("namespace", {"namespace": ns.name})
    result.namespaces.append(ns.name)  # before the POST: an interrupted POST may still have created it
    create_objects(api, objects[:1])
    hook("objects", {"namespace": ns.name})
    create_objects(api, objects[1:])
    progress.report_progress(f"namespace {ns.name}: waiting for {expected_pods(plan, conf)} pods (timeout {plan.ready_timeout_s:g} s)")
    hook("ready", {"namespace": ns.name})
    pods = wait_ready(api, ns.name, expected_pods(plan, conf), plan.ready_timeout_s, mesh, run_selector(run))
    transport.prepare(ns.name, 60.0)
    for probe in probes:
        run_id = probe.run_id(mesh.name)
        url = _probe_url(probe, plan, mesh, ns.name)
        request = FortioRequest(url=url, rps=probe.rps, connections=probe.connections, duration_s=plan.duration_s,
                                resolution_s=plan.resolution_s, uniform=plan.uniform, jitter=plan.jitter,
                                labels=run_id)
        hook("probe", {"namespace": ns.name, "probe": run_id, "url": url})
        progress.probe(f"{mesh.name} {conf.name}/{probe.path} c={probe.connections} rps={probe.rps:g} "
                       f"({plan.duration_s:g} s)")
        before = usage.sample(api, result.resource_source, ns.name, pods, mesh)
        started = datetime.now(timezone.utc)
        raw = transport.run(ns.name, request)
        after = usage.sample(api, result.resource_source, ns.name, pods, mesh)
        checked = parse_probe(raw, f"probe {run_id}")
        notes = [usage.describe(result.resource_source)]
        if "tracing" in probe.features:
            notes += [n for n in result.notes if "tracing" in n]
        if after.error:
            notes = [f"resource usage unavailable ({after.source}): {after.error}"]
        if not checked.checked:
            notes.append("calibration reader (meshsim.calibrate.measure.fortio_result) missing: raw fortio JSON stored unchecked")
        manifest = RunManifest(
            id=run_id,
            source="kube",
            provenance=(f"meshsim calibrate --kube run {run}: fortio ({plan.image}) REST API in namespace {ns.name} "
                        f"via the API server's service proxy, cluster {facts['api_server']} "
                        f"(context {facts['context']})"),
            when=started.isoformat(timespec="seconds"),
            where={**facts, "namespace": ns.name, "configuration": conf.name, "run": run,
                   "pods": _pods_summary(pods), "resource_source": result.resource_source,
                   "plan": Path(plan.source).name},  # the name only: no local paths in measurement data
            setup=Setup(mesh=mesh.name, path=probe.path, features=probe.features, topology=plan.topology,
                        mesh_version=version, proxy_cpu_limit=_proxy_cpu_limit(pods, mesh),
                        replicas=conf.replicas, payload_bytes=plan.payload_bytes),
            load=LoadSettings(rps=probe.rps, connections=probe.connections, duration_s=plan.duration_s,
                              uniform=plan.uniform, jitter=plan.jitter, resolution_s=plan.resolution_s, url=url),
            cpu_seconds=usage.cpu_seconds(before, after, plan.duration_s),
            memory_mb={k: round(v, 3) for k, v in after.memory_mb.items()},
            notes="; ".join(notes),
        )
        folder = write_run(out / run_id, manifest, checked.raw)
        result.written.append(folder)
        progress.done += 1
        progress.report_progress(f"    {checked.summary} -> {folder}")
        hook("stored", {"namespace": ns.name, "probe": run_id, "folder": str(folder)})
    hook("namespace-done", {"namespace": ns.name})
    # Free the cluster before the next configuration (the final cleanup waits for deletion to complete).
    api.delete(f"/api/v1/namespaces/{ns.name}")
