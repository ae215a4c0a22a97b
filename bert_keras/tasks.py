"""Task models: an encoder, an optional preprocessor, and a head; pretrained in one line.

Every task takes an encoder — a `BertEncoder`, or a layer with the Hub dict
in and out such as `bert_keras.hub.KerasLayer` — and optionally a
preprocessor — `bert_keras.text.BertPreprocessor` or a Hub preprocess layer
— with which it takes raw strings. The encoder stays reachable as `.encoder`
(freeze it with `task.encoder.trainable = False`). `Task.from_checkpoint(path,
...)` builds the task on pretrained weights with the checkpoint's own
vocabulary and casing: any checkpoint `bert_keras.checkpoints.load_checkpoint`
reads, or a Hub module pair written by `bert-keras convert` (loaded as Hub
layers).
"""

import collections.abc
import logging
import os

import keras
import numpy as np
from keras import ops

from bert_keras import hub
from bert_keras._checks import check_choice, check_int, check_positive_int, check_rate
from bert_keras._task import Task, call_encoder, check_encoder, head_dtype, head_initializer, model_inputs
from bert_keras.checkpoints import holds_weights, load, load_checkpoint, read_hub_module
from bert_keras.encoder import BertEncoder
from bert_keras.export import read_module_pair
from bert_keras.export.classifier import blank_prediction, check_top_k, labelled_predictions
from bert_keras.formats import tables
from bert_keras.heads import ClassificationHead, SpanHead, TokenClassificationHead
from bert_keras.pretrainer import MLM_LOGITS, NSP_LOGITS, BertPretrainer, pretraining_losses, pretraining_metrics
from bert_keras.text import BertPreprocessor

START_LOGITS = "start_logits"
END_LOGITS = "end_logits"
ACTIVATIONS = (None, "softmax")

logger = logging.getLogger(__name__)

__all__ = [
    "BertClassifier",
    "BertPretrainer",
    "BertSpanLabeler",
    "BertTokenClassifier",
    "END_LOGITS",
    "MLM_LOGITS",
    "NSP_LOGITS",
    "START_LOGITS",
    "load_encoder_and_preprocessor",
    "pretraining_losses",
    "pretraining_metrics",
]


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
    if loaded.vocab_file is None:
        raise ValueError(
            f"The checkpoint at {path!r} has no vocabulary (vocab.txt), so no preprocessor can be built "
            "for it. Put the model's vocab.txt next to its weights."
        )
    max_length = loaded.encoder.max_sequence_length
    if seq_length > max_length:
        raise ValueError(
            f"Received an invalid value for argument `seq_length`, expected at most the checkpoint's "
            f"max_sequence_length={max_length}. Received: seq_length={seq_length}"
        )
    loaded.encoder.trainable = trainable
    preprocessor = BertPreprocessor(
        loaded.vocab_file, lower_case=loaded.do_lower_case, seq_length=seq_length, name="preprocessor"
    )
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


