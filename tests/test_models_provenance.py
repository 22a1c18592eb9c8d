"""Every number in a shipped model says where it came from, and every shipped model loads."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from meshsim.catalog import list_meshes, list_topologies, load_mesh, load_topology

MODELS = Path(str(resources.files("meshsim.models")))
FILES = sorted(MODELS.glob("topologies/*.yaml")) + sorted(MODELS.glob("meshes/*.yaml"))
PROVENANCE_BLOCKS = ("calibration", "fit", "sources")  # these blocks are themselves provenance


def unsourced(node: Any, path: str, sourced: bool, top: bool) -> list[str]:
    """Paths of mappings holding numbers with no `source` on them or on an enclosing (non top-level) mapping."""
    missing: list[str] = []
    if isinstance(node, dict):
        here = sourced or (not top and "source" in node)
        numbers = [k for k, v in node.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers and not here:
            missing.append(f"{path} ({', '.join(map(str, numbers))})")
        for key, value in node.items():
            if key in PROVENANCE_BLOCKS:
                continue
            missing += unsourced(value, f"{path}.{key}" if path else str(key), here, False)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            missing += unsourced(value, f"{path}[{i}]", sourced, False)
    return missing


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_number_has_a_source(path):
    data = yaml.safe_load(path.read_text())
    assert unsourced(data, "", False, True) == []


def test_the_check_catches_a_bare_number():
    assert unsourced({"proxy": {"workers": 2}}, "", False, True) == ["proxy (workers)"]


def test_all_shipped_models_load():
    assert {"none", "istio", "linkerd", "traefik"} <= set(list_meshes())
    for name in list_meshes():
        load_mesh(name)
    for name in list_topologies():
        load_topology("chain5" if name == "chainN" else name)
