"""Shared test helpers: real components are required under CI=true, optional (skipped with a reason) elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from meshsim.errors import ComponentMissing
from meshsim.tools import find_binary


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_component(name: str) -> Path:
    """Path of a real binary; under CI=true a missing one fails the test, elsewhere it skips with the install hint."""
    try:
        return find_binary(name)
    except ComponentMissing as exc:
        if in_ci():
            pytest.fail(f"required component missing under CI=true: {exc}")
        pytest.skip(str(exc))
