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

    def __reduce__(self) -> tuple[object, ...]:
        # Pickling (a process pool's worker sends its exception back to the parent) rebuilds an exception from
        # ``self.args``, which is only the message: a subclass whose constructor takes more (FieldError's field and
        # problem) would fail there with a TypeError and break the pool. Rebuild from the attributes instead.
        return _rebuilt, (type(self), self.message, dict(self.__dict__))


def _rebuilt(cls: type[MeshsimError], message: str, state: dict[str, object]) -> MeshsimError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


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
