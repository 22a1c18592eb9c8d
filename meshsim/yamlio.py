"""Reading model YAML files with errors a user can act on (file, line, key)."""

from __future__ import annotations

import errno
import hashlib
import math
import stat
from pathlib import Path
from typing import Any, Mapping

import yaml

from meshsim.errors import ModelError

# Nesting deeper than this is no model or manifest anyone writes (ours nest 6 levels); PyYAML composes and
# constructs recursively, so a hostile file 5,000 levels deep would end in RecursionError instead of an error line.
MAX_YAML_DEPTH = 64
# A model file or manifest is a few KB; refuse before parsing anything that could only exhaust memory.
MAX_YAML_BYTES = 16 * 1024 * 1024
# Aliases share one node, so a few hundred bytes can stand for billions of values ("billion laughs"); anything
# that walks the data (a check, a JSON export) would then hang. Refuse a document whose expanded size is above this
# (ours have a few hundred nodes).
MAX_YAML_EXPANDED_NODES = 1_000_000


# libyaml's C parser where PyYAML has it: the shipped measurements' 597 manifests take 0.9 s with every check below,
# 5.4 s through PyYAML's Python parser without them (part of the Dash app's start-up). The constructor, and with it
# the duplicate-key check, is Python either way.
_PARSER_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StrictSafeLoader(_PARSER_LOADER):  # type: ignore[misc, valid-type]
    """``yaml.SafeLoader`` (no Python tags) that also refuses duplicate mapping keys (with :func:`load_yaml`: deep
    nesting and alias bombs too).

    A duplicate key silently replaced the first definition (a whole service could vanish).
    """

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:  # type: ignore[override]
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base constructor reports it
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _check_depth(text: str) -> None:
    """Refuse nesting deeper than MAX_YAML_DEPTH from the parser's events (a flat loop; the text is parsed again to
    compose it, in C a small price), before anything composes or constructs the document recursively."""
    depth = 0
    for event in yaml.parse(text, Loader=_PARSER_LOADER):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise yaml.constructor.ConstructorError(
                    None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _expanded_nodes(node: Any, sizes: dict[int, int]) -> int:
    """How many nodes ``node`` stands for once every alias is copied out (shared nodes counted once per use,
    each computed once: linear in the document, however large the expansion; a cycle counts as too many)."""
    if id(node) not in sizes:
        sizes[id(node)] = MAX_YAML_EXPANDED_NODES + 1  # until known: a node containing itself expands forever
        if isinstance(node, yaml.SequenceNode):
            sizes[id(node)] = 1 + sum(_expanded_nodes(child, sizes) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            sizes[id(node)] = 1 + sum(_expanded_nodes(k, sizes) + _expanded_nodes(v, sizes) for k, v in node.value)
        else:
            sizes[id(node)] = 1
    return sizes[id(node)]


def load_yaml(text: str) -> Any:
    """Safe-load one YAML document with :class:`StrictSafeLoader` (raises ``yaml.YAMLError``)."""
    _check_depth(text)
    loader = StrictSafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node, {}) > MAX_YAML_EXPANDED_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"aliases expand to more than {MAX_YAML_EXPANDED_NODES} values", node.start_mark)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def parse_yaml_text(text: str, where: str) -> Any:
    """Parse YAML, turning syntax errors into one line naming ``where`` and the line number."""
    if len(text) > MAX_YAML_BYTES:
        raise ModelError(f"{where}: {len(text)} bytes is larger than the {MAX_YAML_BYTES} bytes a model file may be")
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ModelError(f"{where}:{line}: invalid YAML ({problem})") from None
    except RecursionError:  # belt and braces: flow collections nest below compose_node's view in some versions
        raise ModelError(f"{where}: invalid YAML (nested too deeply)") from None


def input_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as an input file, said after its name ("is a directory"), or None for a regular
    file. A device or a pipe is refused before it is opened: reading /dev/zero never ends."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:  # ELOOP: a symlink loop; ENOTDIR: a file where the path needs a folder; EACCES
        return "is a symlink loop" if exc.errno == errno.ELOOP else f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    return None if stat.S_ISREG(mode) else "is not a regular file (a device, a pipe or a socket)"


def read_model_bytes(path: Path) -> bytes:
    """The bytes of a model file, or one line saying why it cannot be read."""
    problem = input_file_problem(path)
    if problem:
        raise ModelError(f"{path}: {problem}")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ModelError(f"{path}: cannot read ({exc.strerror or exc})") from None


def parse_model_bytes(raw: bytes, path: Path) -> Any:
    return parse_yaml_text(raw.decode("utf-8", errors="replace"), str(path))


def read_yaml(path: Path) -> tuple[Any, str]:
    """Return (parsed document, sha256 of the bytes) of a model file."""
    raw = read_model_bytes(path)
    return parse_model_bytes(raw, path), content_hash(raw)


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
               strictly_positive: bool = False, maximum: float | None = None) -> float:
        """A finite number (``.inf`` and ``.nan`` are refused) within the bounds."""
        value = self.get(name, default)
        if value is None:
            raise ModelError(f"{self.key(name)}: missing")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ModelError(f"{self.key(name)}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise ModelError(f"{self.key(name)}: expected a finite number, got {value}")
        if strictly_positive and value <= 0:
            raise ModelError(f"{self.key(name)}: must be > 0, got {value}")
        if minimum is not None and value < minimum:
            raise ModelError(f"{self.key(name)}: must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ModelError(f"{self.key(name)}: must be <= {maximum:g}, got {value:g}")
        return float(value)

    def integer(self, name: str, default: int | None = None, *, minimum: int = 1,
                maximum: int | None = None) -> int:
        value = self.get(name, default)
        if value is None:
            raise ModelError(f"{self.key(name)}: missing")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError(f"{self.key(name)}: expected an integer, got {value!r}")
        if value < minimum:
            raise ModelError(f"{self.key(name)}: must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ModelError(f"{self.key(name)}: must be <= {maximum}, got {value}")
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

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self.get(name, default)
        if not isinstance(value, bool):
            raise ModelError(f"{self.key(name)}: expected true or false, got {value!r}")
        return value

    def reject_unknown(self, known: tuple[str, ...]) -> None:
        for name in self.data:
            if name not in known:
                raise ModelError(f"{self.key(str(name))}: unknown key (known: {', '.join(known)})")
