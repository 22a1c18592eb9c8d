"""Errors raised in a forked worker reach the command as themselves: pickled back whole (a FieldError came back as a
TypeError and broke the pool), and a point a sweep worker refuses comes back as its own error."""

from __future__ import annotations

import pickle

import pytest

from meshsim.errors import FieldError, ModelError


def test_errors_with_more_than_a_message_survive_pickling() -> None:
    """A worker's exception is pickled back to its parent: FieldError(field, problem) came back as a TypeError and
    broke the pool (sweep --rps 1e300:1e308:2)."""
    from meshsim.calibrate.fit.acceptance import FitRefused

    for error in (FieldError("rps", "too many"), FitRefused("no family fits", "proxy.pass", ["r1"]), ModelError("x")):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error) and vars(back) == vars(error)


def test_a_point_refused_inside_a_sweep_worker_comes_back_as_its_error() -> None:
    """Past the up-front check (called here directly), a worker's own refusal reaches the parent as itself."""
    from meshsim.request import PredictOptions
    from meshsim.sim.experiments.sweep_points import rows_in_local_processes

    point = PredictOptions(topology="single", mesh="none", rps=1e9, replications=1, processes=1, saturation=False)
    with pytest.raises(FieldError) as info:
        list(rows_in_local_processes([point], [0], 1))
    assert info.value.field == "rps" and "station visits" in info.value.problem
