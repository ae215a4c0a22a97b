"""The layers' index arithmetic lowers to LiteRT's builtin ops with dynamic shapes (batch and length unknown).

`x[:, None, :]` is a StridedSlice with `new_axis_mask`, which the TFLite
converter cannot lower when the shape is dynamic: it is refused under builtin
ops ("'tf.StridedSlice' op is neither a custom op nor a flex op"), or left as
a custom op that no runtime resolves. `expand_dims` lowers to a builtin.
"""

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.layers import attention_bias_from_mask
from bert_keras.layers.packing import _head_rows

interpreter = pytest.importorskip("ai_edge_litert.interpreter")


def _run_as_litert(function, specs, *inputs):
    """`function` converted with builtin ops only (dynamic shapes), run on `inputs` by LiteRT's interpreter."""
    concrete = tf.function(function, input_signature=specs).get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], tf.Module())  # a module: a signature
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    runner = interpreter.Interpreter(model_content=converter.convert()).get_signature_runner()
    names = sorted(runner.get_input_details(), key=lambda name: runner.get_input_details()[name]["index"])
    outputs = runner(**dict(zip(names, inputs)))
    return next(iter(outputs.values()))


@pytest.mark.parametrize("shape", [(2, 5), (3, 4, 4)])
def test_attention_bias_lowers_to_builtins(shape):
    mask = (np.random.default_rng(0).uniform(size=shape) > 0.3).astype("int32")
    spec = [tf.TensorSpec([None] * len(shape), tf.int32)]
    bias = _run_as_litert(attention_bias_from_mask, spec, mask)
    expected = attention_bias_from_mask(mask).numpy()
    assert bias.shape == expected.shape == (shape[0], 1) + ((1,) if len(shape) == 2 else (shape[1],)) + shape[-1:]
    np.testing.assert_array_equal(bias, expected)


def test_head_rows_lower_to_builtins():
    position_index = np.array([[0, 1, -1], [2, -1, -1]], dtype="int32")
    rows = _run_as_litert(lambda p: _head_rows(p, 2), [tf.TensorSpec([None, None], tf.int32)], position_index)
    # (batch, heads, seq): head h of each position's packed row, row 0 where a position is not packed.
    np.testing.assert_array_equal(rows, [[[0, 2, 0], [1, 3, 1]], [[4, 0, 0], [5, 1, 1]]])
