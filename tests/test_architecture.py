"""The rooms and their arrows (ARCHITECTURE.md), enforced on the source: what may import what, and size limits.

Every import statement of every module is read with ``ast`` (also imports inside functions, which are still arrows);
a rule is broken when a module of one part imports a module of a part it must not know.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# source folder -> dotted package it installs as (setup.cfg package_dir)
FOLDERS = {"meshsim": "meshsim", "sim": "meshsim.sim", "calibrate": "meshsim.calibrate", "dash_app": "meshsim.dash_app"}
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def _imports(module: str, path: Path) -> set[str]:
    """Absolute names of every meshsim module or package this module imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("meshsim"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("meshsim"):
                continue
            found.add(target)
            # ``from meshsim.calibrate import x`` may import the submodule x
            found.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES)
    return found


def part_of(module: str) -> str:
    """The room a module lives in (ARCHITECTURE.md)."""
    if module.startswith("meshsim.cli") or module == "meshsim.__main__":  # ``python -m meshsim`` is the CLI
        return "cli"
    for room in ("sim.engine_choice", "sim.engine", "sim.fast", "sim.experiments", "sim", "dash_app",
                 "calibrate.measure", "calibrate.fit", "calibrate.load", "calibrate.validation", "calibrate.studies"):
        name = f"meshsim.{room}"
        if module == name or module.startswith(name + "."):
            return room
    if module == "meshsim.calibrate" or module.startswith("meshsim.calibrate."):
        return "calibrate.pipelines"
    return "model"


SIM = {"sim", "sim.engine", "sim.fast", "sim.engine_choice", "sim.experiments"}  # sim/ and its rooms
OUTSIDE_SIM = {"cli", "dash_app", "calibrate.measure", "calibrate.fit", "calibrate.load", "calibrate.validation",
               "calibrate.pipelines", "calibrate.studies"}
# room -> rooms it must never import
FORBIDDEN = {
    "model": SIM | {"cli", "dash_app", "calibrate.measure", "calibrate.fit", "calibrate.load", "calibrate.validation",
              "calibrate.pipelines", "calibrate.studies"},
    # inside sim/: the SimPy engine and the shared result types know neither the compiled engine nor the experiments;
    # the compiled engine builds on the SimPy one's System; one module (engine_choice) picks between them and runs a
    # replication, and the experiments (and everything outside sim/) reach the compiled engine only through it
    "sim.engine": OUTSIDE_SIM | {"sim", "sim.fast", "sim.engine_choice", "sim.experiments"},
    "sim.fast": OUTSIDE_SIM | {"sim", "sim.engine_choice", "sim.experiments"},
    "sim.engine_choice": OUTSIDE_SIM | {"sim", "sim.experiments"},
    "sim.experiments": OUTSIDE_SIM | {"sim.fast"},
    "sim": OUTSIDE_SIM,
    "calibrate.measure": SIM | {"cli", "dash_app", "calibrate.fit", "calibrate.load", "calibrate.validation",
                          "calibrate.pipelines", "calibrate.studies"},
    "calibrate.fit": {"sim.fast", "cli", "dash_app", "calibrate.load", "calibrate.validation", "calibrate.pipelines",
                      "calibrate.studies"},
    "calibrate.load": {"sim.fast", "cli", "dash_app", "calibrate.validation", "calibrate.pipelines", "calibrate.studies"},
    "calibrate.validation": {"sim.fast", "cli", "dash_app", "calibrate.studies"},
    "calibrate.pipelines": {"sim.fast", "cli", "dash_app", "calibrate.validation", "calibrate.studies"},
    "calibrate.studies": {"sim.fast", "cli", "dash_app"},
    "dash_app": {"sim.fast", "cli", "calibrate.studies"},
    "cli": {"sim.fast"},
}


