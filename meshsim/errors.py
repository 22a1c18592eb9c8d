"""Errors a user can cause, and the exit codes the CLI maps them to.

Library code raises these with a one-line message naming the file, key or flag and
what is wrong; the CLI prints the message (no traceback) and exits with ``exit_code``.
"""

from __future__ import annotations


class MeshsimError(Exception):
    """A user error: bad input, unknown name, impossible parameter."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class FieldError(MeshsimError):
    """A user error in one named option (``rps``, ``think_ms``, ...).

    The library names the field; each front end says it in its own words (the CLI maps fields to its flags)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class ModelError(MeshsimError):
    """A model file (topology, mesh model, manifest) is malformed or inconsistent."""


class ComponentMissing(MeshsimError):
    """A real component (fortio, envoy, kube-apiserver, chromium) is not installed."""

    exit_code = 3


class RunFailed(MeshsimError):
    """A measurement run failed (process died, probe errors, saturated run refused)."""

    exit_code = 4


class Interrupted(MeshsimError):
    """The user pressed Ctrl-C; whatever was already measured is kept on disk."""

    exit_code = 130
