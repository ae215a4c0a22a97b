"""A Hub preprocess module as one Keras layer: strings (or pairs) -> packed encoder inputs."""

import keras
import tensorflow as tf

from bert_keras._checks import check_int
from bert_keras._contract import INPUT_KEYS
from bert_keras.hub.loader import check_safe_mode, load


@keras.saving.register_keras_serializable(package="bert_keras")
class PreprocessLayer(keras.layers.Layer):
    """Runs a Hub preprocess module's `tokenize` and `bert_pack_inputs` in one layer.

    TF Hub's recipe for sentence pairs or another sequence length chains
    `KerasLayer(preprocess.tokenize)` and `KerasLayer(preprocess.bert_pack_inputs)`.
    Keras 3 functional models cannot pass ragged tensors between layers, so
    this layer does both steps inside one call and returns dense tensors.

    Args:
        handle: str. Path or URL of a Hub preprocess module.
        seq_length: optional int. Packed length; defaults to the module's own.
        load_options: optional `tf.saved_model.LoadOptions`.
        sha256: optional str. The SHA-256 digest of the archive at a URL
            `handle` (see `KerasLayer`). Defaults to `None`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: a `(batch,)` string tensor, or a list of them (one per segment).

    Returns:
        The dict of int32 `(batch, seq_length)` tensors `input_word_ids`,
        `input_mask` and `input_type_ids`.

    Example (with modules from `bert-keras convert CHECKPOINT --out saved_models/minilm`):
    >>> pack = PreprocessLayer("saved_models/minilm/preprocess", seq_length=64)  # doctest: +SKIP
    >>> question, passage = keras.Input((), dtype="string"), keras.Input((), dtype="string")
    >>> encoder_inputs = pack([question, passage])  # doctest: +SKIP
    """

    def __init__(self, handle, seq_length=None, load_options=None, sha256=None, **kwargs):
        kwargs.pop("trainable", None)  # in every config; the layer has nothing to train
        super().__init__(trainable=False, **kwargs)
        if seq_length is not None:
            check_int("seq_length", seq_length, minimum=3)
        self.handle = handle
        self.seq_length = seq_length
        self.sha256 = sha256
        self._module = load(handle, options=load_options, sha256=sha256)
        for name in ("tokenize", "bert_pack_inputs"):
            if not hasattr(self._module, name):
                raise ValueError(
                    f"The SavedModel at {handle!r} is not a Hub preprocess module: it has no `{name}`."
                )
        self.built = True

    def call(self, inputs):
        texts = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        segments = [self._module.tokenize(tf.reshape(text, [-1])) for text in texts]
        if self.seq_length is None:
            return self._module.bert_pack_inputs(segments)
        return self._module.bert_pack_inputs(segments, seq_length=tf.constant(self.seq_length, tf.int32))

    def compute_output_spec(self, inputs):
        first = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        length = self.seq_length
        if length is None:
            length = int(self._module(tf.constant([""]))["input_word_ids"].shape[1])
        shape = (first.shape[0], length)
        return {key: keras.KerasTensor(shape, dtype="int32") for key in INPUT_KEYS}

    @classmethod
    def from_config(cls, config, custom_objects=None, safe_mode=None):
        check_safe_mode(cls, config, safe_mode)
        return cls(**config)

    def get_config(self):
        config = super().get_config()
        config.update({"handle": self.handle, "seq_length": self.seq_length, "sha256": self.sha256})
        return config
