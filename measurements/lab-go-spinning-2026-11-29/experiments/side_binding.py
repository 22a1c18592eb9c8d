"""Experiment: a middle sidecar's inbound and outbound passes ride different TCP connections (the caller's pool into
its inbound listener, the app's pool into its outbound one), each bound to a worker by the kernel on its own: key the
worker binding by (side, connection) instead of by connection."""
from meshsim.mesh import pass_side
from meshsim.sim.engine import components

_orig = components.ProxyInstance.pass_


def pass_(self, now, kind, conn, nbytes, *, last=False, handshake=False):
    if pass_side(kind) == "outbound" and self.station.servers > 1:
        conn = -1 - conn  # the outbound listener's connection: a key of its own
    return _orig(self, now, kind, conn, nbytes, last=last, handshake=handshake)


components.ProxyInstance.pass_ = pass_
