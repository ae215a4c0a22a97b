"""Dtype policies and CPU capability checks: what a model may compute in, on this machine.

Imports no TensorFlow: the command line checks `--dtype` arguments with it
before TensorFlow loads.
"""

import contextlib

COMPUTE_DTYPES = ("float32", "bfloat16")


def cpu_supports_bfloat16():
    """Whether this CPU has bfloat16 arithmetic: `avx512_bf16` or `amx_bf16` among /proc/cpuinfo's flags.

    Without it TensorFlow emulates bfloat16 matrix products, slower than float32 ones.
    """
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def check_compute_dtype(dtype, argument="dtype"):
    """`dtype` if it is `"float32"`, or `"bfloat16"` on a CPU that has bfloat16 arithmetic; else a `ValueError`.

    A bfloat16 export on a CPU without it is refused (not silently exported
    as float32): its matrix products would be emulated and slower than float32.

    Args:
        dtype: str. `"float32"` or `"bfloat16"`.
        argument: str. How the caller names `dtype` in messages (e.g.
            `export_dtype`). Defaults to `"dtype"`.

    >>> check_compute_dtype("float32")
    'float32'
    """
    if dtype not in COMPUTE_DTYPES:
        raise ValueError(
            f"Received an invalid value for argument `{argument}`, expected one of {list(COMPUTE_DTYPES)}. "
            f"Received: {argument}={dtype!r}"
        )
    if dtype == "bfloat16" and not cpu_supports_bfloat16():
        raise ValueError(
            f"Received {argument}='bfloat16', but this CPU has no bfloat16 arithmetic (neither `avx512_bf16` nor "
            "`amx_bf16` in /proc/cpuinfo): bfloat16 would be emulated, slower than float32. Use float32."
        )
    return dtype


@contextlib.contextmanager
def compute_dtype(model, dtype):
    """Within the block, every layer of `model` computes in `dtype`; its weights stay float32.

    `"bfloat16"` is Keras' `mixed_bfloat16` policy: variables are read as
    bfloat16, the matrix products run in bfloat16, attention's softmax in
    float32. Functions traced inside the block keep it; afterwards every layer
    gets its own policy back. `"float32"` changes nothing.
    """
    if check_compute_dtype(dtype) == "float32":
        yield model
        return
    # Imported here: _platform.keras_private loads TensorFlow, which importing this module must not (see the docstring).
    from bert_keras._platform.keras_private import all_layers

    layers = all_layers(model)
    policies = [layer.dtype_policy for layer in layers]
    try:
        for layer in layers:
            layer.dtype_policy = "mixed_bfloat16"
        yield model
    finally:
        for layer, policy in zip(layers, policies):
            layer.dtype_policy = policy
