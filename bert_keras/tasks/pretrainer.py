"""BERT's pre-training model: masked LM (tied to the word embeddings) and next-sentence prediction.

A checkpoint's pre-training heads come built and assigned
(`load_checkpoint(path).heads`, below the tasks in the package's layers);
`checkpoint_pretrainer` puts them together with the encoder.
"""

import keras

from bert_keras._checks import check_positive_int
from bert_keras.tasks._task import Task, call_encoder, check_encoder, encoder_inputs, head_dtype, head_initializer
from bert_keras.encoder import BertEncoder
from bert_keras.heads import MaskedLMHead, NextSentenceHead

MLM_LOGITS = "mlm_logits"
NSP_LOGITS = "nsp_logits"


@keras.saving.register_keras_serializable(package="bert_keras")
class BertPretrainer(Task):
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
        mlm_head: optional `MaskedLMHead`, built already (a checkpoint's):
            used in place of a new one.
        nsp_head: optional `NextSentenceHead`, built already (a checkpoint's).
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

    def __init__(self, encoder, mlm_activation=None, layer_norm_epsilon=None, vocab_size=None, mlm_head=None,
                 nsp_head=None, **kwargs):
        if not isinstance(encoder, BertEncoder):
            check_encoder(encoder)
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
        mlm_head = mlm_head or MaskedLMHead(
            vocab_size=encoder.vocab_size if tied else vocab_size,
            embedding=encoder.embeddings.word_embeddings if tied else None,
            activation=mlm_activation if mlm_activation is not None else getattr(encoder, "activation", "gelu"),
            layer_norm_epsilon=(
                layer_norm_epsilon
                if layer_norm_epsilon is not None
                else getattr(encoder, "layer_norm_epsilon", 1e-12)
            ),
            kernel_initializer=head_initializer(encoder),
            dtype=head_dtype(encoder),
            name="mlm",
        )
        nsp_head = nsp_head or NextSentenceHead(
            num_classes=2, kernel_initializer=head_initializer(encoder), dtype=head_dtype(encoder), name="nsp"
        )

        # === Functional model ===
        inputs = encoder_inputs()
        inputs["masked_lm_positions"] = keras.Input(shape=(None,), dtype="int32", name="masked_lm_positions")
        encoder_outputs = call_encoder(encoder, inputs, "sequence_output")
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
        config.pop("preprocessor")
        if self.vocab_size is not None:
            config["vocab_size"] = self.vocab_size
        return config


def checkpoint_pretrainer(loaded):
    """The `BertPretrainer` of a `LoadedCheckpoint` (`bert_keras.checkpoints.load_checkpoint`) on its encoder and
    its converted heads, or None where the checkpoint lacks the masked-LM or the next-sentence head."""
    if not {"mlm", "nsp"} <= set(loaded.heads):
        return None
    return BertPretrainer(loaded.encoder, mlm_activation=loaded.heads["mlm"].activation,
                          mlm_head=loaded.heads["mlm"], nsp_head=loaded.heads["nsp"])


def pretraining_losses(mlm_reduction="mean_with_sample_weight"):
    """BERT's pre-training losses, keyed by the `BertPretrainer` outputs.

    Args:
        mlm_reduction: str. The masked-LM loss's Keras reduction. The default
            averages over the sample weights (`masked_lm_weights`); `"sum"`
            is for weights already divided by their sum over the global batch
            (distributed training, where each replica sees part of it).

    Returns:
        A dict: `mlm_logits` -> sparse cross-entropy from logits, reduced by
        `mlm_reduction`; `nsp_logits` -> sparse cross-entropy from logits.
    """
    return {
        MLM_LOGITS: keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=mlm_reduction, name="mlm_loss"
        ),
        NSP_LOGITS: keras.losses.SparseCategoricalCrossentropy(from_logits=True, name="nsp_loss"),
    }


def pretraining_metrics():
    """Weighted accuracies of the two pre-training objectives, keyed by output."""
    return {
        MLM_LOGITS: [keras.metrics.SparseCategoricalAccuracy(name="mlm_accuracy")],
        NSP_LOGITS: [keras.metrics.SparseCategoricalAccuracy(name="nsp_accuracy")],
    }
