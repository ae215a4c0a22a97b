"""Task models: an encoder with heads on top.

Every task takes an encoder — a `BertEncoder`, or any layer that maps the
Hub input dict (`input_word_ids`, `input_mask`, `input_type_ids`) to the Hub
output dict, such as `bert_keras.hub.KerasLayer` around an encoder module —
keeps it reachable as `.encoder` (to freeze it: `task.encoder.trainable =
False`), and stores only its own arguments next to the serialized encoder in
its config, so that `.keras` files round-trip exactly.
"""

import collections.abc

import keras
from keras import ops

from bert_keras.encoder import INPUT_KEYS, BertEncoder
from bert_keras.heads import (
    ClassificationHead,
    MaskedLMHead,
    NextSentenceHead,
    SpanHead,
    TokenClassificationHead,
)
from bert_keras.layers._utils import check_positive_int, check_rate

MLM_LOGITS = "mlm_logits"
NSP_LOGITS = "nsp_logits"
START_LOGITS = "start_logits"
END_LOGITS = "end_logits"


def _check_encoder(encoder):
    if not isinstance(encoder, keras.layers.Layer):
        raise ValueError(
            "Received an invalid value for argument `encoder`, expected a BertEncoder or a "
            "Keras layer (e.g. bert_keras.hub.KerasLayer) that maps the Hub input dict to "
            f"the Hub output dict. Received: encoder={type(encoder).__name__}"
        )
    return encoder


def _encoder_inputs():
    return {key: keras.Input(shape=(None,), dtype="int32", name=key) for key in INPUT_KEYS}


def _call_encoder(encoder, inputs, needed):
    """Calls `encoder` on the symbolic Hub inputs; checks that it returns the `needed` keys."""
    try:
        outputs = encoder({key: inputs[key] for key in INPUT_KEYS})
    except Exception as error:  # noqa: BLE001 - re-raised with the argument named
        raise ValueError(
            "Received an invalid value for argument `encoder`: calling it on the Hub input dict "
            f"{list(INPUT_KEYS)} failed. Received: encoder={type(encoder).__name__} ({error})"
        ) from error
    if not isinstance(outputs, collections.abc.Mapping) or needed not in outputs:
        found = sorted(outputs) if isinstance(outputs, collections.abc.Mapping) else type(outputs).__name__
        raise ValueError(
            f"Received an invalid value for argument `encoder`, expected its output to be the "
            f"Hub output dict with `{needed}`. Received: {found}"
        )
    return outputs


def _initializer(encoder):
    stddev = getattr(encoder, "initializer_range", 0.02) if isinstance(encoder, BertEncoder) else 0.02
    return keras.initializers.TruncatedNormal(stddev=stddev)


def _head_dropout(encoder, dropout):
    if dropout is not None:
        return check_rate("dropout", dropout)
    return encoder.dropout if isinstance(encoder, BertEncoder) else 0.1


def _dtype(encoder):
    return encoder.dtype_policy if isinstance(encoder, BertEncoder) else None


class _Task(keras.Model):
    """Config plumbing shared by the tasks: the encoder is serialized next to the task's own arguments."""

    _own_args = ()

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
        }
        config.update({key: getattr(self, key) for key in self._own_args})
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


