"""Writing a directory so that nothing is ever half-written, lost or replaced unasked.

Every output of the package (a Hub module, a module pair, an exported
classifier) is written by `staged_directory`:

1. `check_target` refuses, before any work, a target that is a file, the
   current directory or one of its parents, the home or root directory, or an
   existing directory that is not an output of this package (`--force` never
   empties a directory it did not write).
2. A lock file next to the target (`.NAME.lock`, `flock`, removed after the
   write) refuses a second writer of the same target while the first runs.
3. The output is written into a hidden sibling `.partial-NAME-*` with ordinary
   permissions (the umask's, not `mkdtemp`'s 0700); stale siblings of killed
   runs are removed under the lock.
4. A marker file (`MARKER`) is written into it last, so a reader can tell a
   whole output from anything else.
5. The staged directory replaces the target in one step: `renameat2` with
   `RENAME_EXCHANGE` swaps the two atomically on Linux, then the old one is
   removed. Where the exchange is not available, the old target is renamed
   aside first; a kill between the two renames leaves the old output aside
   as `.replaced-NAME-*`, which the next write of that target puts back or
   removes.
"""

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import json
import logging
import os
import shutil
import tempfile

import tensorflow as tf

logger = logging.getLogger(__name__)

MARKER = ".bert_keras_output.json"
_SAVED_MODEL_ENTRIES = {"saved_model.pb", "variables", "assets", "assets.extra", "fingerprint.pb"}
_PAIR_ENTRIES = {"encoder", "preprocess"}
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class OutputLockedError(RuntimeError):
    """Another process is writing the same output directory."""


def _is_saved_model_dir(path):
    try:
        entries = set(os.listdir(path))
    except OSError:
        return False
    return "saved_model.pb" in entries and entries <= _SAVED_MODEL_ENTRIES | {MARKER}


def is_package_output(path):
    """Whether `path` is a directory this package wrote (or an empty one).

    True for an empty directory, a directory carrying `MARKER`, and (outputs
    of versions before the marker) a bare SavedModel directory or a directory
    holding only `encoder/` and `preprocess/` SavedModels.
    """
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    entries = set(os.listdir(path))
    if not entries or MARKER in entries:
        return True
    if _is_saved_model_dir(path):
        return True
    return entries <= _PAIR_ENTRIES and all(_is_saved_model_dir(os.path.join(path, e)) for e in entries)


def read_marker(path):
    """The marker dict of a finished output at `path`, or None when it has none (or a torn one)."""
    try:
        with open(os.path.join(path, MARKER)) as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("complete") is True else None


def _protected(path):
    real = os.path.realpath(path)
    cwd = os.path.realpath(os.getcwd())
    if real == cwd or cwd.startswith(real.rstrip(os.sep) + os.sep):
        return "it is the current directory or one of its parents"
    if real in (os.path.realpath(os.path.expanduser("~")), os.path.realpath(os.sep)):
        return "it is the home or root directory"
    return None


def check_target(target, overwrite=False, argument="export_dir"):
    """Raises before any work if `target` cannot be written (see the module docstring).

    Args:
        target: str. The output directory.
        overwrite: bool. Whether an existing output of this package may be replaced.
        argument: str. How the caller names the target in messages (e.g. `--out`).

    Raises:
        FileExistsError: `target` exists and `overwrite` is False, or it is a
            file, or a directory this package did not write.
        ValueError: `target` is the current, a parent, home or root directory.
    """
    target = os.fspath(target)
    if not target or not os.path.basename(os.path.abspath(target)):
        raise ValueError(f"Received an invalid value for `{argument}`: {target!r} names no directory.")
    reason = _protected(target)
    if reason:
        raise ValueError(f"Refusing to write the output into {target!r} ({argument}): {reason}. Pick a new directory.")
    if os.path.lexists(target) and not os.path.isdir(target):
        raise FileExistsError(f"{target!r} ({argument}) exists and is not a directory. Pick a directory path.")
    parent = os.path.dirname(os.path.abspath(target))
    existing = parent
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"Cannot write {target!r} ({argument}): {existing!r} is not a writable directory.")
    if not os.path.exists(target):
        return
    if not is_package_output(target):
        shown = sorted(os.listdir(target))[:5]
        raise FileExistsError(
            f"{target!r} ({argument}) exists and was not written by bert_keras (it holds {shown}); it is never "
            "replaced, even when overwriting is asked for. Pick another directory, or remove it yourself."
        )
    if not overwrite and os.listdir(target):
        raise FileExistsError(f"{target!r} ({argument}) already exists; pass overwrite=True (--force) to replace it.")


def _libc_renameat2():
    name = ctypes.util.find_library("c")
    try:
        function = ctypes.CDLL(name, use_errno=True).renameat2
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return function


_renameat2 = _libc_renameat2()


def _exchange(a, b):
    """Atomically swaps two paths; False when this system or file system cannot."""
    if _renameat2 is None:
        return False
    result = _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, f"Could not swap {a!r} and {b!r}: {os.strerror(code)}")


