"""Pretrained weights under any task: the encoder and preprocessor of a checkpoint or module pair, and its task head."""

import collections.abc
import logging

from bert_keras.tasks._task import Task
from bert_keras.checkpoints import load_pretrained
from bert_keras.formats import tables
from bert_keras.heads import ClassificationHead
from bert_keras.text.folders import model_max_length
from bert_keras.text.preprocessor import BertPreprocessor

# The task family's one logger (users filter on it), whichever of its modules speaks.
logger = logging.getLogger("bert_keras.tasks")
# The heads that answer per token: read from a checkpoint, they serve its whole length in one window by default,
# as transformers' pipelines do (a classifier reads the first token: 128 is enough and faster).
_FULL_LENGTH_HEADS = (tables.TOKEN_CLASSIFIER, tables.SPAN)


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
    pretrained = _load_pretrained(path, seq_length, trainable, with_heads=False)
    return pretrained.encoder, pretrained.preprocessor


def _load_pretrained(path, seq_length, trainable, with_heads):
    """`checkpoints.load_pretrained` as the tasks read a folder: a module pair kept as its Hub layers."""
    pretrained = load_pretrained(path, seq_length=seq_length, with_heads=with_heads, module_pair_layers=True)
    pretrained.encoder.trainable = trainable
    return pretrained


class _PretrainedTask(Task):
    # The head of this task in a checkpoint fine-tuned elsewhere (`bert_keras.formats.tables`), and our attribute.
    _checkpoint_head = _head_attribute = None

    @classmethod
    def from_checkpoint(cls, path, *, seq_length=None, **kwargs):
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
            seq_length: optional int. Length the preprocessor packs to, at most
                the encoder's `max_sequence_length`. Defaults to the
                checkpoint's own maximum for a token-classification or
                question-answering head read from it (`tokenizer_config.json`'s
                `model_max_length` where it is an integer no longer than the
                encoder's positions, else those positions), as transformers'
                pipelines serve it; else to `128`, or the encoder's positions
                where fewer.
            **kwargs: the task's own arguments (e.g. `num_classes=3`). With the
                checkpoint's head, `num_classes` is the head's (another number
                is refused); `label_names` default to the checkpoint's (names
                of your own rename the outputs; its names in another order are
                refused).
        """
        heads = [cls._checkpoint_head] if cls._checkpoint_head else False
        pretrained = _load_pretrained(path, seq_length, True, with_heads=heads)
        encoder, preprocessor, loaded = pretrained.encoder, pretrained.preprocessor, pretrained.loaded
        head = loaded.heads.get(cls._checkpoint_head) if loaded is not None else None
        # (No preprocessor where the family's tokenizer is not read yet, DeBERTa-v3's: the task then takes ids.)
        if (seq_length is None and head is not None and cls._checkpoint_head in _FULL_LENGTH_HEADS
                and preprocessor is not None):
            preprocessor = _full_length_preprocessor(pretrained)
        if head is None:
            _warn_unused_task_head(cls, path, loaded)
            return cls(encoder, preprocessor=preprocessor, **kwargs)
        if isinstance(head, ClassificationHead):
            kwargs = _classifier_kwargs(cls, path, head.num_classes, loaded.label_names, kwargs)
        if getattr(head, "transform", None) is not None:  # ModernBERT's `head` before its output layer
            kwargs["head_transform"] = head.transform.options()
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


def _full_length_preprocessor(pretrained):
    """The checkpoint's preprocessor at its own maximum length (`text.folders.model_max_length`)."""
    length = model_max_length(pretrained.tokenizer_folder, pretrained.encoder.max_sequence_length)
    if length == pretrained.preprocessor.seq_length:
        return pretrained.preprocessor
    return BertPreprocessor(tokenizer=pretrained.tokenizer, seq_length=length, name="preprocessor")


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
                       ", ".join(loaded.unused_task_head), ", ".join(ours), cls.__name__)  # the family's, every one


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
