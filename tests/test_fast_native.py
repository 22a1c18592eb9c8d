"""The compiled loop as a native module (sim/fast/fast_native.py): the same results as numba's JIT, loaded by a fresh
process without numba, and a one-line fallback to the JIT where it cannot be built."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meshsim.request import PredictOptions, build_request
from meshsim.sim.fast import fast_engine, fast_native
from meshsim.sim.fast.fast_engine import load_compiled, run_fast_replication
from meshsim.sim.experiments.predict import horizon_for

CASES = (dict(topology="chain3", mesh="istio", rps=3000.0),
         dict(topology="bookinfo", mesh="linkerd", rps=200.0, features=("mtls",)),
         dict(topology="chain5", mesh="istio", rps=800.0, lb="proxy", load="fortio", connections=8),
         dict(topology="lb3", mesh="istio", rps=900.0, load="wrk2", connections=6))


@pytest.fixture(scope="module", autouse=True)
def native_built() -> None:
    """The native module in numba's cache folder (built here if the setup did not build it)."""
    load_compiled()
    assert fast_native.native_ready(), "the native module was not built where numba's cache is"


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['topology']}-{c['mesh']}-{c.get('load', 'open')}")
def test_the_native_loop_and_numbas_jit_give_identical_replications(case, monkeypatch) -> None:
    """Bit for bit: the latencies, completions and counters of two replications on each loop."""
    request = build_request(PredictOptions(**case, duration_s=1.0))
    horizon = horizon_for(request.workload.load, request.settings)
    native = fast_native.compiled_loop()
    assert not hasattr(native, "py_func"), "compiled_loop() should be the native module's function, not numba's"
    results = {}
    for name, loop in (("native", native), ("jit", fast_native.jit_loop())):
        monkeypatch.setattr(fast_engine, "compiled_loop", lambda loop=loop: loop)
        results[name] = [run_fast_replication(request.scenario, request.workload, horizon, 5, rep) for rep in (0, 1)]
    for native_result, jit_result in zip(results["native"], results["jit"]):
        assert native_result.latencies.size > 100
        np.testing.assert_array_equal(native_result.latencies, jit_result.latencies)
        assert native_result.completed == jit_result.completed
        assert native_result.usage == jit_result.usage and native_result.breakdown == jit_result.breakdown


