"""tf.data helpers: text datasets to batches of BERT inputs."""

import tensorflow as tf

from bert_keras._checks import check_positive_int


def preprocess_dataset(
    dataset,
    preprocessor,
    batch_size=32,
    drop_remainder=False,
    num_parallel_calls=tf.data.AUTOTUNE,
    deterministic=True,
    prefetch=True,
):
    """Batches a dataset of texts and maps it through a `BertPreprocessor`.

    Batching first and tokenizing whole batches (vectorised, in parallel)
    is several times faster than mapping single strings.

    Args:
        dataset: `tf.data.Dataset` of unbatched elements: `text`,
            `(text, label)`, `(text, label, sample_weight)`, or with a pair
            `((text_a, text_b), label)`; texts are scalar strings.
        preprocessor: `BertPreprocessor` (or any callable taking a string
            tensor or a list of them and returning the encoder input dict).
        batch_size: int. Defaults to `32`.
        drop_remainder: bool. Drop the last, smaller batch. Defaults to `False`.
        num_parallel_calls: int. Batches preprocessed in parallel. Defaults
            to `tf.data.AUTOTUNE`.
        deterministic: bool. Keep the order of elements. Defaults to `True`.
        prefetch: bool. Prefetch batches (`tf.data.AUTOTUNE`). Defaults to `True`.

    Returns:
        A `tf.data.Dataset` of the same structure with every text replaced by
        the dict of int32 `(batch, seq_length)` encoder inputs, ready for
        `model.fit`.

    Example:
    >>> from bert_keras.text import BertPreprocessor
    >>> preprocessor = BertPreprocessor(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad"])
    >>> ds = tf.data.Dataset.from_tensor_slices((["good", "bad"], [1, 0]))
    >>> ds = preprocess_dataset(ds, preprocessor, batch_size=2)
    >>> features, labels = next(iter(ds))
    >>> sorted(features), tuple(features["input_word_ids"].shape)
    (['input_mask', 'input_type_ids', 'input_word_ids'], (2, 128))
    """
    check_positive_int("batch_size", batch_size)
    if not isinstance(dataset, tf.data.Dataset):
        raise ValueError(
            "Received an invalid value for argument `dataset`, expected a tf.data.Dataset. "
            f"Received: dataset of type {type(dataset).__name__}"
        )

    def features(texts):
        return preprocessor(list(texts) if isinstance(texts, (tuple, list)) else texts)

    def apply(*element):
        if len(element) == 1:
            return features(element[0])
        return (features(element[0]),) + tuple(element[1:])

    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    dataset = dataset.map(apply, num_parallel_calls=num_parallel_calls, deterministic=deterministic)
    if prefetch:
        dataset = dataset.prefetch(tf.data.AUTOTUNE)
    return dataset
