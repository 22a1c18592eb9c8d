"""Published and summary measurement tables: CSV files described by an ``index.yaml`` in their folder.

The index says, for every table, the file, the document and table numbers it was transcribed from, the units and
the columns with their types (``int``, ``float``, ``str`` or ``"str: a|b|c"`` for a closed set). Loading checks the
header and every cell against it; errors name the file, the line and the column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from meshsim.errors import ModelError

SCHEMA = "meshsim/tables/v1"


def measurements_dir() -> Path:
    """The measurements shipped with meshsim (package ``meshsim.measurements``)."""
    import meshsim.measurements as pkg

    return Path(pkg.__file__).resolve().parent


@dataclass(frozen=True)
class Table:
    name: str
    path: Path
    meta: Mapping[str, Any]  # document, tables, units, notes (from the index)
    columns: tuple[str, ...]
    rows: tuple[Mapping[str, Any], ...]

    def where(self, **equal: Any) -> list[Mapping[str, Any]]:
        return [r for r in self.rows if all(r[k] == v for k, v in equal.items())]

    def provenance(self) -> str:
        return f"{self.meta.get('document', '')} [{self.meta.get('tables', '')}; {self.path.name}]"


def read_index(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / "index.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ModelError(f"{path}: cannot read table index ({exc})") from None
    if not isinstance(data, Mapping) or data.get("schema") != SCHEMA or not isinstance(data.get("tables"), Mapping):
        raise ModelError(f"{path}: expected schema {SCHEMA!r} with a 'tables' mapping")
    return dict(data)


def _convert(kind: str, raw: str, where: str) -> Any:
    base, _, choices = kind.partition(":")
    base = base.strip()
    if base == "str":
        allowed = [c.strip() for c in choices.split("|")] if choices.strip() else None
        if allowed and raw not in allowed:
            raise ModelError(f"{where}: {raw!r} is not one of {'|'.join(allowed)}")
        return raw
    try:
        value = int(raw) if base == "int" else float(raw)
    except ValueError:
        raise ModelError(f"{where}: expected {base}, got {raw!r}") from None
    if base == "float" and not math.isfinite(value):
        raise ModelError(f"{where}: not a finite number: {raw!r}")
    return value


def load_table(name: str, folder: str | Path | None = None) -> Table:
    """Load one table by its index name (default folder: the shipped ``measurements/published``)."""
    folder = Path(folder) if folder is not None else measurements_dir() / "published"
    index = read_index(folder)
    if name not in index["tables"]:
        raise ModelError(f"{folder / 'index.yaml'}: no table {name!r} (known: {', '.join(index['tables'])})")
    meta = dict(index["tables"][name])
    sources = index.get("sources") or {}
    if meta.get("source") in sources:
        meta.setdefault("document", sources[meta["source"]])
    path = folder / str(meta.get("file", f"{name}.csv"))
    kinds: Mapping[str, str] = meta.get("columns") or {}
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise ModelError(f"{path}: empty file (expected a header line)")
            missing = [c for c in kinds if c not in header]
            if missing:
                raise ModelError(f"{path}: missing column {missing[0]!r} (expected: {', '.join(kinds)})")
            rows = []
            for lineno, cells in enumerate(reader, 2):
                if not cells:
                    continue
                if len(cells) != len(header):
                    raise ModelError(f"{path}: line {lineno}: {len(cells)} cells, header has {len(header)}")
                row = {}
                for col, raw in zip(header, cells):
                    kind = str(kinds.get(col, "str"))
                    row[col] = _convert(kind, raw.strip(), f"{path}: line {lineno}: column {col}")
                rows.append(row)
    except OSError as exc:
        raise ModelError(f"{path}: cannot read table ({exc.strerror or exc})") from None
    if not rows:
        raise ModelError(f"{path}: no data rows")
    return Table(name, path, meta, tuple(header), tuple(rows))


def load_all(folder: str | Path | None = None) -> tuple[dict[str, Table], list[str]]:
    """Every table of an index; a broken table is reported (one line) and the rest still load."""
    folder = Path(folder) if folder is not None else measurements_dir() / "published"
    tables: dict[str, Table] = {}
    errors: list[str] = []
    for name in read_index(folder)["tables"]:
        try:
            tables[name] = load_table(name, folder)
        except ModelError as exc:
            errors.append(str(exc))
    return tables, errors
