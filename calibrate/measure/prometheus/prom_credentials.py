"""Credentials for a Prometheus behind authentication: from the environment or a file, never from the command line.

A bearer token (``MESHSIM_PROMETHEUS_TOKEN``) or basic auth (``MESHSIM_PROMETHEUS_USERNAME`` and
``MESHSIM_PROMETHEUS_PASSWORD``), or a file (``--prometheus-credentials FILE``) holding ``token: ...`` or
``username: ...`` and ``password: ...`` (YAML). A command line is visible to every user of the machine (``ps``) and
lands in shell histories, so no flag takes a secret, and a URL with ``user:password@`` in it is refused. The secret
is kept out of every repr and message: errors name the variable or the file, never the value.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import yaml

from meshsim.errors import MeshsimError

TOKEN_VAR = "MESHSIM_PROMETHEUS_TOKEN"
USER_VAR = "MESHSIM_PROMETHEUS_USERNAME"
PASSWORD_VAR = "MESHSIM_PROMETHEUS_PASSWORD"


@dataclass(frozen=True)
class Credentials:
    """How to authenticate (``kind``: none | bearer | basic) and where the secret came from (for messages)."""

    kind: str = "none"
    origin: str = ""
    username: str = ""
    secret: str = field(default="", repr=False)

    def header(self) -> dict[str, str]:
        """The Authorization header, or none."""
        if self.kind == "bearer":
            return {"Authorization": f"Bearer {self.secret}"}
        if self.kind == "basic":
            pair = base64.b64encode(f"{self.username}:{self.secret}".encode()).decode("ascii")
            return {"Authorization": f"Basic {pair}"}
        return {}

    def describe(self) -> str:
        return "no credentials" if self.kind == "none" else f"{self.kind} credentials from {self.origin}"


def _from_mapping(values: Mapping[str, object], origin: str, names: tuple[str, str, str]) -> Credentials:
    token, user, password = (values.get(n) for n in names)
    if token and (user or password):
        raise MeshsimError(f"{origin}: give a token or a username and password, not both")
    if token:
        return Credentials("bearer", origin, secret=str(token).strip())
    if bool(user) != bool(password):
        missing = names[2] if user else names[1]
        raise MeshsimError(f"{origin}: {missing} is missing (basic auth needs a username and a password)")
    if user:
        return Credentials("basic", origin, str(user), str(password))
    return Credentials()


def _from_file(path: Path) -> Credentials:
    where = f"--prometheus-credentials {path}"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MeshsimError(f"{where}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError:  # the parser's message would quote the file's lines, the secret among them
        raise MeshsimError(f"{where}: not YAML (expected token: ... or username: ... and password: ...)") from None
    if not isinstance(data, dict) or not set(data) <= {"token", "username", "password"}:
        keys = sorted(map(str, data)) if isinstance(data, dict) else type(data).__name__
        raise MeshsimError(f"{where}: expected the keys token, or username and password (found {keys})")
    found = _from_mapping(data, where, ("token", "username", "password"))
    if found.kind == "none":
        raise MeshsimError(f"{where}: holds no token and no username/password")
    return found


def load_credentials(file: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Credentials:
    """The file's credentials when given, else the environment's, else none; both given is refused."""
    env = os.environ if environ is None else environ
    from_env = _from_mapping({k: env.get(k, "") for k in (TOKEN_VAR, USER_VAR, PASSWORD_VAR)}, "the environment",
                             (TOKEN_VAR, USER_VAR, PASSWORD_VAR))
    if file is None:
        return from_env
    if from_env.kind != "none":
        raise MeshsimError(f"--prometheus-credentials {file}: credentials are also set in the environment "
                           f"({TOKEN_VAR} or {USER_VAR}); give one source")
    return _from_file(Path(file))
