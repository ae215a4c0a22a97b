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
