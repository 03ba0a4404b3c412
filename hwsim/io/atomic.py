"""Writes that a crash (Ctrl-C, SIGKILL, an exception, a full disk) never leaves half done.

atomic_write: one file, written under a temporary name in its folder, then renamed over.
replace_folder: a whole folder (a run bundle), written into a temporary folder beside the
target, then swapped in with one rename. On Linux the swap is renameat2(RENAME_EXCHANGE), so
at every instant the target is either the old folder or the new one, whole; elsewhere the old
folder is first renamed aside, and the next run puts it back if we died in between. Files of
an earlier run never mix with a new one, and leftovers of a killed run are removed by the
next one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from hwsim.errors import ConfigError

_TMP = ".hwsim-tmp-"        # <parent>/.<name>.hwsim-tmp-<pid>-<random>: a bundle being written
_OLD = ".hwsim-old-"        # <parent>/.<name>.hwsim-old-<pid>-<random>: the old one, moved aside


def atomic_write(path: Path, write) -> None:
    """Call write(tmp_path), then move tmp_path over `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_folder_target(target: Path, is_ours, what: str = "--out") -> None:
    """A folder we may replace: absent, empty, or one of ours (`is_ours(path)`), never a file
    or someone's unrelated folder (replacing it would delete their files)."""
    target = Path(target)
    if target.is_symlink():
        # replacing it would swap the link away and delete through it, into its target
        raise ConfigError("is a symbolic link; refusing to replace what it points to "
                          "(name the folder itself, or a new one)", file=str(target), key=what)
    if target.exists() and not target.is_dir():
        raise ConfigError("names a file, not a folder", file=str(target), key=what)
    if target.is_dir() and any(target.iterdir()) and not is_ours(target):
        raise ConfigError("is a folder that is not an hwsim bundle; refusing to replace it "
                          "(choose a new or empty folder)", file=str(target), key=what)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(path: Path, marker: str) -> int | None:
    try:
        return int(path.name.split(marker, 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return None


def _our_folder(path: Path) -> bool:
    """A real folder (not a link to one, which anyone may plant beside --out) of this user."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def clean_leftovers(target: Path) -> None:
    """Undo what a killed writer of `target` left: put an old folder moved aside back if the
    target is missing, and remove temporary folders whose process is gone. Only real folders
    of this user are touched: a link named like a leftover is never followed."""
    parent, name = target.parent, target.name
    if not parent.is_dir():
        return
    for marker in (_OLD, _TMP):
        for path in sorted(parent.glob(f".{name}{marker}*")):
            pid = _owner(path, marker)
            if pid is None or (pid != os.getpid() and _pid_alive(pid)) or not _our_folder(path):
                continue
            if marker == _OLD and not target.exists():
                os.rename(path, target)
            else:
                shutil.rmtree(path, ignore_errors=True)


def _libc_exchange():
    """renameat2(..., RENAME_EXCHANGE) when the C library has it (Linux, glibc >= 2.28)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2
_renameat2 = _libc_exchange()


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False when the system cannot."""
    if _renameat2 is None:
        return False
    rc = _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):     # EINVAL, ENOSYS, EOPNOTSUPP: this filesystem cannot exchange
        return False
    raise OSError(err, os.strerror(err), str(b))


def keep_aside(old: Path) -> Path:
    """Move a replaced folder that still holds files we may not delete to a visible name beside
    the target (`<name>.kept-<pid>`), where no later run cleans it up."""
    name = old.name.split(_TMP)[0].split(_OLD)[0].lstrip(".")
    kept = Path(tempfile.mkdtemp(dir=old.parent, prefix=f"{name}.kept-{os.getpid()}-"))
    os.rmdir(kept)
    os.rename(old, kept)
    return kept


def _swap_in(tmp: Path, target: Path, remove_old) -> None:
    if target.is_symlink():     # planted while we wrote: never swap one out and delete through it
        raise ConfigError("became a symbolic link while the bundle was written; left as it is",
                          file=str(target), key="--out")
    if not target.exists():
        os.rename(tmp, target)
        return
    if _exchange(tmp, target):          # tmp now holds the old folder
        remove_old(tmp)
        return
    old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}{_OLD}{os.getpid()}-"))
    os.rmdir(old)
    os.rename(target, old)
    os.rename(tmp, target)
    remove_old(old)


def _remove_tree(old: Path) -> None:
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def replace_folder(target: Path, remove_old=_remove_tree, check=None):
    """`with replace_folder(out) as tmp:` write the folder's files into tmp; on a clean exit
    tmp replaces `out` whole, on any exception (Ctrl-C too) `out` is left as it was.
    `remove_old(path)` deletes the folder replaced (by default all of it); `check(out)`, if
    given, is called again just before the swap (the folder may have changed while we wrote)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(target)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}{_TMP}{os.getpid()}-"))
    try:
        yield tmp
        os.chmod(tmp, 0o755)
        if check is not None:
            check(target)
        _swap_in(tmp, target, remove_old)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.filename:
            raise
        # a write with no path of its own (a full disk mid-file): the folder being written
        raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
