"""What every serving graph does around the model: cut the padding, pad a single text to its length bucket.

The exports of classifiers and taggers serve a batch on its longest row
(padding columns carry nothing: attention masks them out) and, where
compiled, a single text padded to the next of `XLA_LENGTHS`.
"""

import tensorflow as tf

# The batch-1 fast path: a single text's packed inputs are padded to the next of these lengths and run
# through an XLA-compiled encoder and head (one compilation per length, on first use). Steps of 8:
# for MiniLM each 8 tokens cost ~1 ms of a ~6 ms call, so finer steps waste less on padding.
# Beyond the last one, or for batches, the graph runs op by op on the batch's longest row, where
# the encoder's token packing (dense layers on real tokens only) pays more than XLA's fusion.
XLA_LENGTHS = (8, 16, 24, 32, 40, 48, 56, 64)


def trim_padding(packed):
    """The Hub input dict cut after the batch's longest row (padding columns carry no information)."""
    length = tf.reduce_max(tf.reduce_sum(packed["input_mask"], axis=1))  # the longest row's tokens
    length = tf.maximum(length, 1)
    return {key: value[:, :length] for key, value in packed.items()}  # (batch, length)


def pad_to(packed, length):
    """The Hub input dict padded with zeros (padding id 0, mask 0, type 0) to `length` columns."""
    extra = length - tf.shape(packed["input_mask"])[1]
    return {key: tf.pad(value, [[0, 0], [0, extra]]) for key, value in packed.items()}  # (batch, length)


def bucket(length):
    """The first of `XLA_LENGTHS` that holds `length` tokens (a scalar tensor)."""
    buckets = tf.constant(XLA_LENGTHS, tf.int32)
    return tf.gather(buckets, tf.reduce_sum(tf.cast(buckets < length, tf.int32)))


# Windows run through the model per call: a text of any length holds the activations of this many windows at once.
WINDOWS_PER_CALL = 64


def in_chunks(function, count, specs, size=WINDOWS_PER_CALL):
    """`function(begin, end)` on rows `[begin, end)` of `count`, `size` rows per call, one call after another.

    A `tf.while_loop`: the activations held at once are one call's, however
    many windows a long text makes; each call's outputs are kept and
    concatenated along their first axis. No rows: one call of none.

    Args:
        function: callable `(begin, end)` (int64 scalars) -> a dict of tensors
            whose first axis is the rows `[begin, end)`.
        count: int64 scalar, the rows.
        specs: dict name -> `(dtype, element_shape)`: each output's dtype and
            the shape of one call's output (first axis `None`).
        size: int. Rows per call. Defaults to `WINDOWS_PER_CALL`.

    Returns:
        A dict name -> `(count, ...)` tensor.
    """
    calls = tf.maximum((count + size - 1) // size, 1)

    def run(call, arrays):
        begin = call * size
        outputs = function(begin, tf.minimum(begin + size, count))
        return call + 1, {name: arrays[name].write(tf.cast(call, tf.int32), outputs[name]) for name in specs}

    arrays = {name: tf.TensorArray(dtype, size=tf.cast(calls, tf.int32), infer_shape=False,
                                   element_shape=tf.TensorShape(shape))
              for name, (dtype, shape) in specs.items()}
    # One call at a time: independent iterations would otherwise run side by side (parallel_iterations=10),
    # each holding its activations.
    _, arrays = tf.while_loop(lambda call, _: call < calls, run, (tf.constant(0, tf.int64), arrays),
                              parallel_iterations=1)
    return {name: array.concat() for name, array in arrays.items()}
