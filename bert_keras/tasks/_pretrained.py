"""Pretrained weights under any task: the encoder and preprocessor of a checkpoint or module pair, and its task head."""

import collections.abc
import logging
import os

from bert_keras import hub
from bert_keras._checks import check_int
from bert_keras._task import Task
from bert_keras.checkpoints import holds_weights, load_checkpoint
from bert_keras.formats.hub_module import read_module_pair
from bert_keras.formats import tables
from bert_keras.heads import ClassificationHead
from bert_keras.text import BertPreprocessor

# The task family's one logger (users filter on it), whichever of its modules speaks.
logger = logging.getLogger("bert_keras.tasks")


def _module_pair(path):
    """`(encoder_dir, preprocess_dir)` when `path` holds a Hub module pair (and no weights checkpoint), else None.

    A folder that also holds a checkpoint of weights is read as weights: loading the modules would run their
    graphs, which reading weights never does (`checkpoints.detect_format`).
    """
    if holds_weights(path):
        return None
    pair = read_module_pair(path)
    if pair is not None:
        return pair
    encoder_dir, preprocess_dir = os.path.join(path, "encoder"), os.path.join(path, "preprocess")
    if all(os.path.isfile(os.path.join(d, "saved_model.pb")) for d in (encoder_dir, preprocess_dir)):
        return encoder_dir, preprocess_dir
    return None


def _module_max_length(encoder_layer):
    """Rows of a Hub encoder's learned position table (ours and Model Garden's name it so), or None."""
    for variable in encoder_layer.resolved_object.variables:
        if "position" in variable.name and len(variable.shape) == 2:
            return int(variable.shape[0])
    return None


def load_encoder_and_preprocessor(path, seq_length=128, trainable=True):
    """A pretrained encoder and the preprocessor of its vocabulary, from a checkpoint or a module pair.

    Args:
        path: str. A folder `bert_keras.checkpoints.load_checkpoint` reads
            (Hugging Face, Google BERT, keras-nlp), or a directory with
            `encoder/` and `preprocess/` Hub modules (from `bert-keras convert`);
            or a tuple of two Hub handles `(encoder, preprocess)` (paths or URLs).
        seq_length: int. Length the preprocessor packs to; at most the
            encoder's `max_sequence_length`. Defaults to `128`.
        trainable: bool. Whether the encoder starts trainable. Defaults to `True`.

    Returns:
        `(encoder, preprocessor)`: a `BertEncoder` and a `BertPreprocessor`,
        or, for a module pair, a `hub.KerasLayer` and a `hub.PreprocessLayer`.
    """
    return _load_pretrained(path, seq_length, trainable, with_heads=False)[:2]


def _load_pretrained(path, seq_length, trainable, with_heads):
    """`(encoder, preprocessor, loaded)`: `loaded` is the `LoadedCheckpoint` (heads: `with_heads`), None for modules."""
    check_int("seq_length", seq_length, minimum=3)
    if isinstance(path, (tuple, list)):
        pair = tuple(path)
        if len(pair) != 2:
            raise ValueError(
                "Received an invalid value for argument `path`, expected a checkpoint path or a pair of Hub "
                f"handles (encoder, preprocess). Received: path={path!r}"
            )
    else:
        path = os.fspath(path)
        pair = _module_pair(path) if os.path.isdir(path) else None
    if pair is not None:
        encoder_dir, preprocess_dir = pair
        encoder = hub.KerasLayer(encoder_dir, trainable=trainable, name="encoder")
        max_length = _module_max_length(encoder)
        if max_length is not None and seq_length > max_length:
            raise ValueError(
                f"Received an invalid value for argument `seq_length`, expected at most the encoder module's "
                f"{max_length} positions. Received: seq_length={seq_length}"
            )
        return encoder, hub.PreprocessLayer(preprocess_dir, seq_length=seq_length, name="preprocessor"), None
    loaded = load_checkpoint(path, with_heads=with_heads)
    tokenizer = loaded.tokenizer(path)  # the family's: WordPiece, ALBERT's SentencePiece or RoBERTa's BPE
    max_length = loaded.encoder.max_sequence_length
    if seq_length > max_length:
        raise ValueError(
            f"Received an invalid value for argument `seq_length`, expected at most the checkpoint's "
            f"max_sequence_length={max_length}. Received: seq_length={seq_length}"
        )
    loaded.encoder.trainable = trainable
    preprocessor = BertPreprocessor(tokenizer=tokenizer, seq_length=seq_length, name="preprocessor")
    return loaded.encoder, preprocessor, loaded


