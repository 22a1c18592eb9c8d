"""Lab modes with real Envoy: mTLS between sidecars, Zipkin tracing to the lab collector, proxy vs client balancing."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from meshsim.errors import MeshsimError

from conftest import require_component  # tests/conftest.py: fails under CI=true, skips otherwise

pytestmark = [pytest.mark.lab, pytest.mark.unmeasured]  # asserts no timing: may run beside the simulations


@pytest.fixture(scope="module")
def binaries() -> None:
    require_component("fortio")
    require_component("envoy")


def _lab(tmp_path: Path, **spec):
    from meshsim.calibrate.measure.lab.running import Lab
    from meshsim.calibrate.measure.lab.spec import LabSpec

    return Lab(LabSpec(**spec), tmp_path / "lab")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=3) as resp:
        return resp.read().decode("utf-8", "replace")


def _stats(admin_port: int) -> dict[str, int]:
    data = json.loads(_get(f"http://127.0.0.1:{admin_port}/stats?format=json"))["stats"]
    return {s["name"]: s["value"] for s in data if "value" in s}


def _host_requests(admin_port: int, cluster: str) -> dict[str, int]:
    """Requests per upstream host of ``cluster`` from Envoy's /clusters admin page."""
    counts = {}
    for line in _get(f"http://127.0.0.1:{admin_port}/clusters").splitlines():
        match = re.fullmatch(rf"{re.escape(cluster)}::(127\.0\.0\.1:\d+)::rq_total::(\d+)", line.strip())
        if match:
            counts[match.group(1)] = int(match.group(2))
    return counts


def test_mtls_handshakes_and_client_subject(binaries, tmp_path):
    from meshsim.calibrate.measure.lab.probe import ProbeSettings, probe

    with _lab(tmp_path, topology="chain3", mode="mtls") as state:
        result = probe(state, ProbeSettings(rps=100, duration_s=1.0), tmp_path / "runs")
        debug = _get(f"{state.entry_url}/debug")
        stats = {name: _stats(state.process(f"{name}/sidecar").admin_port) for name in ("client", "s1", "s2", "s3")}
        # Plain HTTP to a service's inbound (TLS-only) listener is refused: traffic really is encrypted.
        s3_config = json.loads((tmp_path / "lab" / "config" / "s3_sidecar.json").read_text())
        inbound_port = s3_config["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"]
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            _get(f"http://127.0.0.1:{inbound_port}/echo")
    for service in ("s1", "s2", "s3"):
        handshakes = [v for k, v in stats[service].items() if k.startswith("listener.") and k.endswith(".ssl.handshake")]
        assert handshakes and sum(handshakes) >= 1, service
    assert stats["client"]["cluster.to_s1.ssl.handshake"] >= 1
    assert stats["s2"]["cluster.to_s3.ssl.handshake"] >= 1
    # The leaf app sees the identity of its direct caller (s2), set by its own inbound sidecar from the client cert.
    xfcc = re.search(r"X-Forwarded-Client-Cert: (.*)", debug)
    assert xfcc, debug
    assert 'Subject="CN=s2"' in xfcc.group(1) and "URI=spiffe://meshsim.lab/ns/lab/sa/s2" in xfcc.group(1)
    assert result.manifest.setup.features == ("mtls",) and result.manifest.setup.path == "both-sidecars"
    assert (tmp_path / "lab" / "certs" / "ca.pem").exists()


def _traced(tmp_path: Path, topology: str):
    """A 2 s probe of ``topology`` in tracing mode: (requests fortio sent, collector counts, probe result)."""
    from meshsim.calibrate.measure.lab.probe import ProbeSettings, probe

    settings = ProbeSettings(rps=100, connections=1, duration_s=2.0)
    with _lab(tmp_path, topology=topology, mode="tracing") as state:
        result = probe(state, settings, tmp_path / "runs")
        counts = json.loads(_get(f"http://127.0.0.1:{state.collector_port}/stats"))
    # Every request fortio made (its warm-up call per connection included) is traced. Count what it really sent:
    # on a busy machine fortio falls behind (130 of 200 calls once, with other jobs on both cores): the spans per
    # request below are what is checked; this only guards against a probe that hardly ran.
    requests = int(result.result["DurationHistogram"]["Count"]) + settings.connections
    assert requests >= 0.5 * (settings.expected_calls + settings.connections)
    return requests, counts, result


def test_tracing_collector_gets_one_span_per_proxy_pass(binaries, tmp_path):
    requests, counts, result = _traced(tmp_path, "chain3")
    # client sidecar (outbound), s1 and s2 (inbound + outbound), s3 (inbound): 6 proxy passes per request.
    assert counts["by_service"] == {"client": requests, "s1": 2 * requests, "s2": 2 * requests, "s3": requests}
    assert counts["spans"] == 6 * requests
    assert counts["by_kind"] == {"CLIENT": 3 * requests, "SERVER": 3 * requests}
    assert counts["bad_posts"] == 0
    assert f"collector received {6 * requests} spans" in result.manifest.notes
    assert result.manifest.cpu_seconds["collector"] > 0


