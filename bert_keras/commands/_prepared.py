"""`predict --model FOLDER` on a fine-tuned transformers folder: prepared once as the package's own export, cached.

A folder transformers saved (config.json naming a `*ForSequenceClassification`, `*ForTokenClassification` or
`*ForQuestionAnswering` class, its weights, its tokenizer files) is read by the package's importers
(`from_checkpoint`: the head and config.json's `id2label`), exported by `export_classifier`, `export_tagger` or
`export_reader` into a cache entry, and served from there as any export, through `predict`'s one sequence. The entry
is keyed by the folder's files (config.json and the tokenizer's by content, the weights by size and modification
time): a folder changed since is prepared again, and the entry of its earlier files removed.

What `pipeline(model=FOLDER)` does by default, the export does: a classifier answers the softmax of its logits over
the folder's whole length (`tokenizer_config.json`'s `model_max_length`, else the encoder's positions); a tagger's
default aggregation is `"none"` (one entity per piece, "O" left out), its windows as long. Where they differ: a text
longer than that length is cut by the classifier (the pipeline fails on it), and tagged whole by the tagger, in
overlapping windows (the pipeline, without `stride=`, tags its first window only).

The cache, `$XDG_CACHE_HOME/bert_keras/prepared` (`~/.cache/bert_keras/prepared`), is made private (0700) and
refused when another user owns it or may write to it: its SavedModels run when they load.

Nothing here imports TensorFlow at module level: the folder's kind and its entry are found before it loads.
"""

import hashlib
import json
import os
import stat
import sys

from bert_keras.commands._common import OUTPUT_MARKER, working
from bert_keras.commands._io import InputError
from bert_keras.export.manifest import CLASSIFIER, READER, TAGGER, ExportError, export_kind

CONFIG_FILE = "config.json"
# transformers' task classes end with the task they answer: `BertForTokenClassification` -> a tagger.
TASK_SUFFIXES = {"ForSequenceClassification": CLASSIFIER, "ForTokenClassification": TAGGER,
                 "ForQuestionAnswering": READER}
# Files keyed by their size and modification time (weights: large); every other file of the folder by its content.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".h5", ".msgpack", ".pt", ".pth", ".ckpt", ".onnx")
# A file larger than this is keyed by size and time whatever its name (it is no config or tokenizer file).
_CONTENT_LIMIT = 64 << 20
# What a cache entry is made of, besides the folder's files: a new way of preparing makes new entries.
PREPARED_FORMAT = 1
# In an entry's assets.extra/: the folder it was prepared from (and its labels), so that a newer entry replaces it.
ORIGIN_FILE = "prepared_from.json"


def is_transformers_folder(path):
    """Whether `path` is a folder holding config.json and no SavedModel (an export of ours holds one)."""
    return (os.path.isdir(path) and os.path.isfile(os.path.join(path, CONFIG_FILE))
            and not any(os.path.exists(os.path.join(path, name)) for name in ("saved_model.pb", "saved_model.pbtxt")))


