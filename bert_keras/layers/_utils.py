"""Activation lookup and initializer cloning shared by the layers (argument checks: `bert_keras._checks`)."""

import keras
from keras import ops

@keras.saving.register_keras_serializable(package="bert_keras")
def gelu_approximate(x):
    """GELU with the tanh approximation (`gelu_new` in other projects)."""
    return keras.activations.gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package="bert_keras")
def gelu_exact(x):
    """GELU computed with the error function, as in the original BERT."""
    return keras.activations.gelu(x, approximate=False)


# BERT's names. "gelu" is the exact GELU here, as in BERT and Hugging Face
# configs; Keras' own `keras.activations.gelu` defaults to the tanh form.
ACTIVATIONS = {"gelu": gelu_exact, "gelu_approximate": gelu_approximate, "relu": ops.relu}


def get_activation(activation):
    """The callable for an activation: one of `ACTIVATIONS`' names, or what `keras.activations.get` takes.

    Other names, registered functions (`"bert_keras>gelu_exact"`), serialized
    dicts and callables go through Keras' own lookup.
    """
    if isinstance(activation, str) and activation in ACTIVATIONS:
        return ACTIVATIONS[activation]
    try:
        return keras.activations.get(activation)
    except (ValueError, TypeError):
        raise ValueError(
            f"Received an invalid value for argument `activation`, expected one of "
            f"{list(ACTIVATIONS)}, a Keras activation or a callable. Received: activation={activation!r}"
        ) from None


def serialize_activation(activation):
    """An activation for `get_config`: names (and revived configs) as they are, callables through Keras."""
    return activation if isinstance(activation, (str, dict)) else keras.activations.serialize(activation)


def clone_initializer(initializer):
    """A fresh copy, so that sublayers never share one seeded initializer."""
    return keras.initializers.get(keras.initializers.serialize(initializer))