def test_bookinfo_call_graph_every_service_called_once_per_request(binaries, tmp_path):
    """productpage calls details then reviews, reviews calls ratings: the spans per service prove the wiring."""
    requests, counts, result = _traced(tmp_path, "bookinfo")
    # client (outbound); productpage (inbound + 2 outbound); details (inbound); reviews (inbound + outbound); ratings
    assert counts["by_service"] == {"client": requests, "productpage": 3 * requests, "details": requests,
                                    "reviews": 2 * requests, "ratings": requests}
    assert counts["by_kind"] == {"CLIENT": 4 * requests, "SERVER": 4 * requests}
    assert result.manifest.setup.topology == "bookinfo"
    assert set(result.manifest.cpu_seconds) >= {"productpage/app", "details/app", "reviews/app", "ratings/app",
                                                "productpage/sidecar", "ratings/sidecar", "client/sidecar"}


@pytest.mark.parametrize("mode", ["proxy-lb", "client-lb"])
def test_balancing_spreads_requests_over_replicas(binaries, tmp_path, mode):
    from meshsim.calibrate.measure.lab.probe import ProbeSettings, probe

    settings = ProbeSettings(rps=300, connections=2, duration_s=1.5)
    with _lab(tmp_path, topology="lb3", mode=mode) as state:
        result = probe(state, settings, tmp_path / "runs")
        balancer = "lb:server" if mode == "proxy-lb" else "client/sidecar"
        cluster = "server" if mode == "proxy-lb" else "to_server"
        total = int(result.result["DurationHistogram"]["Count"]) + settings.connections  # + warm-up calls
        deadline = time.monotonic() + 5  # Envoy's counters may trail the last response a little
        while sum((per_host := _host_requests(state.process(balancer).admin_port, cluster)).values()) != total \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        replica_ports = sorted(int(p.command[p.command.index("-http-port") + 1].split(":")[1])
                               for p in state.processes if p.name.startswith("server/app#"))
        names = {p.name for p in state.processes}
    assert sorted(int(h.split(":")[1]) for h in per_host) == replica_ports and len(replica_ports) == 3
    assert sum(per_host.values()) == total
    # Round robin per worker: every replica gets a fair share (not all on one).
    assert min(per_host.values()) >= total / 3 * 0.6, per_host
    manifest = result.manifest
    assert manifest.setup.path == mode and manifest.setup.replicas == 3
    if mode == "proxy-lb":
        assert "lb:server" in names and "lb:server" in manifest.cpu_seconds
    else:  # no extra hop: the client's sidecar is the only proxy
        assert not any(n.startswith("lb:") for n in names) and "client/sidecar" in manifest.cpu_seconds
    assert manifest.cpu_seconds["server/app"] > 0  # summed over the three replicas


@pytest.mark.parametrize("mode", ["server-sidecar", "mtls", "tracing", "proxy-lb"])
def test_generated_bootstraps_pass_envoy_validation(binaries, tmp_path, mode):
    from meshsim.calibrate.measure.lab.processes import plan_lab
    from meshsim.calibrate.measure.lab.spec import LabSpec

    envoy = require_component("envoy")
    topology = "lb3" if mode == "proxy-lb" else "chain3"
    plan = plan_lab(LabSpec(topology=topology, mode=mode), tmp_path, require_component("fortio"), envoy)
    configs = sorted((tmp_path / "config").glob("*.json"))
    assert len(configs) == sum(1 for p in plan.processes if p.proxy) > 0
    for config in configs:
        out = subprocess.run([str(envoy), "--mode", "validate", "-c", str(config), "--disable-hot-restart",
                              "-l", "error"], capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, f"{config.name}: {out.stdout[-500:]} {out.stderr[-500:]}"


@pytest.mark.parametrize("spec, field", [
    ({"topology": "chain3", "mode": "proxy-lb"}, "mode: proxy-lb"),
    ({"topology": "lb3", "mode": "sidecar"}, "topology: lb3"),
    ({"topology": "ring4", "mode": "sidecar"}, "topology"),
    ({"topology": "chain3", "mode": "istio"}, "mode"),
    ({"topology": "chain3", "mode": "sidecar", "cpus": "a,b"}, "cpus"),
    ({"topology": "chain3", "mode": "sidecar", "workers": 0}, "workers"),
    ({"topology": "chain3", "mode": "sidecar", "trace_backend": "jaeger"}, "trace_backend: jaeger: needs mode tracing"),
    ({"topology": "chain3", "mode": "tracing", "trace_backend": "tempo"}, "trace_backend"),
])
def test_bad_lab_spec_names_the_field(spec, field):
    from meshsim.calibrate.measure.lab.spec import LabSpec

    with pytest.raises(MeshsimError) as info:
        LabSpec(**spec)
    assert str(info.value).startswith(field) and "\n" not in str(info.value)
