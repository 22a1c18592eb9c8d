"""Which Envoy worker takes each connection when the workers share one listening socket, by how fortio opens them.

Starts the lab's `single` topology with a server sidecar (`meshsim lab up`: the fortio echo app), then two more Envoys
(2 workers each) with that sidecar's configuration on their own ports: one whose listener shares one socket among its
workers (`enable_reuse_port: false`, every Envoy before 1.20 and so Istio 1.2's 1.11 and 1.7's 1.15) and one with a
socket per worker (`enable_reuse_port: true`, the kernel's hash). For each connection count and warm-up (fortio's
default, all connections at once, and `-sequential-warmup`, one after another as every fortio before 1.21 does) it
runs `fortio load -qps 1000 -c C -t 2s` REPEATS times and reads each worker's
`listener.<address>.worker_N.downstream_cx_total` from the admin endpoint before and after: the connections each
worker accepted. Loopback only. Usage: python shared_listener.py [REPEATS] > shared-listener.txt"""
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CONNECTIONS = (2, 4, 8, 16, 32, 64)
WARMUPS = (("all at once", []), ("one after another", ["-sequential-warmup"]))


def stats(admin: int, port: int) -> list[int]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/stats", timeout=5).read().decode()
    found = re.findall(rf"listener\.127\.0\.0\.1_{port}\.worker_(\d+)\.downstream_cx_total: (\d+)", text)
    return [int(n) for _, n in sorted(found)]


def accepted(admin: int, port: int, connections: int, flags: list[str]) -> list[int]:
    before = stats(admin, port)
    subprocess.run(["fortio", "load", "-qps", "1000", "-c", str(connections), "-t", "2s", "-loglevel", "error",
                    *flags, f"http://127.0.0.1:{port}/echo?size=1024"], check=True, capture_output=True)
    return [b - a for a, b in zip(before, stats(admin, port))]


def envoy(config: dict, reuse: bool, port: int, admin: int, folder: Path, base_id: int) -> subprocess.Popen:
    c = json.loads(json.dumps(config))
    c["admin"]["address"]["socket_address"]["port_value"] = admin
    listener = c["static_resources"]["listeners"][0]
    listener["address"]["socket_address"]["port_value"] = port
    listener["enable_reuse_port"] = reuse
    path = folder / f"envoy-{port}.json"
    path.write_text(json.dumps(c))
    proc = subprocess.Popen(["envoy", "-c", str(path), "--concurrency", "2", "--disable-hot-restart", "-l", "warning",
                             "--base-id", str(base_id)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{admin}/ready", timeout=1).read().strip() == b"LIVE":
                return proc
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"envoy on {port} did not become ready")


def main(repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "lab"
        subprocess.run(["meshsim", "lab", "up", "--topology", "single", "--mode", "server-sidecar",
                        "--state-dir", str(state)], check=True, capture_output=True)
        procs = []
        try:
            config = json.loads((state / "config" / "server_sidecar.json").read_text())
            version = re.search(r"version: \S+?/([\d.]+)/",
                                subprocess.run(["envoy", "--version"], capture_output=True, text=True).stdout).group(1)
            print(f"Envoy {version}, 2 workers; fortio load -qps 1000 -c C -t 2s; connections accepted by worker 0 "
                  f"and worker 1, {repeats} runs each")
            for name, reuse, port, admin, base_id in (("one shared socket", False, 19600, 19601, 71),
                                                      ("a socket per worker", True, 19610, 19611, 72)):
                procs.append(envoy(config, reuse, port, admin, Path(tmp), base_id))
                for warmup, flags in WARMUPS:
                    for c in CONNECTIONS:
                        runs = ["/".join(map(str, accepted(admin, port, c, flags))) for _ in range(repeats)]
                        print(f"{name:20s} warm-up {warmup:18s} c={c:<3d} {'  '.join(runs)}")
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait()
            subprocess.run(["meshsim", "lab", "down", "--state-dir", str(state)], capture_output=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
