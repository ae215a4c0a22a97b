"""Packed-token execution: the token-wise work of BERT runs on real tokens only.

A padded batch `(batch, seq, hidden)` with `input_mask` holds `n_real` real
tokens; every GEMM of a Transformer block except the two attention products
works token by token, so it can run on the `(n_real, hidden)` real tokens
alone. `PackedTokenIndex` turns the mask into the flat positions of the real
tokens, `PackTokens` gathers them, and `UnpackTokens` scatters a packed tensor
back to `(batch, seq, hidden)` with zeros at padding. `MultiHeadSelfAttention`
takes the same index (`token_index=`) and unpacks its queries, keys and values
for the attention products only.

The values at real positions are the same as for the padded computation (the
padding never reaches them: its attention weights are exactly zero); the
saving is the share of padding in the batch.

Under XLA (`jit_compile=True`), whose shapes must not depend on the data, the
index is simply every position, so packed and padded execution coincide.
Outside XLA, a batch without padding skips the gathers: packing and unpacking
are then reshapes (one `tf.cond` each).
"""

import keras
import tensorflow as tf

from bert_keras._platform.keras_private import in_xla_context


def packed_token_index(input_mask):
    """The packing of a padded batch: which positions are computed, and where they go.

    Packed are the real tokens (`input_mask` nonzero) and the first position of
    every row, so that `pooled_output` is defined even for a row of padding.
    Under XLA every position is computed, so that shapes stay static, and the
    padding is still marked -1 in `position_index`.

    Args:
        input_mask: `(batch, seq)` mask, nonzero for real tokens.

    Returns:
        A tuple `(token_index, position_index)`: int32 `(n_packed,)` flat
        positions (into `batch * seq`, row-major) of the packed tokens, and
        int32 `(batch, seq)` row of each position in the packed tensor, -1
        where the position is not packed.
    """
    shape = tf.shape(input_mask)
    first = tf.range(shape[1])[None, :] == 0  # (1, seq)
    packed = tf.reshape(tf.logical_or(tf.not_equal(input_mask, 0), first), (-1,))  # (batch * seq,)
    if in_xla_context():
        # Every position is computed (static shapes); the padding is still marked -1.
        token_index = tf.range(tf.size(packed), dtype=tf.int32)  # (batch * seq,)
        position_index = tf.where(packed, token_index, -1)  # (batch * seq,)
        return token_index, tf.reshape(position_index, shape)
    token_index = tf.cast(tf.where(packed)[:, 0], tf.int32)  # (n_packed,)
    rows = tf.math.cumsum(tf.cast(packed, tf.int32)) - 1  # (batch * seq,)
    position_index = tf.where(packed, rows, -1)  # (batch * seq,)
    return token_index, tf.reshape(position_index, shape)


def _skip_if_all_packed(n_packed, n_positions, reshaped, gathered):
    """`reshaped()` when every position is packed (a batch without padding), else `gathered()`.

    Packing is then a reshape, and the gathers are skipped (one `tf.cond`).
    Under XLA every position is packed while the padding is still marked for
    `UnpackTokens`, so the gathers always run there.
    """
    if in_xla_context():
        return gathered()
    return tf.cond(tf.equal(n_packed, n_positions), reshaped, gathered)


def _gather_positions(x, position_index, fill_zeros):
    """`(n_packed, ...)` -> `(batch, seq, ...)`: the packed row of each position."""
    shape = tf.concat([tf.shape(position_index), tf.shape(x)[1:]], axis=0)  # (batch, seq, ...)
    gathered = _skip_if_all_packed(
        tf.shape(x)[0],
        tf.size(position_index),
        lambda: tf.reshape(x, shape),
        lambda: _gather_padded(x, position_index, fill_zeros),
    )
    gathered.set_shape(position_index.shape.concatenate(x.shape[1:]))  # static shapes let TF fuse what follows
    return gathered


def _gather_padded(x, position_index, fill_zeros):
    gathered = tf.gather(x, tf.maximum(position_index, 0))  # (batch, seq, ...)
    if not fill_zeros:
        return gathered
    trailing = tf.ones_like(tf.shape(x)[1:])
    keep = tf.reshape(position_index >= 0, tf.concat([tf.shape(position_index), trailing], 0))  # (batch, seq, 1...)
    return tf.where(keep, gathered, tf.zeros_like(gathered))


def pack_tokens(x, packing):
    """`(batch, seq, ...)` -> `(n_packed, ...)`: the rows of the packed tokens.

    Args:
        x: `(batch, seq, ...)` tensor.
        packing: the tuple `(token_index, position_index)` of `packed_token_index`.
    """
    token_index, position_index = packing

    @tf.custom_gradient
    def _pack(x):
        flat = tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], axis=0))  # (batch * seq, ...)

        def grad(upstream):
            # A gather back (not the generic scatter-add): positions that were not packed get zero.
            return tf.reshape(_gather_positions(upstream, position_index, fill_zeros=True), tf.shape(x))

        packed = _skip_if_all_packed(
            tf.size(token_index), tf.size(position_index), lambda: flat, lambda: tf.gather(flat, token_index)
        )
        packed.set_shape(tf.TensorShape([None]).concatenate(x.shape[2:]))  # static shapes let TF fuse what follows
        return packed, grad  # (n_packed, ...)

    return _pack(x)


