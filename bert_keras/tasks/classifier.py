"""BertClassifier: a sentence (or sentence-pair) classifier on the pooled output, and its serving computation."""

import collections.abc
import logging

import keras
import numpy as np
from keras import ops

from bert_keras import hub
from bert_keras._checks import check_choice, check_positive_int, check_rate
from bert_keras.tasks._task import call_encoder, check_encoder, head_dtype, head_initializer, model_inputs
from bert_keras.checkpoints import load
from bert_keras.encoder import BertEncoder
from bert_keras.predictions import blank_prediction, check_top_k, labelled_predictions
from bert_keras.formats import read_hub_module, tables
from bert_keras.heads import ClassificationHead
from bert_keras.tasks._pretrained import _PretrainedTask, _check_label_names
from bert_keras.text import BertPreprocessor

logger = logging.getLogger(__name__)

ACTIVATIONS = (None, "softmax")


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
    >>> from bert_keras.text import BertPreprocessor
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
        >>> from bert_keras.text import BertPreprocessor
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
        >>> from bert_keras.text import BertPreprocessor
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

    @classmethod
    def from_hub_model(cls, model):
        """The TF Hub workflow's classifier as the equal `BertClassifier`, or None where `model` is not one.

        The workflow's model is a `keras.Model` from one string input through
        a Hub preprocess layer and a Hub encoder layer (`bert_keras.hub.KerasLayer`),
        whose `pooled_output` goes through at most one `Dropout` into a
        `Dense` head (no activation, or softmax). The classifier shares the
        two Hub layers and takes a copy of the head's weights, so it answers
        as `model` does (checked on probe texts: any difference and None is
        returned); unlike a plain `keras.Model` it knows how it tokenizes, so
        `export_classifier` records the tokenizer and the export converts to
        LiteRT. Any other model is None: it is served as it is.

        Args:
            model: a `keras.Model`.

        Returns:
            A `BertClassifier`, or None.
        """
        if isinstance(model, cls) or not isinstance(model, keras.Model) or len(model.inputs) != 1:
            return None
        layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
        if len(layers) not in (3, 4) or not all(isinstance(layer, hub.KerasLayer) for layer in layers[:2]):
            return None
        preprocess, encoder, *dropout, dense = layers
        flat = keras.tree.flatten

        def ids(tensors):
            return {id(tensor) for tensor in flat(tensors)}

        try:  # a layer called more than once (or not at all) has no single input: not the workflow's
            chain = [preprocess.input, preprocess.output, encoder.input, encoder.output]
            head = [(layer.input, layer.output) for layer in dropout + [dense]]
        except (AttributeError, ValueError):
            return None
        pooled = head[0][0]
        if (ids(chain[0]) != ids(model.inputs) or ids(chain[1]) != ids(chain[2]) or not isinstance(dense, keras.layers.Dense)
                or (dropout and not isinstance(dropout[0], keras.layers.Dropout)) or not dense.use_bias
                or id(pooled) not in ids(chain[3]) or len(pooled.shape) != 2
                or (dropout and head[0][1] is not head[1][0]) or ids(head[-1][1]) != ids(model.outputs)):
            return None
        activation = keras.activations.serialize(dense.activation)
        if activation not in ("linear", "softmax"):
            return None
        try:
            classifier = cls(encoder, num_classes=dense.units, preprocessor=preprocess,
                             activation=None if activation == "linear" else activation,
                             dropout=dropout[0].rate if dropout else 0.0)
        except ValueError:  # e.g. layers that are not an encoder and a preprocessor
            return None
        classifier.classifier_head.dense.set_weights(dense.get_weights())
        probes = keras.ops.convert_to_tensor(["a probe text, to compare the two models.", "ok", ""])
        if not np.allclose(np.asarray(classifier(probes)), np.asarray(model(probes)), atol=1e-6):
            return None
        return classifier

    def with_native_encoder(self):
        """This classifier, or for a Hub encoder layer a copy on the equal `BertEncoder`.

        The copy has the same head weights, an encoder with the Hub layer's
        current weights (e.g. fine-tuned), and for a Hub preprocess layer the
        equal `BertPreprocessor` of the tokenizer the encoder module records,
        where it packs probe texts exactly as the module does (else the same
        layer, shared), so it gives the same outputs and its export records
        how it tokenizes (LiteRT converts it); its layers, unlike a SavedModel's graph, can
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
        loaded = _native_checkpoint(self.encoder)
        copy = BertClassifier(
            loaded.encoder,
            num_classes=self.num_classes,
            preprocessor=_native_preprocessor(self.preprocessor, loaded, self.text_pairs),
            activation=self.activation,
            dropout=self.dropout,
            text_pairs=self.text_pairs,
            label_names=self.label_names,
            name=self.name,
        )
        copy.classifier_head.set_weights(self.classifier_head.get_weights())
        return copy


def _native_checkpoint(layer):
    """The `LoadedCheckpoint` of a Hub layer around an encoder module written by bert_keras: a `BertEncoder` with the
    layer's current weights, and the tokenizer the module records."""
    handle = getattr(layer, "handle", None)
    if isinstance(layer, hub.KerasLayer) and isinstance(handle, str):
        # The layer's own loaded module is read (its current, e.g. fine-tuned, weights): not loaded again.
        loaded = load(read_hub_module(handle, module=layer.resolved_object))
        variables = {v.name.rsplit(":", 1)[0]: v for v in layer.resolved_object.variables}
        if all(weight.path in variables for weight in loaded.encoder.weights):
            return loaded
    raise ValueError(
        f"Cannot rebuild the encoder {layer.name!r} ({type(layer).__name__}) as a BertEncoder: a BertEncoder, or a "
        "Hub encoder module written by bert_keras, is needed. Convert the module first (`bert-keras convert`), or "
        "build the classifier with BertClassifier.from_checkpoint on a checkpoint."
    )