@keras.saving.register_keras_serializable(package="bert_keras")
class BertClassifier(_Task):
    """Sentence (or sentence-pair) classifier: `ClassificationHead` on the pooled output.

    Args:
        encoder: `BertEncoder` or a layer with the Hub dict in and out (e.g.
            `bert_keras.hub.KerasLayer`). Reachable as `.encoder`.
        num_classes: int. Number of classes.
        dropout: float. Dropout before the dense layer. Defaults to the
            encoder's `dropout` (a `BertEncoder`) or `0.1`.
        **kwargs: other `keras.Model` arguments (`name`, ...).

    Call arguments:
        inputs: dict of int32 `(batch, seq)` tensors `input_word_ids`,
            `input_mask`, `input_type_ids`.

    Returns:
        Logits `(batch, num_classes)`; train with
        `SparseCategoricalCrossentropy(from_logits=True)`.

    Example:
    >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
    ...                       num_heads=2, intermediate_size=32)
    >>> classifier = BertClassifier(encoder, num_classes=3)
    >>> ids = np.array([[2, 7, 4, 3]], dtype="int32")
    >>> tuple(classifier({"input_word_ids": ids, "input_mask": np.ones_like(ids),
    ...                   "input_type_ids": np.zeros_like(ids)}).shape)
    (1, 3)
    """

    _own_args = ("num_classes", "dropout")

    def __init__(self, encoder, num_classes, dropout=None, **kwargs):
        _check_encoder(encoder)
        check_positive_int("num_classes", num_classes)
        # === Layers ===
        head = ClassificationHead(
            num_classes=num_classes,
            dropout=_head_dropout(encoder, dropout),
            kernel_initializer=_initializer(encoder),
            dtype=_dtype(encoder),
            name="classifier",
        )
        # === Functional model ===
        inputs = _encoder_inputs()
        encoder_outputs = _call_encoder(encoder, inputs, "pooled_output")
        outputs = head(encoder_outputs["pooled_output"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.classifier_head = head
        self.num_classes = num_classes
        self.dropout = dropout


@keras.saving.register_keras_serializable(package="bert_keras")
class BertTokenClassifier(_Task):
    """Token classifier (tagger, e.g. NER): `TokenClassificationHead` on the sequence output.

    Args:
        encoder: `BertEncoder` or a layer with the Hub dict in and out.
            Reachable as `.encoder`.
        num_classes: int. Number of tags.
        dropout: float. Dropout before the dense layer. Defaults to the
            encoder's `dropout` (a `BertEncoder`) or `0.1`.
        **kwargs: other `keras.Model` arguments.

    Call arguments:
        inputs: dict of int32 `(batch, seq)` tensors `input_word_ids`,
            `input_mask`, `input_type_ids`.

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

    _own_args = ("num_classes", "dropout")

    def __init__(self, encoder, num_classes, dropout=None, **kwargs):
        _check_encoder(encoder)
        check_positive_int("num_classes", num_classes)
        # === Layers ===
        head = TokenClassificationHead(
            num_classes=num_classes,
            dropout=_head_dropout(encoder, dropout),
            kernel_initializer=_initializer(encoder),
            dtype=_dtype(encoder),
            name="classifier",
        )
        # === Functional model ===
        inputs = _encoder_inputs()
        encoder_outputs = _call_encoder(encoder, inputs, "sequence_output")
        outputs = head(encoder_outputs["sequence_output"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.classifier_head = head
        self.num_classes = num_classes
        self.dropout = dropout


@keras.saving.register_keras_serializable(package="bert_keras")
class BertSpanLabeler(_Task):
    """Extractive QA: start and end logits of the answer span, masked to the context.

    Inputs are packed as `[CLS] question [SEP] context [SEP]`; the answer may
    start and end only where `input_mask == 1` and `input_type_ids ==
    context_segment_id` (the context, and its final `[SEP]`).

    Args:
        encoder: `BertEncoder` or a layer with the Hub dict in and out.
            Reachable as `.encoder`.
        context_segment_id: int or None. Segment id of the context. `None`
            masks nothing (all positions are scored, as
            `BertForQuestionAnswering` does). Defaults to `1`.
        **kwargs: other `keras.Model` arguments.

    Call arguments:
        inputs: dict of int32 `(batch, seq)` tensors `input_word_ids`,
            `input_mask`, `input_type_ids`.

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

    def __init__(self, encoder, context_segment_id=1, **kwargs):
        _check_encoder(encoder)
        if context_segment_id is not None and (
            isinstance(context_segment_id, bool) or not isinstance(context_segment_id, int) or context_segment_id < 0
        ):
            raise ValueError(
                "Received an invalid value for argument `context_segment_id`, expected a "
                f"non-negative integer or None. Received: context_segment_id={context_segment_id!r}"
            )
        # === Layers ===
        head = SpanHead(kernel_initializer=_initializer(encoder), dtype=_dtype(encoder), name="span")
        # === Functional model ===
        inputs = _encoder_inputs()
        encoder_outputs = _call_encoder(encoder, inputs, "sequence_output")
        context_mask = None
        if context_segment_id is not None:
            # context_mask: (batch, seq), True on real tokens of the context segment
            context_mask = ops.logical_and(
                ops.equal(inputs["input_mask"], 1), ops.equal(inputs["input_type_ids"], context_segment_id)
            )
        start_logits, end_logits = head(encoder_outputs["sequence_output"], context_mask)
        outputs = {START_LOGITS: start_logits, END_LOGITS: end_logits}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.span_head = head
        self.context_segment_id = context_segment_id


@keras.saving.register_keras_serializable(package="bert_keras")
class BertPretrainer(_Task):
    """BERT pre-training model: masked LM (tied to the word embeddings) and next sentence.

    `compile()` without `loss` sets BERT's pre-training objective: masked-LM
    cross-entropy averaged over the real predictions only (pass
    `masked_lm_weights` as the sample weight of `mlm_logits`; padded
    prediction slots have weight 0) plus next-sentence cross-entropy, with the
    weighted metrics `mlm_accuracy` and `nsp_accuracy`. The datasets of
    `bert_keras.text.pretraining.pretraining_dataset` have exactly that form.

    Args:
        encoder: `BertEncoder`, or a layer with the Hub dict in and out (e.g.
            `bert_keras.hub.KerasLayer`) together with `vocab_size`; the
            masked-LM output table is then the head's own (untied), since a
            Hub module does not expose its embedding layer. Reachable as
            `.encoder`.
        mlm_activation: str or callable. Activation of the masked-LM transform.
            Defaults to the encoder's `activation` (`"gelu"` for other encoders).
        layer_norm_epsilon: float. Of the masked-LM transform. Defaults to the
            encoder's `layer_norm_epsilon` (`1e-12` for other encoders).
        vocab_size: int. Only for encoders that are not a `BertEncoder`.
        **kwargs: other `keras.Model` arguments (`name`, ...).

    Call arguments:
        inputs: dict of int32 tensors: the encoder's `input_word_ids`,
            `input_mask`, `input_type_ids` `(batch, seq)` and
            `masked_lm_positions` `(batch, num_predictions)`.

    Returns:
        A dict: `mlm_logits` `(batch, num_predictions, vocab_size)` and
        `nsp_logits` `(batch, 2)` (class 0: B follows A; 1: B is random).

    Example:
    >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
    ...                       num_heads=2, intermediate_size=32)
    >>> pretrainer = BertPretrainer(encoder)
    >>> ids = np.array([[2, 7, 4, 3]], dtype="int32")
    >>> out = pretrainer({"input_word_ids": ids, "input_mask": np.ones_like(ids),
    ...                   "input_type_ids": np.zeros_like(ids),
    ...                   "masked_lm_positions": np.array([[2]], dtype="int32")})
    >>> tuple(out["mlm_logits"].shape), tuple(out["nsp_logits"].shape)
    ((1, 1, 100), (1, 2))
    >>> pretrainer.compile(optimizer="adam")  # MLM + NSP losses and accuracies
    """

    _own_args = ("mlm_activation", "layer_norm_epsilon")

    def __init__(self, encoder, mlm_activation=None, layer_norm_epsilon=None, vocab_size=None, **kwargs):
        if not isinstance(encoder, BertEncoder):
            _check_encoder(encoder)
            if vocab_size is None:
                raise ValueError(
                    "Received an invalid value for argument `encoder`, expected a "
                    "bert_keras.BertEncoder, or another encoder layer together with `vocab_size`. "
                    f"Received: encoder={type(encoder).__name__}, vocab_size=None"
                )
        if vocab_size is not None:
            check_positive_int("vocab_size", vocab_size)
            if isinstance(encoder, BertEncoder) and vocab_size != encoder.vocab_size:
                raise ValueError(
                    f"`vocab_size` must match the encoder's. Received: vocab_size={vocab_size}, "
                    f"encoder.vocab_size={encoder.vocab_size}"
                )
        tied = isinstance(encoder, BertEncoder)
        # === Layers ===
        mlm_head = MaskedLMHead(
            vocab_size=encoder.vocab_size if tied else vocab_size,
            embedding=encoder.embeddings.word_embeddings if tied else None,
            activation=mlm_activation if mlm_activation is not None else getattr(encoder, "activation", "gelu"),
            layer_norm_epsilon=(
                layer_norm_epsilon
                if layer_norm_epsilon is not None
                else getattr(encoder, "layer_norm_epsilon", 1e-12)
            ),
            kernel_initializer=_initializer(encoder),
            dtype=_dtype(encoder),
            name="mlm",
        )
        nsp_head = NextSentenceHead(
            num_classes=2, kernel_initializer=_initializer(encoder), dtype=_dtype(encoder), name="nsp"
        )

        # === Functional model ===
        inputs = _encoder_inputs()
        inputs["masked_lm_positions"] = keras.Input(shape=(None,), dtype="int32", name="masked_lm_positions")
        encoder_outputs = _call_encoder(encoder, inputs, "sequence_output")
        outputs = {
            MLM_LOGITS: mlm_head(encoder_outputs["sequence_output"], inputs["masked_lm_positions"]),
            NSP_LOGITS: nsp_head(encoder_outputs["pooled_output"]),
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.encoder = encoder
        self.mlm_head = mlm_head
        self.nsp_head = nsp_head
        self.mlm_activation = mlm_activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.vocab_size = vocab_size

    def compile(self, optimizer="rmsprop", loss=None, loss_weights=None, metrics=None, weighted_metrics=None, **kwargs):
        """`keras.Model.compile`; without `loss`, BERT's MLM + NSP losses and accuracies.

        The default masked-LM loss divides by the sum of the sample weights
        (`reduction="mean_with_sample_weight"`), so padded prediction slots
        (weight 0) neither add to it nor dilute it. Unless given, the weighted
        metrics are `mlm_accuracy` and `nsp_accuracy` (logged as
        `mlm_logits_mlm_accuracy` ... by Keras' per-output naming).
        """
        if loss is None:
            loss = pretraining_losses()
            if weighted_metrics is None and metrics is None:
                weighted_metrics = pretraining_metrics()
        super().compile(
            optimizer=optimizer,
            loss=loss,
            loss_weights=loss_weights,
            metrics=metrics,
            weighted_metrics=weighted_metrics,
            **kwargs,
        )

    def compile_from_config(self, config):
        # What `keras.Model.compile_from_config` does, which skips models that override `compile`.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def get_config(self):
        config = super().get_config()
        if self.vocab_size is not None:
            config["vocab_size"] = self.vocab_size
        return config


def pretraining_losses():
    """BERT's pre-training losses, keyed by the `BertPretrainer` outputs.

    Returns:
        A dict: `mlm_logits` -> sparse cross-entropy from logits, averaged
        over the sample weights (`masked_lm_weights`); `nsp_logits` -> sparse
        cross-entropy from logits.
    """
    return {
        MLM_LOGITS: keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight", name="mlm_loss"
        ),
        NSP_LOGITS: keras.losses.SparseCategoricalCrossentropy(from_logits=True, name="nsp_loss"),
    }


def pretraining_metrics():
    """Weighted accuracies of the two pre-training objectives, keyed by output."""
    return {
        MLM_LOGITS: [keras.metrics.SparseCategoricalAccuracy(name="mlm_accuracy")],
        NSP_LOGITS: [keras.metrics.SparseCategoricalAccuracy(name="nsp_accuracy")],
    }
