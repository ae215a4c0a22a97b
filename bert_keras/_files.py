"""Writing a directory so that nothing is ever half-written, lost or replaced unasked.

Every output of the package (a Hub module, a module pair, an exported
classifier) is written by `staged_directory`:

1. `check_target` refuses, before any work, a target that is a file, a
   symbolic link, the current directory or one of its parents, the home or
   root directory, or an existing directory that does not carry this
   package's marker of the kind being written (`--force` never empties a
   directory it did not write, nor another command's output or a backup).
   A trailing `/` or `/.` does not hide a link.
2. A lock file next to the target (`.NAME.lock`, `flock`, removed after the
   write; `_locks.output_lock`) refuses a second writer of the same target while the first runs.
   It is opened without following links and must be a plain file with one
   name: a link or hard link planted there is refused, never written through.
3. The output is written into a hidden sibling `.partial-NAME-XXXXXXXX` with
   ordinary permissions (the umask's, not `mkdtemp`'s 0700), marked at once
   as work in progress; stale siblings of killed runs (exactly that name, a
   real directory, with that marker) are removed under the lock.
4. A marker file (`MARKER`) is written into it last, so a reader can tell a
   whole output from anything else.
5. The staged directory replaces the target in one step: `renameat2` with
   `RENAME_EXCHANGE` swaps the two atomically on Linux, then the old one is
   removed. Where the exchange is not available, the old target is renamed
   aside first; a kill between the two renames leaves the old output aside
   as `.replaced-NAME-*`, which the next write of that target puts back or
   removes.

The one rule for writing under a directory (`directory_under`): every level
below a marked root (a backup, a staged output) is created by this run or is
a real directory carrying the package's marker; a link, wherever it points,
or a directory the package did not mark is refused, never written through.
Before the swap, the staged directory must still be the one made for the
write and hold no link.

The one rule for removing anything (`remove_output`, and every `rmtree` here):
the package deletes or replaces only a real directory (not a link) that
carries its marker, written by it, of the kind the caller expects. A directory
without the marker (a user's, or an output of a version before the marker)
is never emptied.
"""

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import threading

import tensorflow as tf

from bert_keras._checks import protected_directory, replace_hint
from bert_keras._faults import fault_point
from bert_keras._locks import OutputLockedError, output_lock  # noqa: F401 (the package's writers import them from here)
from bert_keras._platform.native import rename_exchange

logger = logging.getLogger(__name__)

MARKER = ".bert_keras_output.json"


_STAGING_KIND = "staging"
# `tempfile.mkdtemp`'s names: the prefix, then 8 characters of this alphabet (no "-", so that the staging
# directories of `OUT` are never confused with those of `OUT-x`).
_TEMP_SUFFIX = r"[a-z0-9_]{8}"


# The directories a run's output may replace besides outputs of its own kind: a pre-training run's
# directory (its backup inside) ends as the module pair it trains.
_ENDS_AS = {"module_pair": ("pretraining_run",)}


def _bare(path):
    """`path` without trailing separators or `.` components ("E/", "E/." -> "E"), so that a link at its end shows.

    `os.path.islink("E/")` is False for a link `E`, while writing into "E/" goes through it.
    """
    path = os.fspath(path)
    while len(path) > 1 and (path.endswith(os.sep) or path.endswith(os.sep + ".")):
        path = path[:-1] if path.endswith(os.sep) else path[:-2]
    return path or os.sep


def _marker_of(path):
    """The marker dict in the real directory `path`, complete or not; None without one (or a torn one)."""
    path = _bare(path)
    if os.path.islink(path) or not os.path.isdir(path):
        return None
    marker_path = os.path.join(path, MARKER)
    if os.path.islink(marker_path):
        return None
    try:
        with open(marker_path) as f:
            marker = json.load(f)
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deep is no marker of ours
        return None
    return marker if isinstance(marker, dict) and marker.get("writer") == "bert_keras" else None


def is_package_output(path):
    """Whether `path` is a real directory that this package wrote (it carries `MARKER`), or an empty one.

    A SavedModel directory without the marker is not one: a plain
    `tf.saved_model.save` output, or a user's own `encoder/` + `preprocess/`,
    is never replaced.
    """
    if os.path.islink(_bare(path)) or not os.path.isdir(path):
        return False
    return not os.listdir(path) or _marker_of(path) is not None