@keras.saving.register_keras_serializable(package="bert_keras")
class BertClassifier(_PretrainedTask):
    """Sentence (or sentence-pair) classifier: `ClassificationHead` on the pooled output.

    Args:
        encoder: `BertEncoder` or a layer with the Hub dict in and out (e.g.
            `bert_keras.hub.KerasLayer`). Reachable as `.encoder`.
        num_classes: int. Number of classes.
        preprocessor: optional `BertPreprocessor` or Hub preprocess layer; the
            model then takes raw strings. Defaults to `None` (the Hub input dict).
        activation: `None` (logits) or `"softmax"` (probabilities, computed
            in float32). Defaults to `None`.
        dropout: float. Dropout on the pooled output. Defaults to `0.1`.
        text_pairs: bool. With a preprocessor: two string inputs (`text`,
            `text_pair`) packed as segments A and B. Defaults to `False`.
        label_names: optional list of `num_classes` str, the classes in the
            order of the outputs: `predict_labels` names them and
            `export_classifier` stores them. Saved with the model.
        **kwargs: other `keras.Model` arguments (`name`, ...).

    Call arguments:
        inputs: a `(batch,)` string tensor (a list of two for pairs) with a
            preprocessor; else the dict of int32 `(batch, seq)` tensors
            `input_word_ids`, `input_mask`, `input_type_ids`. `fit`,
            `evaluate`, `predict` and `__call__` take Python lists and numpy
            arrays of str too.

    Returns:
        `(batch, num_classes)` logits (train with
        `SparseCategoricalCrossentropy(from_logits=True)`), or probabilities
        with `activation="softmax"`.

    Example:
    >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
    ...                       num_heads=2, intermediate_size=32)
    >>> classifier = BertClassifier(encoder, num_classes=3)
    >>> ids = np.array([[2, 7, 4, 3]], dtype="int32")
    >>> tuple(classifier({"input_word_ids": ids, "input_mask": np.ones_like(ids),
    ...                   "input_type_ids": np.zeros_like(ids)}).shape)
    (1, 3)
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad"] + [f"w{i}" for i in range(93)]
    >>> texts = BertClassifier(encoder, num_classes=2, activation="softmax",
    ...                        preprocessor=BertPreprocessor(vocab, seq_length=8))
    >>> probabilities = texts(tf.constant(["good", "bad bad"]))
    >>> probabilities.shape, bool(np.allclose(np.sum(probabilities, axis=-1), 1.0))
    (TensorShape([2, 2]), True)
    """

    _own_args = ("num_classes", "activation", "dropout", "text_pairs", "label_names")
    _checkpoint_head, _head_attribute = tables.CLASSIFIER, "classifier_head"

    def __init__(self, encoder, num_classes, preprocessor=None, activation=None, dropout=0.1, text_pairs=False,
                 label_names=None, **kwargs):
        check_encoder(encoder)
        check_positive_int("num_classes", num_classes)
        check_choice("activation", activation, ACTIVATIONS)
        label_names = _check_label_names(label_names, num_classes)
        # === Layers ===
        head = ClassificationHead(
            num_classes=num_classes,
            dropout=check_rate("dropout", dropout),
            kernel_initializer=head_initializer(encoder),
            dtype=head_dtype(encoder),
            name="classifier",
        )
        # === Functional model ===
        inputs, packed = model_inputs(preprocessor, 2 if text_pairs else 1)
        outputs = head(call_encoder(encoder, packed, "pooled_output")["pooled_output"])
        if activation is not None:
            outputs = keras.layers.Activation(activation, dtype="float32", name="probabilities")(outputs)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.classifier_head = head
        self.num_classes = num_classes
        self.activation = activation
        self.dropout = dropout
        self.text_pairs = bool(text_pairs)
        self.label_names = label_names

    def predict_labels(self, texts, *, top_k=None, batch_size=32):
        """Classifies one text or many by name, as `bert_keras.export.load_classifier(...).predict` does.

        Args:
            texts: a str, or a list (or numpy array) of str; for a classifier
                of text pairs, a `(text, text_pair)` tuple or a list of them.
            top_k: optional int. Keep the `top_k` best classes in `scores`,
                best first. By default every class, in `label_names` order.
            batch_size: int. Texts per batch. Defaults to `32`.

        Returns:
            For one text, `{"label": str, "score": float, "scores": {label:
            float}}`; for a list, a list of them. Probabilities (a softmax of
            the logits). The classes are `label_names`, or `"0"`, `"1"`, ...
            when the model has none. A blank text gets `{"label": None,
            "score": None, "scores": {}}`.

        Example:
        >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
        ...                       num_heads=2, intermediate_size=32)
        >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad"] + [f"w{i}" for i in range(93)]
        >>> classifier = BertClassifier(encoder, num_classes=2, preprocessor=BertPreprocessor(vocab, seq_length=8),
        ...                             label_names=["negative", "positive"])
        >>> sorted(classifier.predict_labels("good")["scores"])
        ['negative', 'positive']
        >>> [p["label"] is None for p in classifier.predict_labels(["bad bad", " "])]
        [False, True]
        """
        if self.preprocessor is None:
            raise ValueError("predict_labels takes texts: this classifier has no preprocessor (build it with "
                             "`preprocessor=`, or from_checkpoint).")
        check_top_k(top_k, self.num_classes)
        single = isinstance(texts, str) or (self.text_pairs and isinstance(texts, tuple) and len(texts) == 2
                                            and all(isinstance(t, str) for t in texts))
        rows = [texts] if single else list(texts)
        rows = [tuple(str(t) for t in row) if self.text_pairs else (str(row),) for row in rows]
        kept = [row for row in rows if "".join(row).strip()]
        if kept:
            columns = [np.array([row[i] for row in kept], dtype=object) for i in range(len(kept[0]))]
            outputs = self.predict(columns if self.text_pairs else columns[0], batch_size=batch_size, verbose=0)
        else:
            outputs = np.zeros((0, self.num_classes), "float32")
        if self.activation != "softmax":
            outputs = ops.convert_to_numpy(ops.softmax(ops.cast(outputs, "float32"), axis=-1))
        names = self.label_names or [str(i) for i in range(self.num_classes)]
        results = iter(labelled_predictions(outputs, names, top_k))
        results = [next(results) if "".join(row).strip() else blank_prediction() for row in rows]
        return results[0] if single else results

    def serving_outputs(self, inputs, first_token_only=True):
        """The model's outputs as served: the `[CLS]` token's path through the encoder, then the head.

        Equal to `self(inputs, training=False)` up to float rounding: the
        preprocessor (if any) packs the texts, the encoder gives the pooled
        output, the head the logits, and `activation="softmax"` makes them
        probabilities (in float32). `bert_keras.export.export_classifier`
        traces this method on packed inputs, trimmed of their padding.

        Args:
            inputs: strings when the model has a preprocessor: a `(batch,)`
                string tensor or a list of str (for text pairs, a list of two
                of them); or the Hub input dict of int32 `(batch, seq)`
                tensors `input_word_ids`, `input_mask`, `input_type_ids`.
            first_token_only: bool. With a `BertEncoder`, compute the last
                block for the first token only (`BertEncoder.pooled_output`:
                the padded layout, for a few texts, e.g. one under XLA); else
                run the whole encoder (token packing: for batches). A Hub
                encoder layer runs its module's graph either way. Defaults
                to `True`.

        Returns:
            `(batch, num_classes)`: logits, or probabilities with
            `activation="softmax"`.

        Example:
        >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
        ...                       num_heads=2, intermediate_size=32)
        >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad"] + [f"w{i}" for i in range(93)]
        >>> classifier = BertClassifier(encoder, num_classes=2, preprocessor=BertPreprocessor(vocab, seq_length=8))
        >>> texts = ["good", "bad bad"]
        >>> bool(np.allclose(classifier.serving_outputs(texts), classifier(tf.constant(texts)), atol=1e-6))
        True
        """
        packed = self._packed(inputs)
        if first_token_only and isinstance(self.encoder, BertEncoder):
            pooled = self.encoder.pooled_output(packed, training=False)  # (batch, hidden)
        else:
            pooled = self.encoder(packed, training=False)["pooled_output"]  # (batch, hidden)
        outputs = self.classifier_head(pooled, training=False)  # (batch, num_classes)
        if self.activation == "softmax":
            outputs = ops.softmax(ops.cast(outputs, "float32"), axis=-1)
        return outputs

    def _packed(self, inputs):
        """The Hub input dict of `inputs`: itself, or the preprocessor's packing of the strings."""
        if isinstance(inputs, collections.abc.Mapping):
            return inputs
        if self.preprocessor is None:
            raise ValueError(
                "Received strings, but this classifier has no preprocessor: pass the Hub input dict "
                "(`input_word_ids`, `input_mask`, `input_type_ids`), or build it with `preprocessor=`."
            )
        if self.text_pairs:
            return self.preprocessor([ops.convert_to_tensor(segment, dtype="string") for segment in inputs])
        return self.preprocessor(ops.convert_to_tensor(inputs, dtype="string"))

    def with_native_encoder(self):
        """This classifier, or for a Hub encoder layer a copy on the equal `BertEncoder`.

        The copy has the same preprocessor (shared) and head weights, and an
        encoder with the Hub layer's current weights (e.g. fine-tuned), so it
        gives the same outputs; its layers, unlike a SavedModel's graph, can
        compute in another dtype (`bert_keras.dtypes.compute_dtype`) and
        compute the last block for `[CLS]` only (`serving_outputs`). A
        loaded module keeps no config: its architecture is read from the
        module's directory (`bert_keras.checkpoints.read_hub_module`), its
        weights from the layer's own loaded module (not loaded again).

        Returns:
            A `BertClassifier` on a `BertEncoder`.

        Raises:
            ValueError: the encoder is neither a `BertEncoder` nor a Hub
                layer around a module written by bert_keras (whose variable
                names are the `BertEncoder`'s).
        """
        if isinstance(self.encoder, BertEncoder):
            return self
        copy = BertClassifier(
            _native_encoder(self.encoder),
            num_classes=self.num_classes,
            preprocessor=self.preprocessor,
            activation=self.activation,
            dropout=self.dropout,
            text_pairs=self.text_pairs,
            label_names=self.label_names,
            name=self.name,
        )
        copy.classifier_head.set_weights(self.classifier_head.get_weights())
        return copy


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


