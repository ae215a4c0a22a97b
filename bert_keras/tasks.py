"""Task models: an encoder with heads on top."""

import keras

from bert_keras.encoder import INPUT_KEYS, BertEncoder
from bert_keras.heads import MaskedLMHead, NextSentenceHead


@keras.saving.register_keras_serializable(package="bert_keras")
class BertPretrainer(keras.Model):
    """BERT pre-training model: masked LM (tied to the word embeddings) and next sentence.

    Args:
        encoder: `BertEncoder`. Reachable as `.encoder` (e.g. to freeze it).
        mlm_activation: str or callable. Activation of the masked-LM transform.
            Defaults to the encoder's `activation`.
        layer_norm_epsilon: float. Of the masked-LM transform. Defaults to the
            encoder's `layer_norm_epsilon`.
        **kwargs: other `keras.Model` arguments (`name`, ...).

    Call arguments:
        inputs: dict of int32 tensors: the encoder's `input_word_ids`,
            `input_mask`, `input_type_ids` `(batch, seq)` and
            `masked_lm_positions` `(batch, num_predictions)`.

    Returns:
        A dict: `mlm_logits` `(batch, num_predictions, vocab_size)` and
        `nsp_logits` `(batch, 2)`.

    Example:
    >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
    ...                       num_heads=2, intermediate_size=32)
    >>> pretrainer = BertPretrainer(encoder)
    >>> ids = np.array([[2, 7, 4, 3]], dtype="int32")
    >>> out = pretrainer({"input_word_ids": ids, "input_mask": np.ones_like(ids),
    ...                   "input_type_ids": np.zeros_like(ids),
    ...                   "masked_lm_positions": np.array([[2]], dtype="int32")})
    >>> out["mlm_logits"].shape, out["nsp_logits"].shape
    ((1, 1, 100), (1, 2))
    """

    def __init__(self, encoder, mlm_activation=None, layer_norm_epsilon=None, **kwargs):
        if not isinstance(encoder, BertEncoder):
            raise ValueError(
                "Received an invalid value for argument `encoder`, expected a "
                f"bert_keras.BertEncoder. Received: encoder={type(encoder).__name__}"
            )
        # === Layers ===
        mlm_head = MaskedLMHead(
            vocab_size=encoder.vocab_size,
            embedding=encoder.embeddings.word_embeddings,
            activation=mlm_activation if mlm_activation is not None else encoder.activation,
            layer_norm_epsilon=(
                layer_norm_epsilon if layer_norm_epsilon is not None else encoder.layer_norm_epsilon
            ),
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.initializer_range),
            dtype=encoder.dtype_policy,
            name="mlm",
        )
        nsp_head = NextSentenceHead(
            num_classes=2,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.initializer_range),
            dtype=encoder.dtype_policy,
            name="nsp",
        )

        # === Functional model ===
        inputs = {key: keras.Input(shape=(None,), dtype="int32", name=key) for key in INPUT_KEYS}
        inputs["masked_lm_positions"] = keras.Input(shape=(None,), dtype="int32", name="masked_lm_positions")
        encoder_outputs = encoder({key: inputs[key] for key in INPUT_KEYS})
        outputs = {
            "mlm_logits": mlm_head(encoder_outputs["sequence_output"], inputs["masked_lm_positions"]),
            "nsp_logits": nsp_head(encoder_outputs["pooled_output"]),
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.encoder = encoder
        self.mlm_head = mlm_head
        self.nsp_head = nsp_head
        self.mlm_activation = mlm_activation
        self.layer_norm_epsilon = layer_norm_epsilon

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "mlm_activation": self.mlm_activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)