def _replace(staging, target, parent, name):
    if not os.path.exists(target):
        os.replace(staging, target)
        return
    if _exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)  # now the old output
        return
    aside = tempfile.mkdtemp(prefix=f".replaced-{name}-", dir=parent)
    os.rmdir(aside)
    os.replace(target, aside)
    os.replace(staging, target)
    shutil.rmtree(aside, ignore_errors=True)


def _recover(parent, name, target):
    """Under the lock: puts back an output set aside by a killed run, removes stale partial writes."""
    for entry in sorted(os.listdir(parent)):
        path = os.path.join(parent, entry)
        if entry.startswith(f".replaced-{name}-") and os.path.isdir(path):
            if not os.path.exists(target):
                logger.warning("Restoring %s, set aside by an interrupted write, to %s", path, target)
                os.replace(path, target)
            else:
                shutil.rmtree(path, ignore_errors=True)
        elif entry.startswith(f".partial-{name}-") and os.path.isdir(path):
            logger.info("Removing %s, left by an interrupted write", path)
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def output_lock(target):
    """Holds `.NAME.lock` next to `target`; raises `OutputLockedError` if another process holds it.

    The lock file is removed on release. A process that opened it just before
    that removal finds, after locking, that the path names another file (or
    none) and tries again, so two writers never hold two different lock files.
    """
    parent, name = os.path.split(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    lock_path = os.path.join(parent, f".{name}.lock")
    while True:
        lock = open(lock_path, "a+")
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
        yield
    finally:
        os.unlink(lock_path)
        lock.close()


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_marker(directory, kind, info):
    marker = dict(info or {}, writer="bert_keras", kind=kind, complete=True)
    with open(os.path.join(directory, MARKER), "w") as f:
        json.dump(marker, f, indent=2)
        f.flush()
        os.fsync(f.fileno())


def write_json_atomically(path, value):
    """Writes `value` as JSON to `path` through a temporary sibling and one rename: whole or absent."""
    staged = f"{path}.partial-{os.getpid()}"
    with open(staged, "w") as f:
        json.dump(value, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(staged, path)


def claim_directory(path, kind, info=None, replace=False):
    """Creates `path` (if needed) and marks it as work in progress of this package.

    A long run (pre-training) keeps its state in its output directory until
    the final output replaces it; the marker (with `complete: false`) lets
    `check_target` and a rerun tell that directory from a user's.
    """
    check_target(path, overwrite=True)
    os.makedirs(path, exist_ok=True)
    if replace or not os.path.exists(os.path.join(path, MARKER)):
        write_json_atomically(os.path.join(path, MARKER), dict(info or {}, writer="bert_keras", kind=kind, complete=False))


@contextlib.contextmanager
def staged_directory(target, overwrite=False, kind="output", info=None, argument="export_dir"):
    """Yields an empty directory next to `target`; on success it replaces `target` in one step.

    Args:
        target: str. The output directory.
        overwrite: bool. Replace an existing output of this package. Defaults to `False`.
        kind: str. Recorded in the marker (e.g. `"encoder"`, `"module_pair"`).
        info: optional dict, also recorded in the marker.
        argument: str. How the caller names `target` in error messages.

    Raises:
        FileExistsError, ValueError: from `check_target`, before anything is written.
        OutputLockedError: another process writes `target`.
        OSError: the disk is full (`ENOSPC`); `target` is left as it was.

    On any exception the staged directory is removed and `target` is left as it was.
    """
    target = os.fspath(target)
    check_target(target, overwrite, argument)
    parent, name = os.path.split(os.path.abspath(target))
    with output_lock(target):
        _recover(parent, name, target)
        check_target(target, overwrite, argument)  # again, under the lock
        staging = tempfile.mkdtemp(prefix=f".partial-{name}-", dir=parent)
        os.chmod(staging, 0o777 & ~_umask())
        try:
            try:
                yield staging
                _write_marker(staging, kind, info)
            except tf.errors.ResourceExhaustedError as error:
                raise OSError(errno.ENOSPC, f"No space left while writing {target!r}; it was left as it was ({error.message})") from None
            except OSError as error:
                if error.errno == errno.ENOSPC:
                    raise OSError(errno.ENOSPC, f"No space left on the device while writing {target!r}; it was left as it was.") from None
                raise
            fault_point(f"before-replace:{name}")
            _replace(staging, target, parent, name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


FAULT_VARIABLE = "BERT_KERAS_FAULT_POINT"


def fault_point(point):
    """Test hook: `BERT_KERAS_FAULT_POINT=NAME` kills this process with SIGKILL at the point `NAME`.

    Lets the fault-injection tests stop a run at a chosen place, deterministically.
    """
    wanted = os.environ.get(FAULT_VARIABLE)
    if wanted and (wanted == point or wanted == point.split(":")[0]):
        logger.warning("Fault point %s reached: killing this process (%s is set).", point, FAULT_VARIABLE)
        os.kill(os.getpid(), 9)