class _PretrainedTask(Task):
    # The head of this task in a checkpoint fine-tuned elsewhere (`bert_keras.formats.tables`), and our attribute.
    _checkpoint_head = _head_attribute = None

    @classmethod
    def from_checkpoint(cls, path, *, seq_length=128, **kwargs):
        """Builds this task on pretrained weights, taking raw strings (see `load_encoder_and_preprocessor`).

        A Hugging Face checkpoint of this task (`BertForSequenceClassification`
        for `BertClassifier`, `BertForTokenClassification` for
        `BertTokenClassifier`, `BertForQuestionAnswering` for
        `BertSpanLabeler`) brings its head, its number of classes and its
        labels (config.json's `id2label`). One with another task's head gives
        its encoder and a new, random head, as transformers does, and a
        warning naming the head left unused (logger `bert_keras.tasks`).

        Args:
            path: str. A checkpoint folder or a Hub module pair directory.
            seq_length: int. Length the preprocessor packs to. Defaults to `128`.
            **kwargs: the task's own arguments (e.g. `num_classes=3`). With the
                checkpoint's head, `num_classes` is the head's (another number
                is refused); `label_names` default to the checkpoint's (names
                of your own rename the outputs; its names in another order are
                refused).
        """
        heads = [cls._checkpoint_head] if cls._checkpoint_head else False
        encoder, preprocessor, loaded = _load_pretrained(path, seq_length, True, with_heads=heads)
        head = loaded.heads.get(cls._checkpoint_head) if loaded is not None else None
        if head is None:
            _warn_unused_task_head(cls, path, loaded)
            return cls(encoder, preprocessor=preprocessor, **kwargs)
        if isinstance(head, ClassificationHead):
            kwargs = _classifier_kwargs(cls, path, head.num_classes, loaded.label_names, kwargs)
        task = cls(encoder, preprocessor=preprocessor, **kwargs)
        getattr(task, cls._head_attribute).set_weights(head.get_weights())
        return task

    @classmethod
    def from_preset(cls, name, **kwargs):
        """Refuses, with directions: keras-hub's name, but bert_keras downloads nothing and its presets hold no weights."""
        raise ValueError(
            f"{cls.__name__}.from_preset({name!r}): bert_keras reads pretrained weights from a local folder: use "
            f"{cls.__name__}.from_checkpoint(path, ...) with a Hugging Face, Google BERT or keras-nlp checkpoint folder, "
            "or a module pair from `bert-keras convert` (the installed MiniLM: the folder of "
            "bert_keras.text.corpora.minilm_vocab_path()). Its presets are architectures without weights: "
            f"{cls.__name__}(BertEncoder.from_architecture(name), ...)."
        )


def _classifier_kwargs(cls, path, num_classes, label_names, kwargs):
    """`kwargs` with the checkpoint head's `num_classes` and `label_names`; a `num_classes` that disagrees refused."""
    kwargs = dict(kwargs)
    if kwargs.get("num_classes", num_classes) != num_classes:
        raise ValueError(
            f"Received an invalid value for argument `num_classes`, expected the {num_classes} classes of the head "
            f"in the checkpoint {path!r} ({', '.join(label_names)}). Received: num_classes={kwargs['num_classes']}. "
            f"Omit num_classes to use that head; for a new head of {kwargs['num_classes']} classes, build "
            f"{cls.__name__} on the encoder alone (`load_encoder_and_preprocessor(path)`)."
        )
    given = _check_label_names(kwargs.get("label_names"), num_classes)
    if given is not None and given != label_names and sorted(given) == sorted(label_names):  # the outputs misnamed
        raise ValueError(f"Received an invalid value for argument `label_names`, expected the checkpoint's classes in "
                         f"the order of its head's outputs: {label_names}. Received: label_names={given!r}")
    kwargs.update(num_classes=num_classes, label_names=given or label_names)
    return kwargs


def _warn_unused_task_head(cls, path, loaded):
    """Logs that a checkpoint's task head (another task's, or of no named architecture) was not used."""
    if loaded is not None and loaded.unused_task_head:
        ours = [name for name, part in tables.HF_TASK_ARCHITECTURES.items() if part == cls._checkpoint_head]
        logger.warning("%s holds a task head for %s (%s), not one of %s: %s.from_checkpoint loads its encoder only, "
                       "with a new, randomly initialized head (as transformers does); train it before use.",
                       path, ", ".join(loaded.architectures) or "an unnamed model class (config.json lists no architectures)",
                       ", ".join(loaded.unused_task_head), ours[0], cls.__name__)


def _check_label_names(label_names, num_classes):
    """`label_names` as a list of `num_classes` distinct str, or None."""
    if label_names is None:
        return None
    if isinstance(label_names, str) or not isinstance(label_names, collections.abc.Sequence):
        raise ValueError(f"Received an invalid value for argument `label_names`, expected a list of {num_classes} "
                         f"str. Received: label_names={label_names!r}")
    names = [str(name) for name in label_names]
    if len(names) != num_classes or len(set(names)) != len(names):
        raise ValueError(f"Received an invalid value for argument `label_names`, expected {num_classes} distinct "
                         f"names (num_classes={num_classes}). Received: label_names={label_names!r}")
    return names