def unpack_tokens(x, packing, fill_zeros=True):
    """`(n_packed, ...)` -> `(batch, seq, ...)`: each position gets its packed row.

    Args:
        x: `(n_packed, ...)` tensor.
        packing: the tuple `(token_index, position_index)` of `packed_token_index`.
        fill_zeros: bool. Positions that were not packed are zero. Without it
            they hold a copy of a packed row, which is cheaper, and the gradient
            ignores what flows into those copies: use it only where that is
            zero, as for the keys and values of masked positions (attention
            weight exactly zero) and for queries whose results are dropped.
            Defaults to `True`.
    """
    token_index, position_index = packing

    @tf.custom_gradient
    def _unpack(x):
        def grad(upstream):
            # Each packed row is used at exactly one position: a gather, not a scatter-add.
            flat = tf.reshape(upstream, tf.concat([[-1], tf.shape(upstream)[2:]], axis=0))  # (batch * seq, ...)
            return _skip_if_all_packed(
                tf.size(token_index), tf.size(position_index), lambda: flat, lambda: tf.gather(flat, token_index)
            )  # (n_packed, ...)

        return _gather_positions(x, position_index, fill_zeros), grad

    return _unpack(x)


def _head_rows(position_index, num_heads):
    """`(batch, heads, seq)` rows of `(n_packed * heads, head_size)`: head h of each position's packed row.

    Positions that are not packed get head h of packed row 0.
    """
    heads = tf.range(num_heads, dtype=position_index.dtype)[None, :, None]  # (1, heads, 1)
    # `expand_dims` rather than `[:, None, :]`, which LiteRT cannot lower with dynamic shapes (attention.py says why).
    return tf.expand_dims(tf.maximum(position_index, 0), 1) * num_heads + heads  # (batch, heads, seq)


def _packed_rows(packing, num_heads):
    """`(n_packed, heads)` rows of `(batch * heads * seq, head_size)`: head h of each packed token."""
    token_index, position_index = packing
    seq = tf.shape(position_index)[1]
    batch, position = token_index // seq, token_index % seq  # (n_packed,) each
    heads = tf.range(num_heads, dtype=token_index.dtype)[None, :]  # (1, heads)
    return (batch[:, None] * num_heads + heads) * seq + position[:, None]  # (n_packed, heads)


def _split_heads_padded(x, shape, num_heads):
    """`(batch * seq, heads * head_size)` -> `(batch, heads, seq, head_size)`."""
    x = tf.reshape(x, tf.concat([shape, [num_heads, -1]], axis=0))  # (batch, seq, heads, head_size)
    return tf.transpose(x, (0, 2, 1, 3))


def _merge_heads_padded(x):
    """`(batch, heads, seq, head_size)` -> `(batch * seq, heads * head_size)`."""
    shape = tf.shape(x)
    x = tf.transpose(x, (0, 2, 1, 3))  # (batch, seq, heads, head_size)
    return tf.reshape(x, (shape[0] * shape[2], shape[1] * shape[3]))


def unpack_heads(tensors, packing, num_heads):
    """`(n_packed, heads * head_size)` tensors -> each `(batch, heads, seq, head_size)`, in one gather each.

    What `unpack_tokens(x, packing, fill_zeros=False)` followed by the split
    into heads gives (positions that are not packed hold a copy of a packed
    row; the gradient ignores what flows into those copies), without the
    transpose: each head's row is gathered straight into its place. The
    tensors (an attention's queries, keys and values) share one `tf.cond`
    and one index: tracing a `tf.cond` costs as much as its gathers (three
    conditions per block took ~0.08 s of tracing forward, ~0.14 s with the
    gradient, 2026-12-03, Intel Xeon), and each adds functions to a SavedModel.

    Args:
        tensors: list of `(n_packed, heads * head_size)` tensors, all of one
            width.
        packing: the tuple `(token_index, position_index)` of `packed_token_index`.
        num_heads: int.

    Returns:
        The list of `(batch, heads, seq, head_size)` tensors.
    """
    token_index, position_index = packing
    head_size = tensors[0].shape[-1] // num_heads
    static = position_index.shape[:1].concatenate([num_heads]).concatenate(position_index.shape[1:2]).concatenate([head_size])

    @tf.custom_gradient
    def _unpack(*xs):
        def grad(*upstreams):
            # Each packed row's head is used at exactly one place: a gather, not a scatter-add.
            def gathered():
                rows = _packed_rows(packing, num_heads)  # (n_packed, heads)
                return [tf.reshape(tf.gather(tf.reshape(upstream, (-1, head_size)), rows), tf.shape(x))
                        for upstream, x in zip(upstreams, xs)]

            return _skip_if_all_packed(
                tf.size(token_index), tf.size(position_index),
                lambda: [_merge_heads_padded(upstream) for upstream in upstreams], gathered,
            )  # each (n_packed, heads * head_size)

        def gathered():
            rows = _head_rows(position_index, num_heads)  # (batch, heads, seq)
            return [tf.gather(tf.reshape(x, (-1, head_size)), rows) for x in xs]

        unpacked = _skip_if_all_packed(
            tf.shape(xs[0])[0], tf.size(position_index),
            lambda: [_split_heads_padded(x, tf.shape(position_index), num_heads) for x in xs], gathered,
        )
        for tensor in unpacked:
            tensor.set_shape(static)
        return unpacked, grad  # each (batch, heads, seq, head_size)

    return list(_unpack(*tensors))


