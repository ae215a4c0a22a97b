"""What every task model shares: an encoder (native or Hub), an optional preprocessor, config plumbing.

A task takes an encoder — a `BertEncoder`, or any layer that maps the Hub
input dict (`input_word_ids`, `input_mask`, `input_type_ids`) to the Hub
output dict, such as `bert_keras.hub.KerasLayer` around an encoder module —
keeps it reachable as `.encoder` (to freeze it: `task.encoder.trainable =
False`), and stores only its own arguments next to the serialized encoder
(and preprocessor) in its config, so that `.keras` files round-trip exactly.
With a preprocessor (`bert_keras.text.BertPreprocessor`, or a Hub preprocess
layer) the task takes raw strings; without one, the Hub input dict.
"""

import collections.abc

import keras
import numpy as np
import tensorflow as tf

from bert_keras.encoder import INPUT_KEYS, BertEncoder

TEXT_INPUTS = ("text", "text_pair")


def check_encoder(encoder):
    if not isinstance(encoder, keras.layers.Layer):
        raise ValueError(
            "Received an invalid value for argument `encoder`, expected a BertEncoder or a "
            "Keras layer (e.g. bert_keras.hub.KerasLayer) that maps the Hub input dict to "
            f"the Hub output dict. Received: encoder={type(encoder).__name__}"
        )
    return encoder


def encoder_inputs():
    """Symbolic int32 `(batch, seq)` inputs named as the Hub input dict."""
    return {key: keras.Input(shape=(None,), dtype="int32", name=key) for key in INPUT_KEYS}


def call_encoder(encoder, inputs, needed):
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


def model_inputs(preprocessor, num_segments=1):
    """`(model_inputs, encoder_inputs)`: strings through `preprocessor`, or the Hub dict itself.

    Args:
        preprocessor: None, or a layer from `(batch,)` strings (a list of them
            for two segments) to the Hub input dict.
        num_segments: int. 1 (`text`) or 2 (`text`, `text_pair`, packed as
            segments A and B).

    Returns:
        The functional model's inputs (the Hub dict, one string input, or a
        list of two) and the Hub input dict they give.
    """
    if preprocessor is None:
        inputs = encoder_inputs()
        return inputs, inputs
    if not isinstance(preprocessor, keras.layers.Layer):
        raise ValueError(
            "Received an invalid value for argument `preprocessor`, expected a BertPreprocessor or a "
            "Hub preprocess layer (bert_keras.hub.PreprocessLayer / KerasLayer). "
            f"Received: preprocessor={type(preprocessor).__name__}"
        )
    texts = [keras.Input(shape=(), dtype="string", name=name) for name in TEXT_INPUTS[:num_segments]]
    try:
        packed = preprocessor(texts[0] if num_segments == 1 else texts)
    except Exception as error:  # noqa: BLE001 - re-raised with the argument named
        hint = " For text pairs use bert_keras.hub.PreprocessLayer, not KerasLayer." if num_segments > 1 else ""
        raise ValueError(
            f"Received an invalid value for argument `preprocessor`: calling it on {num_segments} string "
            f"input(s) failed. Received: preprocessor={type(preprocessor).__name__} ({error}).{hint}"
        ) from error
    if not isinstance(packed, collections.abc.Mapping) or any(key not in packed for key in INPUT_KEYS):
        found = sorted(packed) if isinstance(packed, collections.abc.Mapping) else type(packed).__name__
        raise ValueError(
            "Received an invalid value for argument `preprocessor`, expected its output to be the Hub "
            f"input dict {list(INPUT_KEYS)}. Received: {found}"
        )
    return (texts[0] if num_segments == 1 else texts), packed


def head_initializer(encoder):
    stddev = getattr(encoder, "initializer_range", 0.02) if isinstance(encoder, BertEncoder) else 0.02
    return keras.initializers.TruncatedNormal(stddev=stddev)


def head_dtype(encoder):
    return encoder.dtype_policy if isinstance(encoder, BertEncoder) else None


def _is_text_array(value):
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "USO"
    return isinstance(value, (list, tuple)) and all(isinstance(item, (str, bytes)) for item in value)


def as_text_tensors(x, num_inputs):
    """Texts as users pass them (a list of str, a numpy string array; a pair of them for text pairs) as tensors.

    Keras' own data handling takes string tensors and datasets, not Python
    lists or numpy string arrays; anything else is returned as it is. One
    str (a `(text, text_pair)` tuple of str for text pairs) is a batch of one.
    """
    if num_inputs == 1 and isinstance(x, (str, bytes)):
        x = [x]
    if num_inputs == 2 and isinstance(x, tuple) and len(x) == 2 and all(isinstance(part, (str, bytes)) for part in x):
        x = ([x[0]], [x[1]])
    if num_inputs == 1 and _is_text_array(x):
        return tf.constant(np.asarray(x, dtype=object).astype(str).tolist() if len(x) else [], dtype=tf.string)
    if num_inputs == 2 and isinstance(x, (list, tuple)) and len(x) == 2 and all(map(_is_text_array, x)):
        return [as_text_tensors(part, 1) for part in x]
    return x


def _as_array(y):
    return np.asarray(y) if isinstance(y, (list, tuple)) else y


class Task(keras.Model):
    """Config plumbing shared by the tasks: encoder and preprocessor serialized next to the task's own arguments.

    A plain Keras model: what Keras' `fit` needs under a strategy of several replicas (keras#20585) is the
    training harness's to apply, for one run (`bert_keras.training.Harness`), not the model's.
    A task with a preprocessor takes texts as users have them: `fit`, `evaluate`, `predict` and calling the
    model accept a Python list of strings or a numpy string array (a pair of them for text pairs) as well as
    string tensors and datasets, and label lists.
    """

    _own_args = ()

    def _texts(self, x):
        return as_text_tensors(x, len(self.inputs)) if getattr(self, "preprocessor", None) is not None else x

    def __call__(self, inputs, *args, **kwargs):
        return super().__call__(self._texts(inputs), *args, **kwargs)

    def fit(self, x=None, y=None, *args, validation_data=None, **kwargs):
        if isinstance(validation_data, tuple) and validation_data:
            validation_data = (self._texts(validation_data[0]), *map(_as_array, validation_data[1:]))
        return super().fit(self._texts(x), _as_array(y), *args, validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        return super().evaluate(self._texts(x), _as_array(y), *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        return super().predict(self._texts(x), *args, **kwargs)

    def get_config(self):
        preprocessor = getattr(self, "preprocessor", None)
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "preprocessor": None if preprocessor is None else keras.saving.serialize_keras_object(preprocessor),
        }
        config.update({key: getattr(self, key) for key in self._own_args})
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        if config.get("preprocessor") is not None:
            config["preprocessor"] = keras.saving.deserialize_keras_object(config["preprocessor"])
        return cls(**config)