def enclosing_output(path):
    """The nearest directory above `path` that carries a bert_keras marker, with the marker's kind; (None, None)."""
    directory = os.path.dirname(os.path.abspath(path))
    while True:
        marker = _marker_of(directory)
        if marker is not None:
            return directory, marker.get("kind")
        parent = os.path.dirname(directory)
        if parent == directory:
            return None, None
        directory = parent


def read_marker(path):
    """The marker dict of a finished output at `path`, or None when it has none (or a torn one)."""
    marker = _marker_of(path)
    return marker if marker is not None and marker.get("complete") is True else None


def _remove_owned(directory, owned, walk):
    """Removes the entries of `directory` that `owned` names, walking into those `walk` names; returns what is left."""
    left = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:  # another worker removing the same backup
        return left
    for name in names:
        entry = os.path.join(directory, name)
        is_directory = os.path.isdir(entry) and not os.path.islink(entry)
        if not owned(name):
            left.append(name)
        elif is_directory and walk is not None and walk(name):
            if _remove_owned(entry, owned, walk):
                left.append(name)  # a user's files inside it stay, and the folder with them
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(entry)
        elif is_directory:
            shutil.rmtree(entry, onerror=_ignore_missing)  # removes links inside it as links; follows none
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry)
    return left


def remove_output(path, kinds, owned=None, walk=None):
    """Removes the directory `path` if, and only if, this package wrote it as one of `kinds`.

    The one rule for deleting: a real directory (a symbolic link is never
    followed nor removed) carrying this package's marker with one of `kinds`.
    Anything else is left as it is, with a warning.

    Args:
        path: str. The directory.
        kinds: str or tuple of str. The marker kinds that may be removed.
        owned: optional callable `name -> bool`: which entries of `path` this
            package writes there. With it, a directory that also holds other
            entries (a user's, added since) loses only the owned ones and stays.
        walk: optional callable `name -> bool`, with `owned`: owned folders
            whose entries are judged by `owned` in turn (a backup's phase
            folders), so that a user's file inside one stays too.

    A directory the package did not create (a user's empty directory it
    claimed, `claim_directory`) loses its entries and stays.

    Returns:
        True when `path` was removed (or did not exist), False when it was left.
    """
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    path = _bare(path)
    if not os.path.lexists(path):
        return True
    marker = _marker_of(path)
    if marker is None or marker.get("kind") not in kinds:
        logger.warning("Not removing %s: it is not a %s directory written by bert_keras.", path, " or ".join(kinds))
        return False
    if marker.get("made") is False:  # the user's own (empty) directory, claimed: its entries go, it stays
        owned = owned or (lambda name: True)
    if owned is None:
        shutil.rmtree(path, onerror=_ignore_missing)  # removes links inside it as links; follows none
        return True
    left = _remove_owned(path, owned, walk)  # the marker too when something is left: what is left is the user's
    if left:
        logger.warning("Kept %s: it holds entries bert_keras did not write (%s); its own were removed.", path, left[:5])
        return False
    if marker.get("made") is not False:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(path)
    return True


def _ignore_missing(function, path, error):
    if not isinstance(error[1], FileNotFoundError):  # another worker removing the same backup
        raise error[1]


