"""Argument checks and activation lookup shared by the layers."""

import keras
from keras import ops

_EXACT_GELU = "gelu"
_TANH_GELU = "gelu_approximate"
ACTIVATIONS = (_EXACT_GELU, _TANH_GELU, "relu")


def check_positive_int(name, value):
    """Raises a `ValueError` unless `value` is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a positive "
            f"integer. Received: {name}={value!r}"
        )
    return value


def check_rate(name, value):
    """Raises a `ValueError` unless `value` is a float in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a float in "
            f"[0, 1). Received: {name}={value!r}"
        )
    return float(value)


def check_choice(name, value, choices):
    """Raises a `ValueError` unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected one of "
            f"{list(choices)}. Received: {name}={value!r}"
        )
    return value


def gelu_approximate(x):
    """GELU with the tanh approximation (`gelu_new` in other projects)."""
    return keras.activations.gelu(x, approximate=True)


def gelu_exact(x):
    """GELU computed with the error function, as in the original BERT."""
    return keras.activations.gelu(x, approximate=False)


def get_activation(activation):
    """Returns the callable for an activation name or a callable.

    Names are `"gelu"` (exact, erf), `"gelu_approximate"` (tanh) and `"relu"`.
    """
    if callable(activation):
        return activation
    if activation == _EXACT_GELU:
        return gelu_exact
    if activation == _TANH_GELU:
        return gelu_approximate
    if activation == "relu":
        return ops.relu
    raise ValueError(
        f"Received an invalid value for argument `activation`, expected one of "
        f"{list(ACTIVATIONS)} or a callable. Received: activation={activation!r}"
    )


def serialize_activation(activation):
    """Activation names are stored as they are; callables through Keras."""
    if isinstance(activation, str):
        return activation
    return keras.activations.serialize(activation)


def deserialize_activation(activation):
    if isinstance(activation, str) and activation in ACTIVATIONS:
        return activation
    return keras.activations.deserialize(activation)


def clone_initializer(initializer):
    """A fresh copy, so that sublayers never share one seeded initializer."""
    return keras.initializers.get(keras.initializers.serialize(initializer))
