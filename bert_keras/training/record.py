"""A backed-up run's record (`run.json`): what the run trains and the files it starts from.

The record is checked before any work and written when training starts
(`Harness.fit`, through `RunRecord.write`), so that:

- a run refused or failed before it trained leaves no record (and, as
  `backup.held_backup` removes a backup with no trained epoch, no backup);
- a record beside no trained epoch (a run killed before its first epoch
  ended) never blocks a run: it is replaced, saying so;
- a backup with trained epochs is resumed only by the run that made it: the
  same arguments and data (`run`), and the same files to start from
  (`source_files`: the size and SHA-256 of each weight, configuration and
  vocabulary file of the checkpoint folder or modules). A checkpoint rebuilt
  at the same path is refused, naming the file that changed: the backup's
  epochs were trained from the old files, and a backup may hold hours of
  training that the package does not throw away on its own judgment.
"""

import hashlib
import json
import logging
import os
import re
import stat

from bert_keras._files import write_json_atomically
from bert_keras.training.backup import RUN_FILE, holds_trained_state

logger = logging.getLogger(__name__)

SOURCE_FILES = "source_files"  # the record's entry of the fingerprinted files: {path: {"bytes": n, "sha256": hex}}

# The files that decide what a run starts from: weights (Hugging Face, PyTorch, Keras, Flax, TensorFlow checkpoints
# and a SavedModel's variables/), configuration and vocabulary. Not a module's graph (saved_model.pb, written anew by
# every conversion of the same weights), documentation, code, nor hidden files (markers, locks, caches).
_SOURCE_FILE = re.compile(r"checkpoint|.+\.(safetensors|bin|h5|msgpack|npz|pt|pth|ckpt|index|json|txt|model|vocab)"
                          r"|.+\.data-\d+-of-\d+")
# Folders walked below a source: a module pair's `encoder/variables/`, a keras-nlp preset's `assets/tokenizer/`.
_SOURCE_DEPTH = 3


def source_files(sources):
    """`{path: {"bytes": n, "sha256": hex}}` of the files a run starts from (see `_SOURCE_FILE`).

    Args:
        sources: paths as the run was given them: checkpoint folders, module
            directories or archives, a TensorFlow checkpoint prefix (the files
            it names), or handles that are no local path (none).

    Each file is read in fixed-size pieces (memory stays flat whatever its
    size); a link to a file is followed, a linked folder is not walked, and
    what is not a regular file (a FIFO) is never opened for reading.
    """
    found = {path: _fingerprint(path) for source in sources for path in _source_paths(os.fspath(source))}
    return {path: entry for path, entry in found.items() if entry is not None}


def _source_paths(source):
    if os.path.isfile(source):  # a module's archive
        return [source]
    if os.path.isdir(source):
        return _listed(source, _SOURCE_DEPTH)
    folder, prefix = os.path.split(source)  # a TensorFlow checkpoint's prefix: `bert_model.ckpt.index`, `.data-*`
    folder = folder or os.curdir
    if not os.path.isdir(folder):  # a URL, or nothing
        return []
    return [os.path.join(folder, name) for name in sorted(os.listdir(folder))
            if name.startswith(prefix + ".") and _SOURCE_FILE.fullmatch(name)]


def _listed(root, depth):
    found = []
    for directory, folders, names in os.walk(root):  # a linked folder is listed, never walked
        level = 0 if directory == root else os.path.relpath(directory, root).count(os.sep) + 1
        folders[:] = sorted(f for f in folders if level < depth and not f.startswith(".") and f != "__pycache__")
        found += [os.path.join(directory, name) for name in sorted(names)
                  if not name.startswith(".") and _SOURCE_FILE.fullmatch(name)]
    return found