# Texts on which a Hub preprocess module and the tokenizer its encoder module records must pack alike: case, accents,
# CJK, emoji, punctuation, a word longer than WordPiece's limit, control characters, and more pieces than fit.
PROBE_TEXTS = ("Hello, World! Ça va? naïve CAFÉ déjà-vu", "東京は晴れ 😀 #happy @user http://t.co/x",
               "x" * 120 + " done", "tab\tand\u00a0nbsp\u200bzero-width", "word " * 300, "")


def _native_preprocessor(preprocessor, loaded, text_pairs):
    """The `BertPreprocessor` of the tokenizer `loaded` records, where it packs the probe texts exactly as the Hub
    preprocess layer `preprocessor` does (a module pair bert_keras wrote; the module in a `PreprocessLayer`, or called
    whole in a `KerasLayer` as the TF Hub workflow calls it); else `preprocessor` itself, whose export then records
    no tokenizer (and LiteRT cannot convert it)."""
    if not isinstance(preprocessor, (hub.PreprocessLayer, hub.KerasLayer)) or loaded.tokenizer_kind is None:
        return preprocessor
    probes = [ops.convert_to_tensor(list(PROBE_TEXTS))]
    if text_pairs:
        probes.append(ops.convert_to_tensor(list(reversed(PROBE_TEXTS))))
    theirs = preprocessor(probes if text_pairs else probes[0])
    if not isinstance(theirs, dict) or set(theirs) != {"input_word_ids", "input_mask", "input_type_ids"}:
        return preprocessor  # a KerasLayer of another module
    seq_length = getattr(preprocessor, "seq_length", None) or int(theirs["input_word_ids"].shape[1])
    try:
        native = BertPreprocessor(tokenizer=loaded.tokenizer(), seq_length=seq_length, name=preprocessor.name)
    except ValueError:  # the module records no tokenizer files this package reads
        return preprocessor
    ours = native(probes if text_pairs else probes[0])
    same = all(np.array_equal(ops.convert_to_numpy(ours[key]), ops.convert_to_numpy(theirs[key])) for key in theirs)
    if not same:
        logger.info("The preprocess module %s packs the probe texts unlike the tokenizer its encoder records; the "
                    "export keeps the module's graph.", preprocessor.handle)
    return native if same else preprocessor
