"""A Keras 3 layer around a TF Hub module (a reusable TF2 SavedModel)."""

import inspect
import re

import keras
import tensorflow as tf

from bert_keras._platform.keras_private import ExistingVariable, track_variable
from bert_keras.hub.loader import check_safe_mode, describe, load


def _variable_name(variable):
    # "bert/encoder/layer_0/kernel:0" -> "bert_encoder_layer_0_kernel": names the
    # optimizer can use as scopes for its slot variables.
    name = variable.name.split(":")[0]
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name) or "variable"


def _has_training_argument(func):
    """Whether a callable (a restored `tf.function` included) takes `training`."""
    call = func if inspect.isfunction(func) or inspect.ismethod(func) else getattr(func, "__call__", func)
    try:
        parameters = inspect.signature(call).parameters
    except (TypeError, ValueError):
        return False
    return "training" in parameters


@keras.saving.register_keras_serializable(package="bert_keras")
class KerasLayer(keras.layers.Layer):
    """A TF Hub module as a Keras 3 layer: a drop-in for `tensorflow_hub.KerasLayer`.

    Loads a reusable TF2 SavedModel (a Hub encoder or preprocessor, or any
    `tf.function`-callable SavedModel) and calls it. The module's own
    variables become the layer's weights, so training updates the very
    variables the module's functions read; `training` reaches the module only
    when the layer is trainable and the model is training; the module's
    `regularization_losses` are added while the layer is trainable.

    Args:
        handle: str or callable. A SavedModel directory, a `file://` path, an
            http(s) URL of a compressed module (downloaded once into
            `$TFHUB_CACHE_DIR`), or a callable such as a loaded
            preprocessor's `bert_pack_inputs`.
        trainable: bool. Whether the module's trainable variables are trained.
            Can be changed later; recompile the model afterwards. Defaults to
            `False`.
        arguments: optional dict of extra keyword arguments for every call,
            e.g. `dict(seq_length=64)` for `bert_pack_inputs`.
        signature: optional str. Call this signature instead of `__call__`.
        signature_outputs_as_dict: bool. With `signature`, return the whole
            output dict.
        output_key: optional str. Return only this entry of a dict output.
        output_shape: optional shape (without batch) of the output, for
            modules whose outputs lack static shapes.
        load_options: optional `tf.saved_model.LoadOptions`.
        sha256: optional str. The SHA-256 digest of the archive at a URL
            `handle`: the download must match it, and a cached copy is used
            only if it was recorded with it. Required for `http://` URLs (see
            `bert_keras.hub.resolve`). Defaults to `None`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: what the module takes, e.g. a `(batch,)` string tensor for a
            preprocessor, or the dict of int32 `(batch, seq)` tensors for an
            encoder.
        training: bool. Passed on to the module as described above.

    Returns:
        The module's outputs (for an encoder, the dict with `pooled_output`,
        `sequence_output`, `encoder_outputs` and `default`).

    Example (with modules from `bert-keras convert CHECKPOINT --out saved_models/minilm`):
    >>> preprocess = KerasLayer("saved_models/minilm/preprocess")  # doctest: +SKIP
    >>> encoder = KerasLayer("saved_models/minilm/encoder", trainable=True)  # doctest: +SKIP
    >>> text = keras.Input(shape=(), dtype="string")
    >>> pooled = encoder(preprocess(text))["pooled_output"]  # doctest: +SKIP
    """

    def __init__(
        self,
        handle,
        trainable=False,
        arguments=None,
        signature=None,
        signature_outputs_as_dict=None,
        output_key=None,
        output_shape=None,
        load_options=None,
        sha256=None,
        **kwargs,
    ):
        super().__init__(trainable=trainable, **kwargs)
        if signature and bool(output_key is not None) == bool(signature_outputs_as_dict):
            raise ValueError(
                "When calling a `signature`, set exactly one of `output_key` or "
                f"`signature_outputs_as_dict=True`. Received: output_key={output_key!r}, "
                f"signature_outputs_as_dict={signature_outputs_as_dict!r}"
            )
        if not signature and signature_outputs_as_dict:
            raise ValueError("`signature_outputs_as_dict` is only valid together with `signature`.")
        if callable(handle) and load_options is not None:
            raise ValueError("`load_options` cannot be used with a callable `handle`.")
        if callable(handle) and sha256 is not None:
            raise ValueError(f"`sha256` cannot be used with a callable `handle`. Received: sha256={sha256!r}")
        self.handle = handle
        self.arguments = dict(arguments or {})
        self.signature = signature
        self.signature_outputs_as_dict = signature_outputs_as_dict
        self.output_key = output_key
        self.output_shape = None if output_shape is None else tuple(output_shape)
        self.sha256 = sha256
        self._module = handle if callable(handle) else load(handle, options=load_options, sha256=sha256)
        self._callable = self._get_callable()
        self._has_training_argument = _has_training_argument(self._callable)
        self._track_module_variables()
        self._regularization_losses = list(getattr(self._module, "regularization_losses", None) or [])
        for loss in self._regularization_losses:
            if not callable(loss):
                raise ValueError(
                    "The module's `regularization_losses` must be callables that each return a "
                    f"scalar loss. Received an element of type {type(loss).__name__}."
                )
        self.built = True

    def _get_callable(self):
        if self.signature is None:
            if callable(self._module):
                return self._module
            raise ValueError(
                f"The SavedModel at {self.handle!r} cannot be called (it has no `__call__`), so "
                f"it is not a Hub encoder or preprocessor. Its {describe(self._module)}. To call "
                "a signature, pass `signature=` and `output_key=` or `signature_outputs_as_dict=True`."
            )
        signatures = getattr(self._module, "signatures", {}) or {}
        if self.signature not in signatures:
            raise ValueError(
                f"Unknown signature {self.signature!r} in {self.handle!r}. "
                f"Available signatures: {sorted(signatures)}."
            )
        return signatures[self.signature]

    def _track_module_variables(self):
        module_variables = list(getattr(self._module, "variables", None) or [])
        trainable_ids = {id(v) for v in getattr(self._module, "trainable_variables", None) or []}
        if self.signature and not module_variables:
            module_variables = list(getattr(self._callable, "variables", None) or [])
            trainable_ids = {id(v) for v in getattr(self._callable, "trainable_variables", None) or []}
        self._module_variables = []
        for variable in module_variables:
            wrapped = ExistingVariable(variable, trainable=id(variable) in trainable_ids, name=_variable_name(variable))
            track_variable(self, wrapped)
            self._module_variables.append(wrapped)

    @property
    def resolved_object(self):
        """The object that `handle` resolved to (the loaded SavedModel or the callable)."""
        return self._module

    def call(self, inputs, training=None):
        kwargs = dict(self.arguments)
        args = []
        if self.signature and isinstance(inputs, dict):
            kwargs.update(inputs)
        else:
            args.append(inputs)
        if self._has_training_argument:
            kwargs["training"] = bool(self.trainable and training)
        if self.trainable and self._regularization_losses:
            for loss in self._regularization_losses:
                self.add_loss(loss())
        result = self._callable(*args, **kwargs)
        if self.output_key is not None:
            if not isinstance(result, dict) or self.output_key not in result:
                available = sorted(result) if isinstance(result, dict) else type(result).__name__
                raise ValueError(
                    f"The module's output has no key {self.output_key!r}. Available: {available}."
                )
            result = result[self.output_key]
        if self.output_shape is not None:
            result = tf.ensure_shape(result, (None,) + self.output_shape)
        return result

    @classmethod
    def from_config(cls, config, custom_objects=None, safe_mode=None):
        check_safe_mode(cls, config, safe_mode)
        return cls(**config)

    def get_config(self):
        if not isinstance(self.handle, str):
            raise NotImplementedError(
                "A KerasLayer built from a callable cannot be serialised; build it from a "
                f"handle string (a path or URL) instead. Received handle of type {type(self.handle).__name__}."
            )
        config = super().get_config()
        config.update(
            {
                "handle": self.handle,
                "arguments": self.arguments,
                "signature": self.signature,
                "signature_outputs_as_dict": self.signature_outputs_as_dict,
                "output_key": self.output_key,
                "output_shape": self.output_shape,
                "sha256": self.sha256,
            }
        )
        return config