def test_every_module_is_in_a_room() -> None:
    assert len(MODULES) > 60
    assert {part_of(m) for m in MODULES} == set(FORBIDDEN)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_import_rules(module: str) -> None:
    room = part_of(module)
    broken = sorted(f"{module} ({room}) imports {target} ({part_of(target)})"
                    for target in _imports(module, MODULES[module]) if part_of(target) in FORBIDDEN[room])
    assert not broken, "\n".join(broken)


def test_the_rule_checker_sees_a_broken_arrow(tmp_path: Path) -> None:
    """The checker itself: a data-model module that imports the engine inside a function is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from meshsim.sim.engine.simpy_replication import run_replication\n    return run_replication\n")
    targets = _imports("meshsim.bad", bad)
    assert "meshsim.sim.engine.simpy_replication" in targets
    assert any(part_of(t) in FORBIDDEN["model"] for t in targets)
    rel = tmp_path / "pkg"
    rel.mkdir()
    (rel / "mod.py").write_text("from ..measure import dataset\n")
    assert "meshsim.calibrate.measure" in _imports("meshsim.calibrate.fit.mod", rel / "mod.py")


def test_no_function_is_longer_than_80_lines() -> None:
    long = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {lines} lines")
    assert not long, "\n".join(long)


def test_module_names_are_unique() -> None:
    """No second api.py or plan.py: a file name says what it holds wherever it is imported from."""
    names = Counter(path.name for path in MODULES.values() if path.name != "__init__.py")
    assert not [n for n, k in names.items() if k > 1], names.most_common(5)


def _private_names_defined(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, module names and attributes it assigns."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {n for n in names if n.startswith("_") and not n.endswith("__")}


def _private_reaches(trees: dict[str, ast.AST]) -> list[str]:
    """``from x import _name`` of a meshsim module (or of a test module beside the importing test), and ``obj._name``
    where ``_name`` is defined by another meshsim module and not by this one (``system._route(...)`` from outside
    sim/engine/system.py)."""
    defined = {module: _private_names_defined(tree) for module, tree in trees.items()}
    elsewhere: dict[str, set[str]] = {}
    for module, names in defined.items():
        for name in names:
            elsewhere.setdefault(name, set()).add(module)
    found = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and ((node.module or "").startswith("meshsim")
                                                     or f"tests.{node.module}" in trees):
                found.extend(f"{module}:{node.lineno} from {node.module} import {a.name}" for a in node.names
                             if a.name.startswith("_") and not a.name.endswith("__"))
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("__") \
                    and node.attr not in defined[module] and elsewhere.get(node.attr, set()) - {module}:
                owners = ", ".join(sorted(elsewhere[node.attr]))
                found.append(f"{module}:{node.lineno} .{node.attr} (private to {owners})")
    return found


# Private names a test may reach, each with its reason (test module -> name -> why).
KERNEL_HELPER = ("a helper of the compiled loop, private to sim/fast/fast_kernels.py, checked as plain Python because "
                 "the compiled loop cannot be entered halfway; that file stays one file whose contents key numba's "
                 "cache and the native module (LONG_MODULES), so a rename would rebuild both for no change")
PRIVATE_REACHES_ALLOWED = {
    "tests.test_fast_engine": {"_first_after": KERNEL_HELPER},
    "tests.test_fast_native": {"_indices_from_the_start": KERNEL_HELPER},
}


def _allowed(reach: str) -> bool:
    module, _, rest = reach.partition(":")
    names = PRIVATE_REACHES_ALLOWED.get(module, {})
    return any(rest.endswith(f" import {name}") or f" .{name} (" in rest for name in names)


def _modules_and_tests() -> dict[str, ast.AST]:
    """The rooms' modules and tests/ (as ``tests.NAME``): a test reaches a module's code as any caller does."""
    files = {**MODULES, **{f"tests.{path.stem}": path for path in sorted(TESTS.glob("*.py"))}}
    return {module: ast.parse(path.read_text(encoding="utf-8")) for module, path in files.items()}


def test_no_module_reaches_into_another_modules_private_names() -> None:
    found = [reach for reach in _private_reaches(_modules_and_tests()) if not _allowed(reach)]
    assert not found, "make it public (and name it for what it is) or move the caller:\n" + "\n".join(found)


def test_every_allowed_private_reach_is_still_made() -> None:
    """An exception whose reach is gone is dropped, not kept as a licence for the next one."""
    made = _private_reaches(_modules_and_tests())
    stale = [f"{module} {name}" for module, names in PRIVATE_REACHES_ALLOWED.items() for name in names
             if not any(reach.startswith(f"{module}:") and _allowed(reach) and name in reach for reach in made)]
    assert not stale, stale


def test_the_private_name_checker_sees_both_reaches() -> None:
    owner = ast.parse("class System:\n    def _route(self):\n        return 1\n")
    caller = ast.parse("from meshsim.sim.engine.system import _helper\n\ndef f(system):\n    return system._route()\n")
    found = _private_reaches({"meshsim.owner": owner, "meshsim.caller": caller})
    assert len(found) == 2 and "import _helper" in found[0] and "._route (private to meshsim.owner)" in found[1]
    helper, test = ast.parse("def _fresh():\n    return 1\n"), ast.parse("from bench_x import _fresh\n")
    found = _private_reaches({"tests.bench_x": helper, "tests.test_y": test})
    assert found == ["tests.test_y:1 from bench_x import _fresh"]


MAX_MODULE_LINES = 400
# Modules allowed past MAX_MODULE_LINES, each with its reason (a module that grows past it holds two concepts: split it).
LONG_MODULES = {
    "sim/fast/fast_kernels.py": "the compiled loop: numba's on-disk cache and the native module's name are keyed on "
                                "this one file, and its jitted functions call each other",
}


def _sized_files() -> list[Path]:
    """Every module of the rooms and every Python file of tests/."""
    return sorted({*MODULES.values(), *TESTS.glob("*.py")})


def test_no_module_is_longer_than_400_lines_but_the_named_ones() -> None:
    long = [f"{path.relative_to(ROOT)}: {n} lines" for path in _sized_files()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
            and str(path.relative_to(ROOT)) not in LONG_MODULES]
    assert not long, "split by concept, or name the exception and its reason in LONG_MODULES:\n" + "\n".join(long)
    missing = [name for name in LONG_MODULES if not (ROOT / name).is_file()]
    assert not missing, f"LONG_MODULES names files that are gone: {missing}"


def test_test_names_are_unique_beside_the_modules() -> None:
    """tests/ is one flat folder of modules too: its helpers' names must not shadow a module of the tree."""
    names = Counter(path.name for path in _sized_files() if path.name not in ("__init__.py", "conftest.py"))
    assert not [n for n, k in names.items() if k > 1], names.most_common(5)


def test_every_package_folder_is_installed() -> None:
    """A folder with an __init__.py under the code's rooms is a package setup.cfg must list (packages and
    package_dir): an editable install finds it anyway, a wheel does not (validate --prometheus once failed to import
    in a plain install)."""
    import configparser

    options = configparser.ConfigParser()
    options.read(ROOT / "setup.cfg")
    listed = set(options["options"]["packages"].split())
    mapped = dict(line.split(" = ") for line in options["options"]["package_dir"].strip().splitlines())
    for folder, package in FOLDERS.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT / folder).parts
            name = ".".join([package, *parts])
            assert name in listed, f"setup.cfg packages lacks {name}"
            # setuptools finds a package's folder by its nearest ancestor in package_dir
            ancestor = max((k for k in mapped if name == k or name.startswith(k + ".")), key=len)
            folder_of = "/".join([mapped[ancestor], *name[len(ancestor) + 1:].split(".")]).rstrip("/")
            assert folder_of == init.parent.relative_to(ROOT).as_posix(), f"setup.cfg package_dir: {name}"
