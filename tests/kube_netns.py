"""A network namespace owned by the --kube test session: the netns node's pod CIDR is routed into it.

Traffic the API server sends to a "pod" of that node lands here and nowhere else.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from meshsim.parent_death import Parent, start_program

NETNS_CIDR = "10.213.0.0/24"  # pod IPs of the netns node
NETNS_HOST_IP = "10.213.1.1/16"
NETNS_PEER_IP = "10.213.1.2/16"


class NetnsLab:
    """A network namespace owned by the test session; the netns node's pod CIDR is routed into it.

    Only root can make it; without it the e2e test is skipped (fails under CI=true) and no pod address is routable.
    """

    def __init__(self, name: str, host_if: str) -> None:
        self.name, self.host_if = name, host_if
        self.hosts_dir = Path("/etc/netns") / name
        self.procs: list[subprocess.Popen] = []

    @staticmethod
    def reap_stale() -> None:
        """Delete the namespaces of test sessions that are gone (killed before their teardown): two host veths
        with the same address and route would make the new namespace unreachable ("no route to host")."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        for name in listed:
            tag = name.removeprefix("meshsim-kube-")
            if tag != name and tag.isdigit() and not Path(f"/proc/{tag}").exists():
                subprocess.run(["ip", "netns", "del", name], capture_output=True)  # takes its veth pair along
                subprocess.run(["ip", "link", "del", f"mkh{tag}"], capture_output=True)

    @classmethod
    def create(cls) -> "NetnsLab | None":
        if os.geteuid() != 0 or shutil.which("ip") is None:
            return None
        cls.reap_stale()
        tag = f"{os.getpid() % 100000}"
        lab = cls(f"meshsim-kube-{tag}", f"mkh{tag}")
        peer = f"mkn{tag}"
        cmds = [
            ["ip", "netns", "add", lab.name],
            ["ip", "link", "add", lab.host_if, "type", "veth", "peer", "name", peer],
            ["ip", "link", "set", peer, "netns", lab.name],
            ["ip", "addr", "add", NETNS_HOST_IP, "dev", lab.host_if],
            ["ip", "link", "set", lab.host_if, "up"],
            ["ip", "-n", lab.name, "addr", "add", NETNS_PEER_IP, "dev", peer],
            ["ip", "-n", lab.name, "link", "set", peer, "up"],
            ["ip", "-n", lab.name, "link", "set", "lo", "up"],
        ]
        lab.peer_if = peer
        try:
            for cmd in cmds:
                subprocess.run(cmd, check=True, capture_output=True)
            lab.hosts_dir.mkdir(parents=True, exist_ok=True)
            (lab.hosts_dir / "hosts").write_text("127.0.0.1 localhost\n")
        except (subprocess.CalledProcessError, OSError):
            lab.stop()
            return None
        return lab

    def add_address(self, ip: str) -> None:
        subprocess.run(["ip", "-n", self.name, "addr", "add", f"{ip}/32", "dev", self.peer_if],
                       check=True, capture_output=True)
        # defensive: a neighbour entry the host made for this address before it existed would stay FAILED for
        # seconds ("no route to host"); the failures seen on 2026-11-28 were two sessions' namespaces colliding
        subprocess.run(["ip", "neigh", "flush", "to", ip, "dev", self.host_if], capture_output=True)

    def add_host(self, ip: str, name: str) -> None:
        with (self.hosts_dir / "hosts").open("a") as f:
            f.write(f"{ip} {name}\n")

    def spawn(self, argv: list[str], log: Path) -> subprocess.Popen:
        # it ends with this process (meshsim.parent_death); ``ip netns exec`` execs the program in place, which keeps
        # the parent-death signal
        proc = subprocess.Popen(["ip", "netns", "exec", self.name, *argv], stdout=log.open("wb"),
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=functools.partial(start_program, Parent.here()))
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        shutil.rmtree(self.hosts_dir, ignore_errors=True)
        try:
            self.hosts_dir.parent.rmdir()  # /etc/netns, when nothing else uses it
        except OSError:
            pass