def check_target(target, overwrite=False, argument="export_dir", kind=None):
    """Raises before any work if `target` cannot be written (see the module docstring).

    Args:
        target: str. The output directory.
        overwrite: bool. Whether an existing output of this package may be replaced.
        argument: str. How the caller names the target in messages (e.g. `--out`).
        kind: optional str. The kind of output to be written: an existing
            output of another kind (another command's, a run's backup) is
            never replaced by it.

    Raises:
        FileExistsError: `target` exists and `overwrite` is False, or it is a
            file, a link, a directory this package did not write, or an
            output of another kind.
        ValueError: `target` is the current, a parent, home or root directory.
    """
    target = os.fspath(target)
    if not target or not os.path.basename(os.path.abspath(target)):
        raise ValueError(f"Received an invalid value for `{argument}`: {target!r} names no directory.")
    reason = protected_directory(target)
    if reason:
        raise ValueError(f"Refusing to write the output into {target!r} ({argument}): {reason}. Pick a new directory.")
    if os.path.islink(_bare(target)):
        raise FileExistsError(f"{target!r} ({argument}) is a symbolic link; bert_keras follows no link it did not "
                              "create. Pass the real directory path, or a new one.")
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
    marker = _marker_of(target)
    if kind is not None and marker is not None and marker.get("kind") not in (kind, *_ENDS_AS.get(kind, ())):
        raise FileExistsError(
            f"{target!r} ({argument}) holds a bert_keras {marker.get('kind')!r} output, not a {kind!r} one; it is never "
            "replaced by another kind of output, even when overwriting is asked for. Pick another directory."
        )
    if not overwrite and os.listdir(target):
        raise FileExistsError(f"{target!r} ({argument}) already exists; {replace_hint(argument)} to replace it.")
    recorded = (marker or {}).get("entries")
    added = sorted(set(os.listdir(target)) - set(recorded) - {MARKER}) if isinstance(recorded, list) else []
    if added:
        raise FileExistsError(
            f"{target!r} ({argument}) is a bert_keras output, but holds entries it did not write ({added[:5]}); it is "
            "not replaced, so that they are not lost. Move them out, or pick another directory."
        )


def _replace(staging, target, parent, name):
    if not os.path.exists(target):
        os.replace(staging, target)
        return
    if rename_exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)  # now the old output
        return
    aside = tempfile.mkdtemp(prefix=f".replaced-{name}-", dir=parent)
    os.rmdir(aside)
    os.replace(target, aside)
    os.replace(staging, target)
    shutil.rmtree(aside, ignore_errors=True)


def _recover(parent, name, target):
    """Under the lock: puts back an output set aside by a killed run, removes stale partial writes.

    Only this target's own leftovers: the exact names `staged_directory` makes
    for `name` (not those of `name-x`, whose writer may be running), real
    directories carrying the package's marker.
    """
    replaced = re.compile(re.escape(f".replaced-{name}-") + _TEMP_SUFFIX)
    partial = re.compile(re.escape(f".partial-{name}-") + _TEMP_SUFFIX)
    for entry in sorted(os.listdir(parent)):
        path = os.path.join(parent, entry)
        if replaced.fullmatch(entry) and _marker_of(path) is not None:
            if not os.path.lexists(target):
                logger.warning("Restoring %s, set aside by an interrupted write, to %s", path, target)
                os.replace(path, target)
            else:
                shutil.rmtree(path, ignore_errors=True)
        elif partial.fullmatch(entry) and _marker_of(path) is not None:
            logger.info("Removing %s, left by an interrupted write", path)
            shutil.rmtree(path, ignore_errors=True)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_marker(directory, kind, info):
    # `entries`: what was written, so that a later overwrite can tell entries a user added since (never replaced).
    entries = sorted(name for name in os.listdir(directory) if name != MARKER)
    marker = dict(info or {}, writer="bert_keras", kind=kind, complete=True, entries=entries)
    with open(os.path.join(directory, MARKER), "w") as f:
        json.dump(marker, f, indent=2)
        f.flush()
        os.fsync(f.fileno())


