"""Relative positions as DeBERTa uses them: log buckets of `query - key` distances and the shared embedding table."""

import keras
from keras import ops

from bert_keras._checks import check_choice, check_int, check_positive_int

REL_NORMS = ("layer_norm", "none")


def log_bucket_positions(relative_positions, position_buckets, max_relative_positions):
    """DeBERTa's log buckets of signed relative distances.

    Distances closer than `position_buckets // 2` (= `mid`) keep their value;
    farther ones map to `sign * (mid + ceil(log(|d| / mid) / log((max - 1) / mid) * (mid - 1)))`,
    so that `max_relative_positions - 1` lands on `±(2 * mid - 1)` and beyond
    it the buckets go on growing slowly (the attention clips them to its table).
    Computed in float32, as transformers does, so that the ceilings agree.

    Args:
        relative_positions: integer tensor of signed distances `query - key`.
        position_buckets: int. The number of buckets on each side (DeBERTa-v3: 256).
        max_relative_positions: int. The distance the log scale is fitted to (DeBERTa-v3: 512).

    Returns:
        int32 tensor of the input's shape.

    Example:
    >>> [int(b) for b in log_bucket_positions(np.array([0, 7, 8, 9, 20, 63, 100, -100]), 16, 64)]
    [0, 7, 8, 9, 12, 15, 17, -17]
    """
    mid = position_buckets // 2
    relative = ops.cast(relative_positions, "int32")
    sign = ops.cast(ops.sign(relative), "float32")
    distance = ops.abs(relative)
    # The log of distances inside the linear band is never used; `mid - 1` keeps it finite.
    safe = ops.cast(ops.where(distance < mid, mid - 1, distance), "float32")
    log_scale = ops.log(ops.cast((max_relative_positions - 1) / mid, "float32"))
    log_position = ops.ceil(ops.log(safe / float(mid)) / log_scale * float(mid - 1)) + float(mid)
    bucketed = ops.where(distance <= mid, ops.cast(relative, "float32"), log_position * sign)
    return ops.cast(bucketed, "int32")


def relative_position_buckets(seq_length, position_buckets, max_relative_positions):
    """The `(seq, seq)` int32 matrix of `bucket(i - j)` for query `i` and key `j`.

    With `position_buckets <= 0` the distances are not bucketed (DeBERTa-v2 without buckets).

    >>> np.asarray(relative_position_buckets(3, 16, 64)).tolist()
    [[0, -1, -2], [1, 0, -1], [2, 1, 0]]
    """
    positions = ops.arange(seq_length, dtype="int32")
    relative = ops.expand_dims(positions, 1) - ops.expand_dims(positions, 0)  # (seq_q, seq_k)
    if position_buckets > 0:
        return log_bucket_positions(relative, position_buckets, max_relative_positions)
    return relative


@keras.saving.register_keras_serializable(package="bert_keras")
class RelativePositionBuckets(keras.layers.Layer):
    """The bucketed relative positions of a batch's length, computed once and shared by every attention layer.

    Args:
        position_buckets: int. Buckets on each side; `<= 0` for raw distances. Defaults to `256`.
        max_relative_positions: int. The distance the log scale is fitted to. Defaults to `512`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: any tensor `(batch, seq, ...)`; only its length is read.

    Returns:
        int32 `(seq, seq)`: `bucket(i - j)` for query `i`, key `j`.

    Example:
    >>> tuple(RelativePositionBuckets(16, 64)(np.ones((2, 5), "int32")).shape)
    (5, 5)
    """

    def __init__(self, position_buckets=256, max_relative_positions=512, **kwargs):
        super().__init__(**kwargs)
        self.position_buckets = check_int("position_buckets", position_buckets)
        self.max_relative_positions = check_positive_int("max_relative_positions", max_relative_positions)
        if 0 < self.position_buckets and self.max_relative_positions <= self.position_buckets // 2 + 1:
            raise ValueError(
                "Received an invalid value for argument `max_relative_positions`, expected more than "
                f"position_buckets // 2 + 1 = {self.position_buckets // 2 + 1} (the log scale starts there). "
                f"Received: max_relative_positions={max_relative_positions}")

    def call(self, inputs):
        return relative_position_buckets(ops.shape(inputs)[1], self.position_buckets, self.max_relative_positions)

    def compute_output_shape(self, input_shape):
        return (input_shape[1], input_shape[1])

    def get_config(self):
        config = super().get_config()
        config.update({"position_buckets": self.position_buckets,
                       "max_relative_positions": self.max_relative_positions})
        return config


@keras.saving.register_keras_serializable(package="bert_keras")
class RelativeEmbeddings(keras.layers.Layer):
    """The table of relative position embeddings that every disentangled attention layer shares.

    `2 * span` rows (`span`: `position_buckets`, or `max_relative_positions`
    without buckets): row `span + b` embeds bucket `b`. DeBERTa-v3 normalizes
    the table with a LayerNorm (`norm="layer_norm"`) before the attention
    layers project it with their own query and key projections.

    Args:
        span: int. Buckets on each side of zero.
        hidden_size: int. Width of each row.
        norm: str. `"layer_norm"` or `"none"`. Defaults to `"layer_norm"`.
        layer_norm_epsilon: float. Defaults to `1e-7`.
        initializer: initializer of the table. Defaults to `"glorot_uniform"`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: any tensor; only there to place the table in a functional graph.

    Returns:
        `(2 * span, hidden_size)` in the compute dtype.

    Example:
    >>> tuple(RelativeEmbeddings(span=4, hidden_size=8)(np.zeros((1, 3, 8))).shape)
    (8, 8)
    """

    def __init__(self, span, hidden_size, norm="layer_norm", layer_norm_epsilon=1e-7,
                 initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.span = check_positive_int("span", span)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.norm = check_choice("norm", norm, REL_NORMS)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer = keras.initializers.get(initializer)
        self.layer_norm = None
        if self.norm == "layer_norm":
            self.layer_norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon,
                                                              dtype=self.dtype_policy, name="layer_norm")

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(name="embeddings", shape=(2 * self.span, self.hidden_size),
                                          initializer=self.initializer)
        if self.layer_norm is not None:
            self.layer_norm.build((None, self.hidden_size))
        self.built = True

    def call(self, inputs=None):
        table = ops.cast(self.embeddings, self.compute_dtype)  # (2 * span, hidden)
        return table if self.layer_norm is None else self.layer_norm(table)

    def compute_output_shape(self, input_shape=None):
        return (2 * self.span, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update({"span": self.span, "hidden_size": self.hidden_size, "norm": self.norm,
                       "layer_norm_epsilon": self.layer_norm_epsilon,
                       "initializer": keras.initializers.serialize(self.initializer)})
        return config