def _fingerprint(path):
    """The size and SHA-256 of the file at `path`; None for what is not a regular file (no checkpoint's file)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        # O_NONBLOCK: a FIFO put in the file's place since the stat does not block the open either.
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None
            digest = hashlib.file_digest(f, "sha256")  # in fixed-size pieces
    except OSError as error:
        return {"kind": f"unreadable ({type(error).__name__})"}
    return {"bytes": info.st_size, "sha256": digest.hexdigest()}


def _described(entry):
    if entry is None:
        return "absent"
    if "sha256" not in entry:
        return entry.get("kind", "unknown")
    return f"{entry['bytes']:,} bytes, SHA-256 {entry['sha256'][:12]}"


def _shown(value, limit=80):
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class RunRecord:
    """What a backed-up run trains: checked against the backup's `run.json` at once, written when training starts.

    Args:
        backup_dir: str. The backup, held (`backup.held_backup`).
        run: flat JSON dict of what the run trains (source, arguments,
            fingerprints of the data).
        sources: paths whose files the run starts from (`source_files`). When
            the backup is resumed they are checked at once, before anything is
            built; for a new run they are fingerprinted when training starts,
            once the model was built from them.
        report: callable taking one line. Defaults to the module logger's `info`.

    Attributes:
        resuming: bool. Whether the backup holds trained epochs of this run.

    Raises:
        ValueError: the backup's trained epochs are another run's (other
            arguments, data or files), or nothing tells whose they are.
    """

    def __init__(self, backup_dir, run, sources=(), report=None):
        self.backup_dir, self.run, self.sources = backup_dir, dict(run), tuple(sources)
        self._path = os.path.join(backup_dir, RUN_FILE)
        self._report = report or logger.info
        self._files = None
        self._written = False
        recorded = self._recorded()
        self.resuming = recorded is not None
        if recorded is not None:
            self._check_files(recorded.get(SOURCE_FILES))

    def _recorded(self):
        """The backup's record when it holds trained epochs (checked against this run's), else None."""
        if not holds_trained_state(self.backup_dir):
            if os.path.lexists(self._path):
                self._report(f"The backup in {self.backup_dir} holds no trained epoch, only the record of a run stopped "
                             "before its first epoch ended: this run starts over and replaces it.")
            return None
        if not os.path.lexists(self._path):
            raise ValueError(f"The backup in {self.backup_dir} holds trained epochs but no run record ({RUN_FILE}): "
                             "nothing tells which run trained them. Remove that directory to start over.")
        try:
            with open(self._path) as f:
                recorded = json.load(f)
            if not isinstance(recorded, dict):
                raise ValueError(f"it holds a {type(recorded).__name__}, not a run record")
        except (OSError, ValueError, RecursionError) as error:  # RecursionError: JSON nested too deep
            raise ValueError(f"The backup in {self.backup_dir} cannot be read ({self._path}: {error}). Remove that "
                             "directory to start over.") from None
        keys = (set(self.run) | set(recorded)) - {SOURCE_FILES}
        differing = sorted(key for key in keys if _shown(self.run.get(key), 10**9) != _shown(recorded.get(key), 10**9))
        if differing:
            raise ValueError(
                f"The backup in {self.backup_dir} was made by a run with other {', '.join(differing)} (recorded: "
                + ", ".join(f"{key}={_shown(recorded.get(key))}" for key in differing)
                + "); resuming it would mix two runs. Rerun with the same arguments to resume it, or remove that "
                "directory to start over."
            )
        return recorded

    def _check_files(self, recorded):
        if not isinstance(recorded, dict):
            self._report(f"The backup in {self.backup_dir} records no fingerprint of the files it began from (an earlier "
                         "version made it): resuming without checking them.")
            return
        self._files = source_files(self.sources)
        changed = sorted(path for path in set(recorded) | set(self._files) if recorded.get(path) != self._files.get(path))
        if changed:
            first, others = changed[0], len(changed) - 1
            raise ValueError(
                f"The backup in {self.backup_dir} began from other files: {first} was {_described(recorded.get(first))}, "
                f"now {_described(self._files.get(first))}"
                + (f" (and {others} other file{'s' if others > 1 else ''}: {', '.join(changed[1:4])}"
                   + (", ..." if others > 3 else "") + ")" if others else "")
                + ". Resuming it would go on from epochs trained on the old files as if they came from these. Put those "
                f"files back to resume it, or remove {self.backup_dir} to start over from these."
            )

    def write(self):
        """Writes the record, with the fingerprint of the files the run starts from: training starts (once)."""
        if self._written:
            return
        if self._files is None:
            self._files = source_files(self.sources)
        write_json_atomically(self._path, dict(self.run, **{SOURCE_FILES: self._files}))
        self._written = True
