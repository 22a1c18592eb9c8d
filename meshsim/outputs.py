"""Every file, folder and stream a command writes goes through here; a failure is one line naming the path and why.

Files are written atomically: a temporary file beside the target is filled, then renamed over it. Only a regular
file (or nothing) is ever replaced: a path that is a device, a fifo, a socket or a folder is refused, since renaming
over it would turn, say, /dev/null into a regular file. A symlink is followed, so the link stays. ``check_file`` and
``check_folder`` look at a target before long work (they create a probe file and remove it, since permission bits
say nothing to root and nothing about a read-only mount); the writers still turn a failure at write time (a disk
that fills during the run, a file-size limit) into the same error. The command's result goes to stdout through
``print_result``, so a closed, full or broken stdout is an error too, not a traceback or an exit 0 with the output
lost.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TextIO

from meshsim.errors import FieldError

STDOUT = "stdout"  # the field of the command's standard output: the CLI says it as it is
SHARED_MODE = 0o644  # a new output is data to share (mkstemp makes it private)

# why a write failed, by errno; the rest in the system's own words
CAUSES = {
    errno.ENOSPC: "the device is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "the file-size limit was reached",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "its folder does not exist",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.EISDIR: "it is a folder",
    errno.EPIPE: "broken pipe (the reader has gone)",
    errno.EBADF: "it is closed",
}

KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a fifo"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class OutputError(FieldError):
    """A file, folder or stream a command writes cannot be written; ``field`` is the option that named it."""

    def __init__(self, field: str, path: str | Path, cause: str) -> None:
        super().__init__(field, f"cannot write {path}: {cause}")
        self.path = str(path)
        self.cause = cause

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:  # raised in a worker, re-raised in the parent
        return type(self), (self.field, self.path, self.cause)


def cause_of(exc: BaseException) -> str:
    """Why a write failed, in words."""
    return CAUSES.get(getattr(exc, "errno", None) or 0) or getattr(exc, "strerror", None) or str(exc)


def kind_of(mode: int) -> str:
    return next((name for test, name in KINDS if test(mode)), "not a regular file")


@contextmanager
def output_errors(field: str, path: str | Path) -> Iterator[None]:
    """Turn an OSError of the block (the write of ``path``) into an OutputError naming ``path`` and the cause."""
    try:
        yield
    except OSError as exc:
        raise OutputError(field, path, cause_of(exc)) from None


def _target(path: Path, field: str) -> Path:
    """The file a write lands on (a symlink's target), refused unless it is a regular file or not there yet."""
    real = Path(os.path.realpath(path))
    try:
        mode = real.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # not there yet (its folder is checked on its own)
        return real
    except OSError as exc:
        raise OutputError(field, path, cause_of(exc)) from None
    if not stat.S_ISREG(mode):
        raise OutputError(field, path, f"it is {kind_of(mode)}, not a regular file (meshsim replaces only regular "
                                       "files)")
    return real


def _nearest_existing(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _folder_checked(folder: Path, field: str, shown: str | Path, must_exist: bool) -> Path:
    """The existing folder new files would go in (``folder`` or, when it may be made, its nearest ancestor)."""
    existing = _nearest_existing(folder)
    with output_errors(field, shown):
        mode = existing.stat().st_mode
    if not stat.S_ISDIR(mode):
        where = "it" if existing == Path(shown) else str(existing)
        raise OutputError(field, shown, f"{where} is {kind_of(mode)}, not a folder")
    if must_exist and existing != folder:
        raise OutputError(field, shown, f"folder {folder} does not exist")
    return existing


def _probe(folder: Path, field: str, shown: str | Path) -> None:
    """Create and remove a file in ``folder``: what a write there will meet (read-only, no permission, no inodes)."""
    with output_errors(field, shown):
        fd, name = tempfile.mkstemp(prefix=".meshsim-check-", dir=folder)
        os.close(fd)
        os.unlink(name)


def check_file(path: str | Path, field: str, *, parents: bool = False) -> Path:
    """Before long work: the file ``path`` can be written (its folder exists, or may be made with ``parents``)."""
    target = _target(Path(path), field)
    _probe(_folder_checked(target.parent, field, path, must_exist=not parents), field, path)
    return target


def check_folder(path: str | Path, field: str) -> Path:
    """Before long work: files can be written in the folder ``path`` (it exists, or its nearest ancestor does)."""
    folder = Path(path)
    _probe(_folder_checked(folder, field, path, must_exist=False), field, path)
    return folder


def make_folder(path: str | Path, field: str) -> Path:
    """The folder ``path``, made with its parents (refused when it or a parent is not a folder)."""
    folder = Path(path)
    _folder_checked(folder, field, path, must_exist=False)
    with output_errors(field, path):
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_file_with(path: str | Path, field: str, write: Callable[[Path], object], *, parents: bool = False) -> Path:
    """Atomically: ``write(tmp)`` fills a temporary file beside the target, renamed over it; returns ``path``.

    ``parents``: make a missing folder (else a missing folder is refused). The temporary file keeps the target's
    suffix, for writers that read the format from it."""
    target = _target(Path(path), field)
    if parents:
        make_folder(target.parent, field)
    else:
        _folder_checked(target.parent, field, path, must_exist=True)
    with output_errors(field, path):
        mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else SHARED_MODE
        fd, name = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=target.suffix, dir=target.parent)
        os.close(fd)
        tmp = Path(name)
        try:
            write(tmp)
            os.chmod(tmp, mode)
            _target(target, field)  # still a regular file or nothing: what is there may have changed meanwhile
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return Path(path)


def write_file(path: str | Path, content: str | bytes, field: str, *, parents: bool = False) -> Path:
    """Write ``content`` (text as UTF-8) to ``path`` atomically; returns ``path``."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    return write_file_with(path, field, lambda tmp: tmp.write_bytes(data), parents=parents)


def write_folder_with(path: str | Path, field: str, fill: Callable[[Path], object]) -> Path:
    """Atomically: ``fill(tmp)`` fills a temporary folder beside ``path``, renamed into place (an older folder there is
    replaced; anything else there is refused). Its parents are made."""
    folder = Path(path)
    make_folder(folder.parent, field)
    if os.path.lexists(folder) and not folder.is_dir():
        raise OutputError(field, path, f"it is {kind_of(folder.stat().st_mode)}, not a folder")
    with output_errors(field, path):
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            os.chmod(tmp, 0o755)  # mkdtemp makes it private; a folder of results is data to share
            fill(tmp)
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return folder


def check_stdout() -> None:
    """Before long work: a command started with stdout closed (``>&-``) has nowhere to put its result."""
    if sys.stdout is None:
        raise OutputError(STDOUT, "the result", "stdout is closed")


def print_result(text: str, stream: TextIO | None = None) -> None:
    """The command's result on stdout (or ``stream``), flushed now: a closed, full or broken one is an OutputError."""
    if stream is None:
        check_stdout()
        stream = sys.stdout
    try:
        stream.write(text + "\n")
        stream.flush()
    except (OSError, ValueError) as exc:  # ValueError: the stream object was closed
        _discard_stdout(stream)
        raise OutputError(STDOUT, "the result", cause_of(exc)) from None


def _discard_stdout(stream: object) -> None:
    """Point stdout's descriptor at /dev/null, so the interpreter's last flush of what is left does not fail again
    (it would print a traceback and change the exit status)."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (OSError, ValueError, AttributeError):  # not a real descriptor (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def print_note(line: str) -> None:
    """One line on stderr; a stderr that cannot be written is left alone (there is nowhere else to say it)."""
    try:
        if sys.stderr is not None:
            print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