def _native_encoder(layer):
    """A `BertEncoder` with the current weights of a Hub layer around an encoder module written by bert_keras."""
    handle = getattr(layer, "handle", None)
    if isinstance(layer, hub.KerasLayer) and isinstance(handle, str):
        # The layer's own loaded module is read (its current, e.g. fine-tuned, weights): not loaded again.
        native = load(read_hub_module(handle, module=layer.resolved_object)).encoder
        variables = {v.name.rsplit(":", 1)[0]: v for v in layer.resolved_object.variables}
        if all(weight.path in variables for weight in native.weights):
            return native
    raise ValueError(
        f"Cannot rebuild the encoder {layer.name!r} ({type(layer).__name__}) as a BertEncoder: a BertEncoder, or a "
        "Hub encoder module written by bert_keras, is needed. Convert the module first (`bert-keras convert`), or "
        "build the classifier with BertClassifier.from_checkpoint on a checkpoint."
    )


@keras.saving.register_keras_serializable(package="bert_keras")
class BertTokenClassifier(_PretrainedTask):
    """Token classifier (tagger, e.g. NER): `TokenClassificationHead` on the sequence output.

    Args:
        encoder: `BertEncoder` or a layer with the Hub dict in and out.
            Reachable as `.encoder`.
        num_classes: int. Number of tags.
        preprocessor: optional `BertPreprocessor` or Hub preprocess layer; the
            model then takes raw strings and tags their word pieces.
        dropout: float. Dropout before the dense layer. Defaults to `0.1`.
        text_pairs: bool. With a preprocessor: two string inputs. Defaults to `False`.
        label_names: optional list of `num_classes` str, the tags in the order
            of the outputs (e.g. `["O", "B-PER", "I-PER"]`; `from_checkpoint`
            takes a Hugging Face checkpoint's `id2label`). Saved with the model.
        **kwargs: other `keras.Model` arguments.

    Call arguments:
        inputs: strings (with a preprocessor) or the Hub input dict.

    Returns:
        Logits `(batch, seq, num_classes)`. Padding positions get logits too;
        give them sample weight 0 (e.g. `input_mask`) when training.

    Example:
    >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
    ...                       num_heads=2, intermediate_size=32)
    >>> tagger = BertTokenClassifier(encoder, num_classes=5)
    >>> ids = np.array([[2, 7, 4, 3]], dtype="int32")
    >>> tuple(tagger({"input_word_ids": ids, "input_mask": np.ones_like(ids),
    ...               "input_type_ids": np.zeros_like(ids)}).shape)
    (1, 4, 5)
    """

    _own_args = ("num_classes", "dropout", "text_pairs", "label_names")
    _checkpoint_head, _head_attribute = tables.TOKEN_CLASSIFIER, "classifier_head"

    def __init__(self, encoder, num_classes, preprocessor=None, dropout=0.1, text_pairs=False, label_names=None,
                 **kwargs):
        check_encoder(encoder)
        check_positive_int("num_classes", num_classes)
        label_names = _check_label_names(label_names, num_classes)
        # === Layers ===
        head = TokenClassificationHead(
            num_classes=num_classes,
            dropout=check_rate("dropout", dropout),
            kernel_initializer=head_initializer(encoder),
            dtype=head_dtype(encoder),
            name="classifier",
        )
        # === Functional model ===
        inputs, packed = model_inputs(preprocessor, 2 if text_pairs else 1)
        outputs = head(call_encoder(encoder, packed, "sequence_output")["sequence_output"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.classifier_head = head
        self.num_classes = num_classes
        self.dropout = dropout
        self.text_pairs = bool(text_pairs)
        self.label_names = label_names


@keras.saving.register_keras_serializable(package="bert_keras")
class BertSpanLabeler(_PretrainedTask):
    """Extractive QA: start and end logits of the answer span, masked to the context.

    Inputs are packed as `[CLS] question [SEP] context [SEP]`; the answer may
    start and end only where `input_mask == 1` and `input_type_ids ==
    context_segment_id` (the context, and its final `[SEP]`).

    Args:
        encoder: `BertEncoder` or a layer with the Hub dict in and out.
            Reachable as `.encoder`.
        preprocessor: optional `BertPreprocessor` or Hub preprocess layer
            (`hub.PreprocessLayer`: two segments); the model then takes two
            string inputs, the question and the context.
        context_segment_id: int or None. Segment id of the context. `None`
            masks nothing (all positions are scored, as
            `BertForQuestionAnswering` does). Defaults to `1`.
        **kwargs: other `keras.Model` arguments.

    Call arguments:
        inputs: `[questions, contexts]` strings (with a preprocessor), or the
            Hub input dict.

    Returns:
        A dict: `start_logits` and `end_logits`, each `(batch, seq)`; train
        each with `SparseCategoricalCrossentropy(from_logits=True)` on the
        answer's first and last token positions.

    Example:
    >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
    ...                       num_heads=2, intermediate_size=32)
    >>> labeler = BertSpanLabeler(encoder)
    >>> ids = np.array([[2, 7, 3, 9, 8, 3]], dtype="int32")  # [CLS] q [SEP] c c [SEP]
    >>> outputs = labeler({"input_word_ids": ids, "input_mask": np.ones_like(ids),
    ...                    "input_type_ids": np.array([[0, 0, 0, 1, 1, 1]], dtype="int32")})
    >>> tuple(outputs["start_logits"].shape)
    (1, 6)
    """

    _own_args = ("context_segment_id",)
    _checkpoint_head, _head_attribute = tables.SPAN, "span_head"

    def __init__(self, encoder, preprocessor=None, context_segment_id=1, **kwargs):
        check_encoder(encoder)
        if context_segment_id is not None:
            check_int("context_segment_id", context_segment_id, minimum=0)
        # === Layers ===
        head = SpanHead(kernel_initializer=head_initializer(encoder), dtype=head_dtype(encoder), name="span")
        # === Functional model ===
        inputs, packed = model_inputs(preprocessor, 2 if preprocessor is not None else 1)
        encoder_outputs = call_encoder(encoder, packed, "sequence_output")
        context_mask = None
        if context_segment_id is not None:
            # context_mask: (batch, seq), True on real tokens of the context segment
            context_mask = ops.logical_and(
                ops.equal(packed["input_mask"], 1), ops.equal(packed["input_type_ids"], context_segment_id)
            )
        start_logits, end_logits = head(encoder_outputs["sequence_output"], context_mask)
        outputs = {START_LOGITS: start_logits, END_LOGITS: end_logits}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.span_head = head
        self.context_segment_id = context_segment_id
