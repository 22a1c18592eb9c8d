"""Which runs the decomposition fits a pass against: a proxy-LB pass is not fitted against a client-lb run that goes
through the caller's own sidecar."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshsim.calibrate.fit_runs import fit_runs
from meshsim.catalog import load_mesh
from meshsim.distributions import Gamma, Shifted

# fresh_draws: an autouse fixture
from synthetic_passes import (BASE, GAMMA, OUTBOUND, fresh_draws, sum_of, write_pass_run)  # noqa: F401


def test_proxy_lb_not_fitted_against_a_client_lb_through_a_sidecar(tmp_path: Path) -> None:
    lb_pass = Shifted(Gamma(2.0, 0.02e-3), 0.03e-3)  # faster than the sidecar's outbound pass
    write_pass_run(tmp_path, "base", "baseline", 1000.0, sum_of(BASE))
    write_pass_run(tmp_path, "client-lb", "client-lb", 1000.0, sum_of(BASE, OUTBOUND, OUTBOUND),
                   cpu={"client/sidecar": 3.0}, topology="lb3")
    write_pass_run(tmp_path, "proxy-lb", "proxy-lb", 1000.0, sum_of(BASE, lb_pass, lb_pass), cpu={"lb:server": 3.0},
                   topology="lb3")
    summary = fit_runs([tmp_path], "lb-sidecar", tmp_path / "lb.yaml", families=GAMMA)
    mesh = load_mesh(str(tmp_path / "lb.yaml"))
    assert mesh.load_balancer.passes["request"].mean == pytest.approx(lb_pass.mean, rel=0.08)
    assert any("balance in the caller's sidecar" in n for n in summary.notes)
