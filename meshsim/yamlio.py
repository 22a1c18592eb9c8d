"""Reading model YAML files with errors a user can act on (file, line, key)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping

import yaml

from meshsim.errors import ModelError


def parse_yaml_text(text: str, where: str) -> Any:
    """Parse YAML, turning syntax errors into one line naming ``where`` and the line number."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ModelError(f"{where}:{line}: invalid YAML ({problem})") from None


def read_yaml(path: Path) -> tuple[Any, str]:
    """Return (parsed document, sha256 of the bytes) of a model file."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ModelError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return parse_yaml_text(raw.decode("utf-8", errors="replace"), str(path)), content_hash(raw)


def content_hash(raw: bytes | str) -> str:
    data = raw.encode() if isinstance(raw, str) else raw
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]


class Section:
    """A mapping inside a model file that remembers where it is, for error messages."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            raise ModelError(f"{where.rstrip(':')}: expected a mapping, got {type(data).__name__}")
        self.data = data
        self.where = where

    def key(self, name: str) -> str:
        # top-level sections are created with where="FILE:"; nested ones extend it with dots
        return f"{self.where} {name}" if self.where.endswith(":") else f"{self.where}.{name}"

    def has(self, name: str) -> bool:
        return name in self.data and self.data[name] is not None

    def get(self, name: str, default: Any = None) -> Any:
        value = self.data.get(name, default)
        return default if value is None else value

    def require(self, name: str) -> Any:
        if name not in self.data or self.data[name] is None:
            raise ModelError(f"{self.key(name)}: missing")
        return self.data[name]

    def section(self, name: str, required: bool = True) -> "Section | None":
        if not self.has(name):
            if required:
                raise ModelError(f"{self.key(name)}: missing")
            return None
        return Section(self.data[name], self.key(name))

    def number(self, name: str, default: float | None = None, *, minimum: float | None = 0.0,
               strictly_positive: bool = False) -> float:
        value = self.get(name, default)
        if value is None:
            raise ModelError(f"{self.key(name)}: missing")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ModelError(f"{self.key(name)}: expected a number, got {value!r}")
        if strictly_positive and value <= 0:
            raise ModelError(f"{self.key(name)}: must be > 0, got {value}")
        if minimum is not None and value < minimum:
            raise ModelError(f"{self.key(name)}: must be >= {minimum}, got {value}")
        return float(value)

    def integer(self, name: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.get(name, default)
        if value is None:
            raise ModelError(f"{self.key(name)}: missing")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError(f"{self.key(name)}: expected an integer, got {value!r}")
        if value < minimum:
            raise ModelError(f"{self.key(name)}: must be >= {minimum}, got {value}")
        return value

    def choice(self, name: str, options: tuple[str, ...], default: str | None = None) -> str:
        value = self.get(name, default)
        if value not in options:
            raise ModelError(f"{self.key(name)}: unknown value {value!r} (known: {', '.join(options)})")
        return str(value)

    def string(self, name: str, default: str | None = None) -> str:
        value = self.get(name, default)
        if value is None:
            raise ModelError(f"{self.key(name)}: missing")
        if not isinstance(value, str):
            raise ModelError(f"{self.key(name)}: expected text, got {value!r}")
        return value

    def reject_unknown(self, known: tuple[str, ...]) -> None:
        for name in self.data:
            if name not in known:
                raise ModelError(f"{self.key(str(name))}: unknown key (known: {', '.join(known)})")