def pack_heads(x, packing):
    """`(batch, heads, seq, head_size)` -> `(n_packed, heads * head_size)`, in one gather.

    What merging the heads and `pack_tokens` give, without the transpose. The
    gradient is zero at positions that were not packed.

    Args:
        x: `(batch, heads, seq, head_size)` tensor.
        packing: the tuple `(token_index, position_index)` of `packed_token_index`.
    """
    token_index, position_index = packing
    num_heads, head_size = x.shape[1], x.shape[3]

    @tf.custom_gradient
    def _pack(x):
        def grad(upstream):
            def gathered():
                rows = tf.gather(tf.reshape(upstream, (-1, head_size)), _head_rows(position_index, num_heads))
                keep = (position_index >= 0)[:, None, :, None]  # (batch, 1, seq, 1)
                return tf.where(keep, rows, tf.zeros_like(rows))  # (batch, heads, seq, head_size)

            return _skip_if_all_packed(
                tf.size(token_index), tf.size(position_index),
                lambda: _split_heads_padded(upstream, tf.shape(position_index), num_heads), gathered,
            )

        # Always the gather (no tf.cond as elsewhere for a batch without padding): a cond here made
        # gradients from a persistent tape in graph mode fail on mismatched shapes (TensorFlow 2.21).
        rows = tf.gather(tf.reshape(x, (-1, head_size)), _packed_rows(packing, num_heads))  # (n_packed, heads, head_size)
        packed = tf.reshape(rows, (-1, num_heads * head_size))
        packed.set_shape([None, num_heads * head_size])
        return packed, grad  # (n_packed, heads * head_size)

    return _pack(x)


@keras.saving.register_keras_serializable(package="bert_keras")
class PackedTokenIndex(keras.layers.Layer):
    """Computes the packing of a padded batch from its mask (see `packed_token_index`).

    Call arguments:
        inputs: integer or boolean `(batch, seq)` mask, nonzero for real tokens.

    Returns:
        A tuple `(token_index, position_index)`: int32 `(n_packed,)` and
        int32 `(batch, seq)` (-1 where a position is not packed).

    Example:
    >>> token_index, position_index = PackedTokenIndex()(np.array([[1, 1, 0], [0, 0, 0]]))
    >>> token_index.numpy().tolist(), position_index.numpy().tolist()
    ([0, 1, 3], [[0, 1, -1], [2, -1, -1]])
    """

    def call(self, inputs):
        return packed_token_index(inputs)

    def compute_output_spec(self, inputs):
        return (
            keras.KerasTensor((None,), dtype="int32"),
            keras.KerasTensor(tuple(inputs.shape[:2]), dtype="int32"),
        )


@keras.saving.register_keras_serializable(package="bert_keras")
class PackTokens(keras.layers.Layer):
    """Gathers the packed tokens of a padded `(batch, seq, hidden)` tensor.

    Call arguments:
        inputs: `(batch, seq, hidden)`.
        packing: the tuple `(token_index, position_index)` from `PackedTokenIndex`.

    Returns:
        `(n_packed, hidden)`.
    """

    def call(self, inputs, packing):
        return pack_tokens(inputs, packing)

    def compute_output_spec(self, inputs, packing):
        return keras.KerasTensor((None,) + tuple(inputs.shape[2:]), dtype=inputs.dtype)


@keras.saving.register_keras_serializable(package="bert_keras")
class UnpackTokens(keras.layers.Layer):
    """Puts packed tokens back in the padded layout, zeros where nothing was packed.

    Call arguments:
        inputs: `(n_packed, hidden)`.
        packing: the tuple `(token_index, position_index)` from `PackedTokenIndex`.

    Returns:
        `(batch, seq, hidden)`.
    """

    def call(self, inputs, packing):
        return unpack_tokens(inputs, packing)

    def compute_output_spec(self, inputs, packing):
        shape = tuple(packing[1].shape) + tuple(inputs.shape[1:])
        return keras.KerasTensor(shape, dtype=inputs.dtype)