def write_json_atomically(path, value):
    """Writes `value` as JSON to `path` through a temporary sibling and one rename: whole or absent."""
    # A new file of a random name (`mkstemp`: O_EXCL, so a link planted under a name it could guess is never
    # written through), with the umask's permissions rather than mkstemp's 0600.
    fd, staged = tempfile.mkstemp(prefix=f"{os.path.basename(path)}.partial-", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            json.dump(value, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(staged, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(staged)
        raise


def claim_directory(path, kind, info=None, replace=False, accept=(), argument="directory"):
    """Creates `path` (if needed) and marks it as work in progress of this package.

    A long run (pre-training, a fine-tune's backup) keeps its state in a
    directory until the final output replaces it or the run removes it; the
    marker (with `complete: false`) lets `check_target`, `remove_output` and a
    rerun tell that directory from a user's.

    Args:
        path: str. The directory.
        kind: str. Recorded in the marker.
        info: optional dict, also recorded.
        replace: bool. Write the marker even when one of `kind` is there.
        accept: other marker kinds that may be claimed (e.g. the output a
            run's directory ends as). A directory of any other kind is refused.
        argument: str. How the caller names `path` in messages.
    """
    check_target(path, overwrite=True, argument=argument)
    marker = _marker_of(path)
    _refuse_claim(path, marker, (kind, *accept), kind, argument)
    if marker is None and not os.path.lexists(path):
        if _create_marked(path, dict(info or {}, writer="bert_keras", kind=kind, complete=False, made=True)):
            return
        # Another process (a worker of the same cluster) made it between the check and now: judge what is there.
        check_target(path, overwrite=True, argument=argument)
        marker = _marker_of(path)
        _refuse_claim(path, marker, (kind, *accept), kind, argument)
    elif marker is None:
        # There now, unmarked when read: another process may have made it (marked, in one step) in between. Read again,
        # or its `made` would be taken for a user's directory's.
        marker = _marker_of(path)
        _refuse_claim(path, marker, (kind, *accept), kind, argument)
    if replace or marker is None or marker.get("kind") != kind:
        # `made`: whether the package created the directory; one a user made (empty) is emptied, never removed.
        made = marker.get("made", True) if marker is not None else False
        _claim_marker(path, dict(info or {}, writer="bert_keras", kind=kind, complete=False, made=made))


def _refuse_claim(path, marker, kinds, kind, argument):
    if marker is not None and marker.get("kind") not in kinds:
        raise FileExistsError(
            f"{path!r} ({argument}) holds a bert_keras {marker.get('kind')!r} output, not a {kind!r} directory; "
            "it is not reused for this. Pick another directory."
        )


def _create_marked(path, marker):
    """Creates directory `path` holding only `marker`, in one step; False when `path` appeared meanwhile.

    Processes that claim one directory at once (the workers of a cluster and
    their shared backup) never see it without its marker, so none takes it for
    a user's directory, and the marker says truly whether the package made it.
    """
    parent, name = os.path.split(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".claim-{name}-", dir=parent)
    try:
        os.chmod(staging, 0o777 & ~_umask())
        write_json_atomically(os.path.join(staging, MARKER), marker)
        try:
            os.rename(staging, path)  # onto nothing, or onto an empty directory made this instant
        except OSError as error:
            if error.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                return False
            raise
        return True
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone after the rename


def _claim_marker(directory, marker):
    """Writes `marker` into an existing `directory` in one rename, staged beside it, never as a visible partial file."""
    parent, name = os.path.split(os.path.abspath(directory))
    staged = os.path.join(parent, f".{name}.marker-{os.getpid()}-{threading.get_ident()}")
    try:
        write_json_atomically(staged, marker)
        os.replace(staged, os.path.join(directory, MARKER))
    except OSError as error:
        with contextlib.suppress(OSError):
            os.remove(staged)
        if error.errno != errno.EXDEV:  # `directory` is a mount point: stage inside it
            raise
        write_json_atomically(os.path.join(directory, MARKER), marker)


def directory_under(root, *names, kind=None, argument="directory"):
    """`root/NAME/...`: the one way the package opens a directory inside a tree it writes; refuses any other.

    Every writer under a backup or a staged output goes through here (a
    backup's phase folders, a snapshot's parent, a module pair's `encoder/`).
    `root` and every existing level below it must be a real directory (not a
    link) carrying the package's marker (of `kind`, when given); a missing
    level is made now: with `kind`, holding a marker of that kind from the
    start (`_create_marked`), so that a later run finds it as the package's;
    without, plain (a folder of a staged output, whose marker is the output's).

    Returns:
        The path of the last level.

    Raises:
        FileExistsError: `root` or a level is a link (wherever it points), not
            a directory, or a directory bert_keras did not mark.
    """
    path = _bare(root)
    _check_level(path, None, argument)
    for name in names:
        path = os.path.join(path, name)
        if not os.path.lexists(path):
            if kind is None:
                with contextlib.suppress(FileExistsError):  # appeared meanwhile: judged below
                    os.mkdir(path)
                    continue
            elif _create_marked(path, {"writer": "bert_keras", "kind": kind, "complete": False, "made": True}):
                continue
        _check_level(path, kind, argument)
    return path


def _check_level(path, kind, argument):
    """Refuses `path` unless it is a real directory carrying the package's marker (of `kind`, when given)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise FileExistsError(_refusal(path, argument, "is a symbolic link; bert_keras writes through no link it did not "
                                       "create, wherever it points"))
    marker = _marker_of(path)
    if info is None or not stat.S_ISDIR(info.st_mode) or marker is None or kind not in (None, marker.get("kind")):
        raise FileExistsError(_refusal(path, argument, "is not a directory bert_keras made there (it carries no marker"
                                       f"{' of a ' + repr(kind) if kind else ''}); it writes into none it did not create "
                                       "in this run or mark earlier"))


def _refusal(path, argument, reason):
    return (f"{path!r} (in the {argument}) {reason}. It was left as it is; remove it (or the whole {argument}, to start "
            "over) and rerun.")


def _check_staged(staging, made, target):
    """Refuses to put `staging` in place unless it is still the directory made for it, holding no link anywhere."""
    now = os.lstat(staging)
    if (now.st_dev, now.st_ino) != (made.st_dev, made.st_ino) or not stat.S_ISDIR(now.st_mode):
        raise FileExistsError(f"{staging!r} was replaced while bert_keras wrote {target!r} into it; nothing was put in "
                              f"place and {target!r} was left as it was.")
    for directory, folders, files in os.walk(staging):  # follows no link
        for name in folders + files:
            if os.path.islink(os.path.join(directory, name)):
                raise FileExistsError(
                    f"{os.path.join(directory, name)!r} is a symbolic link that appeared while bert_keras wrote {target!r}; "
                    f"it writes through no link it did not create, so {target!r} was left as it was."
                )


@contextlib.contextmanager
def staged_directory(target, overwrite=False, kind="output", info=None, argument="export_dir", within=None):
    """Yields an empty directory next to `target`; on success it replaces `target` in one step.

    Args:
        target: str. The output directory.
        overwrite: bool. Replace an existing output of this package. Defaults to `False`.
        kind: str. Recorded in the marker (e.g. `"encoder"`, `"module_pair"`).
        info: optional dict, also recorded in the marker.
        argument: str. How the caller names `target` in error messages.
        within: optional str. `target`'s parent when it is a directory of the
            package (a backup's phase folder, from `directory_under`): it must
            still be a real, marked directory when the lock file and the
            staging directory are made in it.

    Raises:
        FileExistsError, ValueError: from `check_target`, before anything is written.
        OutputLockedError: another process writes `target`.
        OSError: the disk is full (`ENOSPC`); `target` is left as it was.

    On any exception the staged directory is removed and `target` is left as it was.
    """
    target = os.fspath(target)
    check_target(target, overwrite, argument, kind=kind)
    parent, name = os.path.split(os.path.abspath(target))
    if within is not None and os.path.abspath(within) != parent:
        raise ValueError(f"{target!r} ({argument}) is not directly inside {within!r}.")
    if within is not None:
        directory_under(within, argument=argument)  # before the lock file is made in it
    with output_lock(target):
        _recover(parent, name, target)
        check_target(target, overwrite, argument, kind=kind)  # again, under the lock
        if within is not None:
            directory_under(within, argument=argument)
        staging = tempfile.mkdtemp(prefix=f".partial-{name}-", dir=parent)
        made = os.lstat(staging)
        os.chmod(staging, 0o777 & ~_umask())
        try:
            try:
                write_json_atomically(os.path.join(staging, MARKER), {"writer": "bert_keras", "kind": _STAGING_KIND, "complete": False})
                yield staging
                _check_staged(staging, made, target)
                _write_marker(staging, kind, info)
            except tf.errors.ResourceExhaustedError as error:
                raise OSError(errno.ENOSPC, f"No space left while writing {target!r}; it was left as it was ({error.message})") from None
            except tf.errors.OutOfRangeError as error:
                if "too large" not in error.message.lower():
                    raise
                raise OSError(errno.EFBIG, _file_too_large(target)) from None
            except OSError as error:
                if error.errno == errno.ENOSPC:
                    raise OSError(errno.ENOSPC, f"No space left on the device while writing {target!r}; it was left as it was.") from None
                if error.errno == errno.EFBIG:
                    raise OSError(errno.EFBIG, _file_too_large(target)) from None
                raise
            fault_point(f"before-replace:{name}")
            _replace(staging, target, parent, name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _file_too_large(target):
    return (f"A file grew past this process's file-size limit (`ulimit -f`) or the file system's while writing "
            f"{target!r}; it was left as it was. Raise the limit or write to another file system.")

