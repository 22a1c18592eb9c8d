"""The compiled loop as a native module: built once with numba's ahead-of-time compiler, then loaded by every later
process without importing numba.

Loading numba's JIT cache costs a fresh process about a second before it simulates anything (numba's import, its
type registries, the scipy.linalg its BLAS check imports); the native module is a plain CPython extension that
loads in milliseconds. It holds the same machine code: its one export calls ``run``'s numba dispatcher (so ``run``
and everything it inlines are compiled with the JIT's own options, numpy's error model included), and the results
are bit-identical (tests/test_fast_native.py).

The build uses numba.pycc, numba's only ahead-of-time compiler up to numba 0.68.1 (the release tested): pending
deprecation since numba 0.57 ("Replacement technology is being developed", numba/pycc/__init__.py), with no supported
successor yet -- 0.68.1 has no other ahead-of-time path in its source, and numba-pixie, the numba team's experimental
successor, has only a 0.0.1.dev0 pre-release (2024). So pycc is used while numba ships it; a numba without it makes
the build fail like a missing compiler, and the loop runs on numba's JIT (tests/test_fast_native.py checks both).
Building needs C and C++ compilers and Python's headers (numba.pycc checks both compilers, compiles a small C
wrapper and links with setuptools).
Where any of this is missing, the build fails once, says so in one line, leaves a marker so that later processes do
not try again, and the loop runs on numba's JIT instead (its disk cache then saves the compile, not the import).

The module lives where numba's cache does (NUMBA_CACHE_DIR, else ``__pycache__`` next to this package when it is
writable, else the user's cache folder); its name carries a key of everything its code depends on.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from meshsim.errors import MeshsimError

# run(I, F, B, HT, HI, TI, TF, FREE, LAT, proxies) -> DONE | REFILL | GROW, as sim/fast/fast_engine.py calls it
LOOP_SIGNATURE = "i8(i8[::1], f8[::1], f8[:,::1], f8[::1], i8[:,::1], i8[:,::1], f8[:,::1], i8[::1], f8[:,::1], i8)"
KERNELS = Path(__file__).with_name("fast_kernels.py")
FALLBACK_ENV = "MESHSIM_NATIVE_LOOP"  # "0": skip the native module, run on numba's JIT

Loop = Callable[..., int]
_LOADED: dict[str, Loop] = {}
_NAMES: dict[Path, str] = {}


class NativeBuildError(MeshsimError):
    """The native module could not be built (no C compiler or Python headers, typically)."""

    remedy = "with gcc, g++ and Python's headers it loads faster"


class NoAheadOfTimeCompiler(NativeBuildError):
    """The installed numba has no numba.pycc (removed after its deprecation): no compiler can help."""

    remedy = "a numba that still ships numba.pycc, such as 0.68.1, builds it"


def cache_dir() -> Path:
    """Where numba caches the JIT code of sim/fast/fast_kernels.py: NUMBA_CACHE_DIR, else ``__pycache__`` here when
    writable, else the user's cache folder (numba's _UserWideCacheLocator)."""
    root = os.environ.get("NUMBA_CACHE_DIR")
    if root:
        return Path(root)
    beside = KERNELS.parent / "__pycache__"
    if os.access(beside if beside.exists() else KERNELS.parent, os.W_OK):
        return beside
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return home / "numba" / KERNELS.parent.relative_to(KERNELS.parent.anchor)


def module_name() -> str:
    """``meshsim_loop_<key>``: the key hashes the kernels' source, the versions of numba, llvmlite, numpy and Python,
    and this CPU (the code is built for the host CPU's instruction set). Once per process and kernels' file."""
    if KERNELS not in _NAMES:
        digest = hashlib.sha256(KERNELS.read_bytes())
        for part in (_installed("numba"), _installed("llvmlite"), _installed("numpy"), sys.version, os.uname().machine,
                     _cpu_flags(), LOOP_SIGNATURE):
            digest.update(part.encode())
        _NAMES[KERNELS] = f"meshsim_loop_{digest.hexdigest()[:16]}"
    return _NAMES[KERNELS]


def module_path(directory: Path | None = None) -> Path:
    return (directory or cache_dir()) / (module_name() + sysconfig.get_config_var("EXT_SUFFIX"))


def failure_marker(directory: Path | None = None) -> Path:
    return (directory or cache_dir()) / (module_name() + ".failed")


def native_ready(directory: Path | None = None) -> bool:
    return module_path(directory).exists()


def loop_on_disk() -> bool:
    """Whether a process can load the loop without building it: the native module, or numba's JIT cache where the
    loop runs on the JIT (the native module cannot be built here, or MESHSIM_NATIVE_LOOP=0)."""
    if os.environ.get(FALLBACK_ENV) != "0" and not failure_marker().exists():
        return native_ready()
    directory = cache_dir()
    return directory.is_dir() and any(directory.rglob("fast_kernels*.nbi"))


def compiled_loop(directory: Path | None = None, report_progress: Callable[[str], None] | None = None) -> Loop:
    """The loop: the native module (built now if missing), else numba's JIT when the native module cannot be built
    here or MESHSIM_NATIVE_LOOP=0. Loaded once per process and directory."""
    key = str(directory)
    if key not in _LOADED:
        _LOADED[key] = _native_or_jit(directory, report_progress or _stderr)
    return _LOADED[key]


def forget_loaded_loop(directory: Path | None = None) -> None:
    """The next ``compiled_loop(directory)`` loads the loop again, as a new process would."""
    _LOADED.pop(str(directory), None)


def jit_loop() -> Loop:
    """``run`` on numba's JIT (compiled once into numba's disk cache)."""
    from meshsim.sim.fast import fast_kernels

    return fast_kernels.compile_with_numba(LOOP_SIGNATURE)


def build_native(directory: Path | None = None) -> Path:
    """Build the native module into ``directory`` (numba's cache folder by default); one process builds it while
    others wait for it. Raises NativeBuildError when it cannot be built."""
    path = module_path(directory)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _build_lock(path):
            if not path.exists():
                _compile(path)
    except NativeBuildError:
        raise
    except Exception as exc:  # the toolchain's errors are of many kinds; every one means "no native module"
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise NativeBuildError(f"could not build the native loop in {path.parent} ({type(exc).__name__}: "
                               f"{reason})") from exc
    return path


def load_native(path: Path) -> Loop:
    name = path.name.split(".")[0]
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module.run


def _native_or_jit(directory: Path | None, report_progress: Callable[[str], None]) -> Loop:
    if os.environ.get(FALLBACK_ENV) == "0":
        return jit_loop()
    path, marker = module_path(directory), failure_marker(directory)
    if not path.exists() and marker.exists():
        return jit_loop()  # said once, when the build failed
    if not path.exists():
        try:
            build_native(directory)
        except NativeBuildError as exc:
            report_progress(f"engine: {exc}; the loop runs on numba's JIT instead ({exc.remedy})")
            try:
                marker.write_text(str(exc) + "\n")
            except OSError:
                pass  # an unwritable folder: the next process tries (and says) again
            return jit_loop()
    try:
        return load_native(path)
    except ImportError as exc:  # a module this interpreter cannot load (copied from elsewhere, say): the JIT runs
        report_progress(f"engine: cannot load the native loop {path} ({exc}); the loop runs on numba's JIT instead")
        return jit_loop()


def _compile(path: Path) -> None:
    """numba.pycc: one export, ``run``, calling the kernels' ``run`` dispatcher (compiled with its own options and
    saved in numba's JIT cache on the way). Written under a temporary name, then renamed: never half a module."""
    import shutil

    compiler = pycc_compiler()
    run = jit_loop()

    def entry(I, F, B, HT, HI, TI, TF, FREE, LAT, proxies):  # noqa: N803 (the kernels' array names)
        return run(I, F, B, HT, HI, TI, TF, FREE, LAT, proxies)

    name = path.name.split(".")[0]
    staging = path.parent / f".building-{os.getpid()}"
    staging.mkdir(exist_ok=True)
    try:
        cc = compiler(name)
        cc.output_dir = str(staging)
        cc.target_cpu = "host"
        cc.verbose = False
        cc.export("run", LOOP_SIGNATURE)(entry)
        cc.compile()
        os.replace(staging / path.name, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def pycc_compiler() -> type:
    """numba.pycc's CC, without its pending-deprecation warning (the module docstring says why pycc is used)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from numba.pycc import CC
        except ImportError as exc:
            raise NoAheadOfTimeCompiler(f"could not build the native loop: numba {_installed('numba')} has no "
                                        f"numba.pycc ({exc})") from exc
    return CC


@contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _cpu_flags() -> str:
    """The host CPU's feature flags (Linux), else its name: a module built for one CPU is not loaded on another."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    import platform

    return platform.processor()


def _installed(package: str) -> str:
    """The installed version of ``package``, without importing it: the name of its dist-info folder (importlib.metadata
    costs a fresh process ~30 ms of import), else importlib.metadata's answer."""
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.origin:
        root = Path(spec.origin).parent.parent
        found = sorted(root.glob(f"{package}-*.dist-info"))
        if len(found) == 1:
            return found[0].name[len(package) + 1:-len(".dist-info")]
    from importlib.metadata import version

    return version(package)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)
