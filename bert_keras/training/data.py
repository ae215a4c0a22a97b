"""Datasets the recipes feed to the harness: labelled texts as batches whose epochs depend on their index alone."""

import numpy as np
import tensorflow as tf


def text_dataset(data, batch_size, shuffle_seed=None, class_weight=None):
    """Batches of `(texts, labels)` (`((texts, pairs), labels)` for pairs) from labelled texts.

    Without `shuffle_seed`: one pass in the data's order (finite). With it:
    an endless stream of passes, pass `k` in the order of a stateless shuffle
    seeded by `(shuffle_seed, k)` and batched on its own; so the batches of an
    epoch depend on its index alone, and a resumed run (which skips the epochs
    it has done) is fed exactly what an uninterrupted one would be. Pass
    `steps_per_epoch=math.ceil(len(data) / batch_size)` to `fit`.

    Args:
        data: a `bert_keras.data.texts.LabelledText`.
        batch_size: int.
        shuffle_seed: optional int.
        class_weight: optional dict of class id -> weight: then the batches
            are `(x, y, sample_weight)` with each example weighted by its
            class (what `fit(class_weight=...)` does, which distributed
            datasets do not take).
    """
    texts = tf.constant(data.texts, dtype=tf.string)
    features = texts if data.text_pairs is None else (texts, tf.constant(data.text_pairs, dtype=tf.string))
    labels = tf.constant(data.labels, dtype=tf.int32)
    columns = (features, labels)
    if class_weight is not None:
        table = np.ones(len(data.label_names), dtype=np.float32)
        for label, weight in class_weight.items():
            table[int(label)] = weight
        columns = (features, labels, tf.gather(tf.constant(table), labels))
    return example_dataset(columns, len(data), batch_size, shuffle_seed)


def example_dataset(columns, size, batch_size, shuffle_seed=None):
    """Batches of `columns` (a nest of tensors whose first dimension is `size`), in order or shuffled per epoch.

    Without `shuffle_seed`: one pass in order (finite). With it: an endless
    stream of passes, pass `k` in the order of a stateless shuffle seeded by
    `(shuffle_seed, k)` and batched on its own (see `text_dataset`).
    """
    if shuffle_seed is None:
        return tf.data.Dataset.from_tensor_slices(columns).batch(batch_size).prefetch(tf.data.AUTOTUNE)

    def one_pass(index):
        # order: (size,) a permutation that depends on (shuffle_seed, index) only
        order = tf.random.experimental.stateless_shuffle(tf.range(size), seed=tf.stack([tf.constant(shuffle_seed, tf.int64), index]))
        return tf.data.Dataset.from_tensor_slices(order).batch(batch_size)

    def gather(indices):
        return tf.nest.map_structure(lambda tensor: tf.gather(tensor, indices), columns)

    return tf.data.Dataset.counter().flat_map(one_pass).map(gather).prefetch(tf.data.AUTOTUNE)
