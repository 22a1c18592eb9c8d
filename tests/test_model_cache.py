"""Model files are parsed once per content: a fit loads the same files for hundreds of candidates, an edit is seen."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshsim import catalog
from meshsim.errors import MeshsimError

from refusals import ROOT

CHAIN3 = (ROOT / "models/topologies/chain3.yaml").read_text()


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the catalog parses (the cache is emptied first, so earlier tests do not count)."""
    monkeypatch.setattr(catalog, "LOADED_MODELS", type(catalog.LOADED_MODELS)())
    seen: list[Path] = []
    parse = catalog.parse_model_bytes

    def counting(raw: bytes, path: Path):
        seen.append(path)
        return parse(raw, path)

    monkeypatch.setattr(catalog, "parse_model_bytes", counting)
    return seen


def test_the_same_bytes_are_parsed_once_and_give_the_same_model(tmp_path: Path, parses: list[Path]) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(CHAIN3)
    first = catalog.load_topology(str(path))
    assert catalog.load_topology(str(path)) is first
    assert catalog.load_mesh("none") is catalog.load_mesh("none")
    assert len(parses) == 2  # the topology file and the built-in mesh, once each


def test_an_edited_file_is_read_afresh(tmp_path: Path, parses: list[Path]) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(CHAIN3)
    before = catalog.load_topology(str(path))
    path.write_text(CHAIN3.replace("entry: s1", "entry: s2", 1))
    after = catalog.load_topology(str(path))
    assert (before.entry, after.entry) == ("s1", "s2")
    assert len(parses) == 2


def test_a_refused_file_is_refused_every_time_and_loads_once_mended(tmp_path: Path, parses: list[Path]) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(CHAIN3.replace("entry: s1", "entry: nowhere", 1))
    for _ in range(2):
        with pytest.raises(MeshsimError, match="nowhere"):
            catalog.load_topology(str(path))
    path.write_text(CHAIN3)
    assert catalog.load_topology(str(path)).entry == "s1"
    assert len(parses) == 3


def test_the_cache_keeps_a_bounded_number_of_models(tmp_path: Path, parses: list[Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "LOADED_KEPT", 3)
    paths = []
    for i in range(5):
        paths.append(tmp_path / f"t{i}.yaml")
        paths[-1].write_text(CHAIN3 + f"\n# copy {i}\n")
        catalog.load_topology(str(paths[-1]))
    assert len(catalog.LOADED_MODELS) == 3
    catalog.load_topology(str(paths[0]))  # dropped first (least recently used): parsed again
    catalog.load_topology(str(paths[4]))  # still kept
    assert parses == [*paths, paths[0]]