class PreparedFolder:
    """A transformers folder given to `predict --model`: its kind, read from config.json, and its cache entry.

    Args:
        folder: str. The folder.

    Raises:
        InputError: config.json cannot be read, or names no task class served here (the message says which are).
    """

    def __init__(self, folder):
        self.folder = folder
        config = _read_config(folder)
        architectures = config.get("architectures")
        names = [a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else []
        found = [(name, kind) for name in names for suffix, kind in TASK_SUFFIXES.items() if name.endswith(suffix)]
        if not found:
            raise InputError(unsupported(folder, ", ".join(names) or "no model class (no \"architectures\")"))
        self.architecture, self.kind = found[0]
        if self.kind == CLASSIFIER:
            _check_single_label(folder, config, self.architecture)
        try:
            self.entry = os.path.join(cache_root(create=False), folder_key(folder))
        except OSError as error:
            raise InputError(f"cannot read {folder}: {error}") from None

    def cached(self):
        """Whether the entry holds a finished export of this folder's kind."""
        try:
            return _is_finished(self.entry) and export_kind(self.entry) == self.kind
        except ExportError:
            return False

    def path(self):
        """The entry to serve: found, or prepared now (TensorFlow); says which on standard error."""
        try:
            root = cache_root()
        except OSError as error:
            raise InputError(f"cannot make the cache of prepared folders: {error}") from None
        check_private(root, "the cache of prepared folders")
        if self.cached():
            _tell(f"serving {self.folder} as prepared earlier, from {self.entry}")
            return self.entry
        _tell(f"preparing {self.folder} ({self.architecture}) once: reading it and exporting a {self.kind} to "
              f"{self.entry}")
        with working("predict", f"preparing {self.folder}"):
            try:
                prepare(self.folder, self.kind, self.entry)
            except FileExistsError:  # another run prepared it meanwhile: its export is as good
                if not self.cached():
                    raise InputError(f"cannot prepare {self.folder} in {self.entry}: it holds something else; "
                                     "remove it and run again.") from None
            except (OSError, ValueError) as error:
                raise InputError(f"cannot prepare {self.folder} in {self.entry}: {error}") from None
        removed = remove_earlier(self.folder, self.entry)
        _tell(f"prepared; later runs on {self.folder} reuse {self.entry} until its files change"
              + (f" (removed {removed} entry(ies) of its earlier files)" if removed else ""))
        return self.entry


def unsupported(folder, names):
    """The refusal of a folder whose model class `names` is not one `predict` serves."""
    return (f"{folder}: config.json names {names}, which bert-keras predict does not serve. It serves a fine-tuned "
            "transformers folder whose task head the package reads: " + ", ".join(supported_architectures())
            + "; or an export of bert_keras (bert-keras finetune, export_classifier, export_tagger, export_reader), "
            "or a .tflite file.")


def supported_architectures():
    """The task classes whose heads the package's readers read (`formats.tables` and the families' own tables)."""
    from bert_keras.formats import deberta, tables  # TensorFlow: loaded only to say what is supported

    return [*tables.HF_TASK_ARCHITECTURES, *deberta.TASK_ARCHITECTURES]


def _read_config(folder):
    path = os.path.join(folder, CONFIG_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError, RecursionError) as error:
        raise InputError(f"cannot read {path}: {error}") from None
    if not isinstance(config, dict):
        raise InputError(f"{path} holds no JSON object; it is not a transformers model's config.")
    return config


def _check_single_label(folder, config, architecture):
    """Refuses a classifier that the pipeline does not answer by a softmax: multi-label, regression, one output."""
    labels = config.get("id2label")
    problem = config.get("problem_type")
    if problem in ("multi_label_classification", "regression") or (isinstance(labels, dict) and len(labels) == 1):
        what = f"problem_type {problem!r}" if problem else "a single output (id2label has one name)"
        raise InputError(f"{folder}: config.json's {architecture} has {what}, which transformers' pipeline answers "
                         "by a sigmoid or the raw logit; bert-keras predict serves single-label classifiers (a softmax "
                         "over two or more labels).")


def cache_root(create=True):
    """`$XDG_CACHE_HOME/bert_keras/prepared` (`~/.cache/bert_keras/prepared`); made private (0700) with `create`."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base or not os.path.isabs(base):  # the XDG specification: a relative path is ignored
        base = os.path.join(os.path.expanduser("~"), ".cache")
    root = os.path.join(base, "bert_keras", "prepared")
    if create and not os.path.isdir(root):
        os.makedirs(root, mode=0o700, exist_ok=True)
        os.chmod(root, 0o700)
    return root


def check_private(path, what):
    """Refuses `path` (an `InputError`) unless it is a real directory of this user that no one else may write."""
    info = os.lstat(path)
    problem = None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        problem = "it is not a directory (a link, or a file)"
    elif info.st_uid != os.geteuid():
        problem = f"it is owned by uid {info.st_uid}, not by the current user (uid {os.geteuid()})"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"its mode {stat.filemode(info.st_mode)} lets group or others write to it"
    if problem:
        raise InputError(f"refusing {what} {path}: {problem}, so someone else could put a model of their own there, "
                         "which would run when it loads. Fix its owner and mode (chmod 700), or set XDG_CACHE_HOME to "
                         "a directory only you can write.")


def folder_key(folder):
    """A digest of the folder's files: config and tokenizer files by content, weights by size and modification time.

    The folder's own files count (not its subfolders: a trainer's `checkpoint-500/`), hidden files and `.md` files
    aside; a link is followed (a Hugging Face cache's snapshot links to its blobs).
    """
    digest = hashlib.sha256(f"bert_keras prepared folder {PREPARED_FORMAT} {_package_version()}\n".encode())
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith(".") or name.endswith(".md") or not os.path.isfile(path):
            continue
        info = os.stat(path)
        digest.update(f"{name}\0{info.st_size}\0".encode())
        if name.endswith(WEIGHT_SUFFIXES) or info.st_size > _CONTENT_LIMIT:
            digest.update(f"{info.st_mtime_ns}\n".encode())
            continue
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:32]


def _package_version():
    import importlib.metadata

    try:
        return importlib.metadata.version("bert_keras")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _is_finished(entry):
    """Whether `entry` is a directory holding a complete marker of the package (read as data, no TensorFlow)."""
    path = os.path.join(entry, OUTPUT_MARKER)
    if os.path.islink(entry) or not os.path.isdir(entry) or os.path.islink(path):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            marker = json.load(f)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(marker, dict) and marker.get("writer") == "bert_keras" and marker.get("complete") is True


def _tell(text):
    print(f"bert-keras predict: {text}", file=sys.stderr, flush=True)


# --- preparing (TensorFlow) ---


def prepare(folder, kind, entry):
    """Reads `folder`'s task model with the package's importer and exports it (of `kind`) to `entry`, staged.

    Raises:
        InputError: the family's head or tokenizer is not read by the package (the message says what is served).
    """
    from bert_keras.export import export_classifier, export_reader, export_tagger  # TensorFlow: after the checks

    task = _task(folder, kind)
    origin = {ORIGIN_FILE: {"folder": os.path.abspath(folder), "label_names": getattr(task, "label_names", None)}}
    if kind == CLASSIFIER:
        export_classifier(task, entry, extra_assets=origin)
    elif kind == TAGGER:
        # transformers' token-classification pipeline: aggregation_strategy "none" by default (an entity per piece).
        export_tagger(task, entry, extra_assets=origin, aggregation="none")
    else:
        export_reader(task, entry, extra_assets=origin)


def _task(folder, kind):
    """The folder's task model, its head and labels read from it; refused where the package does not read them."""
    from bert_keras.formats import read_checkpoint, tables
    from bert_keras.tasks import BertClassifier, BertSpanLabeler, BertTokenClassifier

    part, task_class = {CLASSIFIER: (tables.CLASSIFIER, BertClassifier),
                        TAGGER: (tables.TOKEN_CLASSIFIER, BertTokenClassifier),
                        READER: (tables.SPAN, BertSpanLabeler)}[kind]
    try:
        weights = read_checkpoint(folder, with_heads=[part], allow_modules=False)
        if part not in weights.heads:
            raise InputError(unsupported(folder, ", ".join(weights.architectures) or "no model class"))
        task = task_class.from_checkpoint(folder)
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read {folder} as a transformers task model: {error}") from None
    if task.preprocessor is None:
        raise InputError(f"{folder}: bert_keras does not read this family's tokenizer yet, so it cannot serve raw "
                         "text from it. Serve it with transformers' pipeline.")
    return _full_length(task, folder) if kind == CLASSIFIER else task


def remove_earlier(folder, entry):
    """Removes the cache's other entries prepared from `folder` (of files since changed: never served again).

    Each entry records its folder (`assets.extra/prepared_from.json`); only exports the package wrote go
    (`_files.remove_output`). Returns how many were removed.
    """
    from bert_keras._files import remove_output  # TensorFlow: loaded by the preparing already

    root, source, removed = os.path.dirname(entry), os.path.abspath(folder), 0
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if path == entry or name.startswith(".") or not _is_finished(path):
            continue
        try:
            with open(os.path.join(path, "assets.extra", ORIGIN_FILE), encoding="utf-8") as f:
                origin = json.load(f)
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(origin, dict) and origin.get("folder") == source:
            removed += bool(remove_output(path, (CLASSIFIER, TAGGER, READER)))
    return removed


def _full_length(classifier, folder):
    """`classifier` packing texts to the folder's own maximum length, as the pipeline reads a text (not 128)."""
    from bert_keras.tasks import BertClassifier
    from bert_keras.text import BertPreprocessor
    from bert_keras.text.folders import model_max_length

    length = model_max_length(folder, classifier.encoder.max_sequence_length)
    if length == classifier.preprocessor.seq_length:
        return classifier
    preprocessor = BertPreprocessor(tokenizer=classifier.preprocessor.tokenizer, seq_length=length, name="preprocessor")
    longer = BertClassifier(classifier.encoder, classifier.num_classes, preprocessor=preprocessor,
                            label_names=classifier.label_names)
    longer.classifier_head.set_weights(classifier.classifier_head.get_weights())
    return longer
