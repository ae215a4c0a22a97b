"""Feeding a strategy's replicas: each gets its own slice of every global batch.

`distribute_batches` turns a dataset of global batches into a distributed
dataset in which every replica gets its own slice of each global batch, so
that N replicas see exactly the examples, in the order, that one replica
with the same global batch would (the shards are by data: each worker
reads the whole stream and keeps its slices). A partial last batch is
padded to full size with weight-0 rows and its real rows weighted so that
the summed gradient equals the mean over the real rows, as on one replica.
`check_global_batch` refuses a global batch that does not divide among the
replicas, before any work.
"""

import tensorflow as tf

from bert_keras._checks import check_positive_int


def distribute_batches(strategy, dataset, global_batch_size, scale_partial=True):
    """A dataset of global batches as a distributed dataset: each replica gets its slice of every batch.

    Args:
        strategy: the `tf.distribute.Strategy`.
        dataset: a `tf.data.Dataset` of `(x, y)` or `(x, y, sample_weight)`
            (nested structures allowed), each a batch of at most
            `global_batch_size` rows.
        global_batch_size: int. Divisible by the number of replicas.
        scale_partial: bool. Weight the real rows of a partial batch
            `global_batch_size / rows` (for training: the gradient of one
            replica's mean). With `False` they weigh 1 (for evaluation: the
            metrics count each example once). Defaults to `True`.

    Returns:
        `dataset` itself without a strategy of more than one replica;
        otherwise a `tf.distribute.DistributedDataset` whose elements on
        replica `r` are rows `[r * b, (r + 1) * b)` of each global batch
        (`b = global_batch_size / replicas`), a partial batch padded with
        weight-0 rows and (with `scale_partial`) its real rows weighted
        `global_batch_size / rows`, so that the replicas' mean losses summed
        over replicas (Keras scales each by 1/replicas) equal one replica's
        mean over the rows. Keras' `fit` keeps one iterator over a
        distributed dataset: give it an endless stream and `steps_per_epoch`
        (`validation_steps` for validation data).
    """
    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        return dataset
    per_replica = check_global_batch(global_batch_size, replicas)

    def pieces(context):
        local = replicas // context.num_input_pipelines
        first = context.input_pipeline_id * local

        def split(*batch):
            x, y, weights = batch if len(batch) == 3 else (*batch, None)
            rows = tf.shape(tf.nest.flatten(y)[0])[0]
            real = tf.range(global_batch_size) < rows
            scale = tf.cast(global_batch_size, tf.float32) / tf.cast(rows, tf.float32) if scale_partial else 1.0
            weight = tf.where(real, scale, 0.0)  # (global_batch_size,)
            if weights is not None:
                weight = tf.nest.map_structure(lambda w: _scaled(w, weight, rows, global_batch_size), weights)
            # each tensor: (global_batch_size, ...) -> (local replicas, per_replica, ...), this pipeline's rows
            x, y = tf.nest.map_structure(lambda t: _padded(t, rows, global_batch_size), (x, y))
            # this pipeline's rows: those of its replicas, first to last
            x, y, weight = tf.nest.map_structure(lambda t: t[first * per_replica : (first + local) * per_replica], (x, y, weight))
            shaped = tf.nest.map_structure(lambda t: tf.reshape(t, tf.concat([[local, per_replica], tf.shape(t)[1:]], 0)), (x, y, weight))
            return tf.data.Dataset.from_tensor_slices(shaped)

        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return dataset.flat_map(split).with_options(options)

    return strategy.distribute_datasets_from_function(pieces)


def _scaled(weights, row_weight, rows, size):
    """Sample weights `(rows, ...)` padded to `size` rows and multiplied by each row's weight."""
    weights = _padded(tf.cast(weights, tf.float32), rows, size)
    # row_weight: (size,) -> (size, 1, ...) to broadcast over the weights' other axes
    return weights * tf.reshape(row_weight, tf.concat([[size], tf.ones([tf.rank(weights) - 1], tf.int32)], 0))


def _padded(tensor, rows, size):
    """`tensor` (rows first) with its first row repeated up to `size` rows."""
    # indices: (size,) the real rows, then row 0 again
    indices = tf.where(tf.range(size) < rows, tf.range(size), 0)
    return tf.gather(tensor, indices)


def check_global_batch(global_batch_size, replicas):
    """The per-replica batch size; a clear error when the global batch does not divide among the replicas."""
    check_positive_int("batch_size", global_batch_size)
    if global_batch_size % replicas:
        raise ValueError(
            f"The global batch size {global_batch_size} does not divide among the {replicas} replicas: pass a "
            f"multiple of {replicas} (e.g. {replicas * max(1, global_batch_size // replicas)}), as each replica takes "
            "batch_size / replicas examples per step."
        )
    return global_batch_size // replicas
