"""The lock that refuses a second writer of one target (or a second user of one backup) at once.

`output_lock` holds `flock` on a lock file next to the target (`.NAME.lock`),
opened without following links: a link, a hard link or anything but a plain
file planted under that name is refused, never written through. Used by
`_files.staged_directory` (which re-exports it) and by the runs that hold
their output or backup from their start.
"""

import contextlib
import errno
import fcntl
import os
import stat
import threading


class OutputLockedError(RuntimeError):
    """Another process is writing the same output directory."""


# The lock files held with `output_lock(..., reentrant=True)`: absolute path -> the holding thread's id.
_HELD = {}


def _open_lock_file(lock_path):
    """Opens (creating) the lock file without following a link; refuses anything but a plain file of one name."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        if error.errno == errno.EISDIR:
            raise OutputLockedError(f"The lock file {lock_path!r} is a directory; bert_keras writes only lock files it "
                                    "made. Remove it if nobody else is writing there.") from None
        if error.errno == errno.ELOOP:
            raise OutputLockedError(
                f"The lock file {lock_path!r} is a symbolic link, which bert_keras never follows. "
                "Remove it if nobody else is writing there."
            ) from None
        if os.path.lexists(lock_path) and not stat.S_ISREG(os.lstat(lock_path).st_mode):  # a socket (ENXIO), a device
            raise OutputLockedError(f"The lock file {lock_path!r} is not a plain file; bert_keras writes only lock files "
                                    "it made. Remove it if nobody else is writing there.") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "not a plain file" if not stat.S_ISREG(info.st_mode) else f"a file with {info.st_nlink} names (a hard link)"
        raise OutputLockedError(
            f"The lock file {lock_path!r} is {what}; bert_keras writes only lock files it made. "
            "Remove it if nobody else is writing there."
        )
    return os.fdopen(fd, "r+")


@contextlib.contextmanager
def output_lock(target, lock_path=None, reentrant=False):
    """Holds `.NAME.lock` next to `target` (or `lock_path`); raises `OutputLockedError` if another process holds it.

    With `reentrant=True`, the same thread may take the lock again inside the
    block: a run that holds its output's lock from its start then writes the
    output (`staged_directory` locks it again) without refusing itself. Any
    other holder, another thread of this process included, is refused.

    The lock file is removed on release. A process that opened it just before
    that removal finds, after locking, that the path names another file (or
    none) and tries again, so two writers never hold two different lock files.
    """
    parent, name = os.path.split(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    lock_path = os.path.abspath(lock_path or os.path.join(parent, f".{name}.lock"))
    if _HELD.get(lock_path) == threading.get_ident():  # held by this thread with reentrant=True
        yield
        return
    while True:
        lock = _open_lock_file(lock_path)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            lock.close()
            raise OutputLockedError(
                f"Another process (pid {holder}) is writing {target!r}; wait for it to finish or pick another directory."
            ) from None
        try:
            current = os.stat(lock_path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(lock.fileno()).st_ino:
            break
        lock.close()  # removed by the previous holder between our open and our lock
    try:
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        if reentrant:
            _HELD[lock_path] = threading.get_ident()
        yield
    finally:
        if reentrant:
            _HELD.pop(lock_path, None)
        with contextlib.suppress(FileNotFoundError):  # gone with its directory (a backup's lock, removed with it)
            os.unlink(lock_path)
        lock.close()
