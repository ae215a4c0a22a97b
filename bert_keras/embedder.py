"""What every sentence-embedding model does with texts: batch them, embed them, compare the vectors.

`EmbeddingMethods` (`encode_query`, `encode_documents`, `similarity` over a
model's `encode`; defined without TensorFlow in `predictions`, for the LiteRT
engine too) is shared by the `bert_keras.tasks.sentence_encoder.SentenceEncoder`
task and the export it is loaded back as
(`bert_keras.export.sentence_encoder.ExportedSentenceEncoder`); both `encode`
through `encode_in_batches` with a `BatchEmbedder`, so a text gives the same
vector either way. This module ranks below both, which import it.
"""

import collections.abc

import numpy as np
import tensorflow as tf

from bert_keras._checks import check_positive_int
from bert_keras.predictions import EmbeddingMethods, cosine_similarity  # noqa: F401 (named here too, in __all__)

__all__ = ["BATCHES_PER_CALL", "BatchEmbedder", "EmbeddingMethods", "cosine_similarity", "encode_in_batches",
           "string_batch"]


def string_batch(texts, argument="texts"):
    """`(list_of_str_or_bytes, single)` from a str, a list / tuple of str, or a 1-D numpy array of strings."""
    if isinstance(texts, (str, bytes)):
        return [texts], True
    if isinstance(texts, np.ndarray):
        if texts.ndim != 1 or texts.dtype.kind not in "USO":
            raise ValueError(
                f"Received an invalid value for argument `{argument}`, expected a 1-D array of strings. "
                f"Received: an array of shape {texts.shape} and dtype {texts.dtype}"
            )
        texts = texts.tolist()
    elif tf.is_tensor(texts):
        if texts.dtype != tf.string or texts.shape.rank != 1:
            raise ValueError(
                f"Received an invalid value for argument `{argument}`, expected a (batch,) string tensor. "
                f"Received: dtype={texts.dtype.name}, shape={texts.shape}"
            )
        texts = texts.numpy().tolist()
    elif isinstance(texts, collections.abc.Iterable) and not isinstance(texts, collections.abc.Mapping):
        texts = list(texts)
    else:
        raise TypeError(f"Expected `{argument}` to be a str or a list of str. Received: {type(texts).__name__}")
    for index, text in enumerate(texts):
        if not isinstance(text, (str, bytes)):
            raise TypeError(
                f"Expected `{argument}` to hold strings. Received an item of type {type(text).__name__} at index {index}: {text!r}"
            )
    return texts, False


# Batches per call of `encode_in_batches`. One batch of a few dozen short texts does not keep the cores busy; with
# two independent batches in one graph, TensorFlow's executor runs the second's ops beside the first's. 2,000 tweets
# at batch 32 on 2 cores: 1.34x the texts/s of one batch per call, more than one batch of 64 gains
# (docs/sentence_embeddings.md). Three were no faster than two.
BATCHES_PER_CALL = 2


class BatchEmbedder:
    """A function from a batch of strings to embeddings, traced for one batch and for two batches in one call.

    Both run on the caller's thread (its device and distribution scopes
    hold); the two batches of a call are independent subgraphs that
    TensorFlow's executor runs at once. Each batch gives the numbers it
    gives alone.

    Args:
        embed: callable. A `(batch,)` string tensor -> float32 `(batch, dim)`
            tensor, traceable by `tf.function`.
    """

    def __init__(self, embed):
        text = tf.TensorSpec([None], tf.string)
        # The model's layers hold no Python control flow on tensors: without AutoGraph's source rewriting, the
        # first `encode` of `SentenceEncoder.from_checkpoint`'s MiniLM traced in 0.9-1.0 s against 1.25-1.6 s.
        self.one = tf.function(embed, input_signature=[text], autograph=False)
        self.two = tf.function(lambda first, second: (self.one(first), self.one(second)), input_signature=[text, text],
                               autograph=False)


def encode_in_batches(texts, batch_size, dimension, embedder):
    """`embedder` (a `BatchEmbedder`) over `texts` in batches of similar lengths (longest first), two batches per
    call (`BATCHES_PER_CALL`), rows put back in input order; float32 numpy `(len(texts), dim)`, `(dim,)` for a str."""
    texts, single = string_batch(texts)
    check_positive_int("batch_size", batch_size)
    output = np.zeros((len(texts), dimension), dtype="float32")
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # less padding per batch, as sentence-transformers
    batches = [order[start : start + batch_size] for start in range(0, len(texts), batch_size)]

    def strings(rows):
        return tf.constant([texts[i] for i in rows], dtype=tf.string)

    paired = len(batches) - len(batches) % 2 if BATCHES_PER_CALL == 2 else 0
    for index in range(0, paired, 2):
        first, second = batches[index], batches[index + 1]
        vectors = embedder.two(strings(first), strings(second))
        output[first], output[second] = (np.asarray(v) for v in vectors)
    for rows in batches[paired:]:
        output[rows] = np.asarray(embedder.one(strings(rows)))
    return output[0] if single else output