def test_a_fresh_process_runs_the_engine_without_importing_numba_or_scipy() -> None:
    """numba's import and JIT cache cost ~1 s and scipy.special ~0.25 s of every fresh `meshsim predict`."""
    script = ("import sys\n"
              "from meshsim.sim.experiments.predict import predict\n"
              "p = predict('chain3', 'istio', rps=1000, duration_s=0.5, replications=3, processes=1,\n"
              "            saturation=False)\n"
              "assert p.inputs['engine'].startswith('fast'), p.inputs['engine']\n"
              "print(sorted(m for m in ('numba', 'llvmlite', 'scipy') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_without_a_compiler_the_loop_falls_back_to_the_jit_and_says_so_once(tmp_path, monkeypatch) -> None:
    """A failing C compiler (CC=/bin/false): one line, a marker so that later processes do not try again, the JIT."""
    monkeypatch.setenv("CC", "/bin/false")
    monkeypatch.delenv(fast_native.FALLBACK_ENV, raising=False)
    heard: list[str] = []
    loop = fast_native.compiled_loop(tmp_path, report_progress=heard.append)
    assert hasattr(loop, "py_func"), "expected numba's dispatcher after a failed build"
    assert len(heard) == 1 and "could not build the native loop" in heard[0] and "JIT" in heard[0], heard
    assert fast_native.failure_marker(tmp_path).exists() and not fast_native.native_ready(tmp_path)

    fast_native.forget_loaded_loop(tmp_path)  # a later process: the marker, no second attempt, no second line
    again = fast_native.compiled_loop(tmp_path, report_progress=heard.append)
    assert again is loop and len(heard) == 1


def test_the_installed_numba_still_ships_its_ahead_of_time_compiler() -> None:
    """numba.pycc builds the native module: pending deprecation since numba 0.57, still in 0.68.1, with no supported
    successor yet (sim/fast/fast_native.py). A numba without it runs the loop on the JIT (next test) but every process
    then pays numba's import: this fails so that the suite notices such a numba."""
    assert fast_native.pycc_compiler().__module__.startswith("numba.pycc")


def test_without_numbas_pycc_the_loop_falls_back_to_the_jit_and_says_why(tmp_path, monkeypatch) -> None:
    """A numba without numba.pycc (a later release may remove it): one line naming numba.pycc, not the compilers."""
    monkeypatch.setitem(sys.modules, "numba.pycc", None)  # `from numba.pycc import CC` raises ImportError
    monkeypatch.delenv(fast_native.FALLBACK_ENV, raising=False)
    heard: list[str] = []
    loop = fast_native.compiled_loop(tmp_path, report_progress=heard.append)
    assert hasattr(loop, "py_func"), "expected numba's dispatcher after a failed build"
    assert len(heard) == 1 and "has no numba.pycc" in heard[0] and "JIT" in heard[0], heard
    assert "gcc" not in heard[0] and fast_native.failure_marker(tmp_path).exists()


def test_a_stale_module_is_never_loaded_its_name_follows_the_kernels_source(tmp_path, monkeypatch) -> None:
    """A changed kernel never loads a stale module: the module's name hashes the source it was built from."""
    name = fast_native.module_name()
    changed = tmp_path / "fast_kernels.py"
    changed.write_bytes(fast_native.KERNELS.read_bytes() + b"\n# changed\n")
    monkeypatch.setattr(fast_native, "KERNELS", changed)
    assert fast_native.module_name() != name
    assert fast_native.module_path(tmp_path).parent == tmp_path


def test_the_jit_can_be_chosen_by_environment(monkeypatch) -> None:
    monkeypatch.setenv(fast_native.FALLBACK_ENV, "0")
    fast_native.forget_loaded_loop(Path("/nonexistent-dir"))
    loop = fast_native.compiled_loop(Path("/nonexistent-dir"))
    assert hasattr(loop, "py_func") and not Path("/nonexistent-dir").exists()
    fast_native.forget_loaded_loop(Path("/nonexistent-dir"))


def test_the_native_module_is_where_numba_caches(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert fast_native.cache_dir() == tmp_path
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    expected = fast_native.KERNELS.parent / "__pycache__"
    if os.access(fast_native.KERNELS.parent, os.W_OK):
        assert fast_native.cache_dir() == expected


def test_an_unloadable_module_falls_back_to_the_jit_with_one_line(tmp_path, monkeypatch) -> None:
    """A file of the module's name that is not a loadable extension (a truncated copy, say): the JIT, one line."""
    monkeypatch.delenv(fast_native.FALLBACK_ENV, raising=False)
    fast_native.module_path(tmp_path).write_bytes(b"not an ELF file")
    heard: list[str] = []
    loop = fast_native.compiled_loop(tmp_path, report_progress=heard.append)
    assert hasattr(loop, "py_func") and len(heard) == 1 and "cannot load the native loop" in heard[0], heard


def test_an_unwritable_cache_folder_falls_back_to_the_jit(tmp_path, monkeypatch) -> None:
    """The cache folder is a file, so nothing can be built or marked there: the JIT, one line, no traceback."""
    monkeypatch.delenv(fast_native.FALLBACK_ENV, raising=False)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    heard: list[str] = []
    loop = fast_native.compiled_loop(blocked / "cache", report_progress=heard.append)
    assert hasattr(loop, "py_func") and len(heard) == 1 and "could not build the native loop" in heard[0], heard


BOUNDS_CHECK = r"""
import json, sys
from meshsim.sim.fast import fast_kernels
from meshsim.sim.fast.fast_native import compiled_loop
# numba's inlining (how `run` is assembled, not what it computes) makes the compile several times longer
for options in fast_kernels._COMPILED.values():
    options.pop("inline", None)
assert hasattr(compiled_loop(), "py_func"), "expected numba's JIT (MESHSIM_NATIVE_LOOP=0)"
from test_fast_native import replication_digests
print(json.dumps(replication_digests(json.loads(sys.argv[1]))))
"""


def replication_digests(cases: list[dict]) -> list[str]:
    """A hash of each case's first replication (latencies and usage); a case's ``profile`` is a ramp's points."""
    import hashlib

    from meshsim.workload import RateProfile

    digests = []
    for case in cases:
        if "profile" in case:
            case = {**case, "profile": RateProfile("ramp", tuple(tuple(p) for p in case["profile"]))}
        request = build_request(PredictOptions(**case, duration_s=0.5))
        horizon = horizon_for(request.workload.load, request.settings)
        r = run_fast_replication(request.scenario, request.workload, horizon, 5, 0)
        assert r.latencies.size > 10
        digests.append(hashlib.sha256(r.latencies.tobytes() + repr(sorted(r.usage.items())).encode()).hexdigest())
    return digests


def test_no_kernel_indexes_an_array_from_its_end(tmp_path) -> None:
    """The kernels are compiled without numba's wrap-around of negative indices (fast_kernels._indices_from_the_start):
    an index below 0 would read or write outside its table instead of raising. Compiled afresh with numba's bounds
    checks on (NUMBA_BOUNDSCHECK=1, which then raises on any index below 0 or past the end), the loop runs every
    case without an IndexError and gives the native module's results bit for bit."""
    import json

    cases = [*CASES, dict(topology="chain3", mesh="istio", rps=2000.0, proxy_cpu_limit=0.5, load="fortio",
                          connections=16),
             dict(topology="chain3", mesh="istio", profile=[[0.0, 500.0], [0.5, 1500.0]]),
             dict(topology="bookinfo", mesh="istio", load="sequential", connections=4, think_ms=5.0)]
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path), fast_native.FALLBACK_ENV: "0",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", BOUNDS_CHECK, json.dumps(cases)], capture_output=True, text=True,
                          env=env, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == replication_digests(cases)


def test_while_the_kernels_compile_a_negative_index_is_not_wrapped_around() -> None:
    """What the bounds-checked run above relies on: inside _indices_from_the_start a negative index stays negative
    (numba's bounds check then raises), outside it numba wraps it around as numpy does."""
    from numba import njit

    from meshsim.sim.fast.fast_kernels import _indices_from_the_start

    def element(a, i):
        return a[i]

    values = np.arange(4.0)
    with _indices_from_the_start():
        unwrapped = njit(boundscheck=True)(element)
        unwrapped.compile("f8(f8[::1], i8)")
    wrapped = njit(boundscheck=True)(element)
    assert wrapped(values, -1) == 3.0
    assert unwrapped(values, 2) == 2.0
    with pytest.raises(IndexError):
        unwrapped(values, -1)
