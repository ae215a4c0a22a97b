"""The sentence-encoder export: a SavedModel from raw strings to embeddings (as the Universal Sentence Encoder).

`export_sentence_encoder` writes the model's own graph (for a
`bert_keras.sentence_encoder.SentenceEncoder`: preprocessor, padding cut,
encoder, pooling) behind `__call__` and `serving_default`;
`load_sentence_encoder` reads it back as an `ExportedSentenceEncoder`, whose
`encode` is `SentenceEncoder.encode`'s: both batch their texts through
`encode_in_batches` here (this package ranks below the tasks, which import it).
"""

import collections.abc
import json
import logging
import os

import keras
import numpy as np
import tensorflow as tf

from bert_keras._checks import check_positive_int
from bert_keras._files import directory_under, staged_directory
from bert_keras._keras_compat import variables_once, write_archive
from bert_keras.hub.loader import load

logger = logging.getLogger(__name__)

EXPORT_INFO_FILE = "sentence_encoder.json"
EXPORT_KIND = "sentence_encoder"


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


def cosine_similarity(a, b):
    """Cosine similarities of every row of `a` with every row of `b`, by one matrix product.

    Args:
        a: array `(n, dim)` or `(dim,)`.
        b: array `(m, dim)` or `(dim,)`.

    Returns:
        float32 numpy array `(n, m)`.

    Example:
    >>> cosine_similarity([[1.0, 0.0], [1.0, 1.0]], [[2.0, 0.0], [0.0, 3.0]]).round(4)
    array([[1.    , 0.    ],
           [0.7071, 0.7071]], dtype=float32)
    """
    a, b = (np.atleast_2d(np.asarray(x, dtype="float32")) for x in (a, b))
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"Expected embeddings of one dimension, (n, dim) and (m, dim). Received: {a.shape} and {b.shape}")
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)  # (n, dim)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)  # (m, dim)
    return a @ b.T  # (n, m)


class EmbeddingMethods:
    """`encode_query`, `encode_documents` and `similarity` (keras-hub's text embedder names) over `encode`."""

    def encode_query(self, queries, batch_size=32):
        """Embeddings of queries, `(n, dim)` (a single str is one query). The model has no query prompt."""
        return self.encode([queries] if isinstance(queries, str) else queries, batch_size=batch_size)

    def encode_documents(self, documents, batch_size=32):
        """Embeddings of documents, `(n, dim)` (a single str is one document)."""
        return self.encode([documents] if isinstance(documents, str) else documents, batch_size=batch_size)

    def similarity(self, query_embeddings, document_embeddings):
        """Cosine similarities `(num_queries, num_documents)` (`cosine_similarity`): dot products when normalised."""
        return cosine_similarity(query_embeddings, document_embeddings)


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
        self.one = tf.function(embed, input_signature=[text])
        self.two = tf.function(lambda first, second: (self.one(first), self.one(second)), input_signature=[text, text])


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


def export_sentence_encoder(model, export_dir, overwrite=False):
    """Exports a sentence encoder as a SavedModel that maps raw strings to embeddings (as the Universal Sentence Encoder).

    `tf.saved_model.load(export_dir)(tf.constant(["a text"]))` gives the
    float32 `(batch, dim)` embeddings; the `serving_default` signature takes
    `text` (a `(batch,)` string tensor) and returns `embeddings`.
    `bert_keras.hub.KerasLayer(export_dir)` puts it into a Keras model
    (string in, vector out). The variables travel with it (`variables`,
    `trainable_variables`); `assets.extra/sentence_encoder.json` records
    the dimension, pooling, normalisation, maximum length and source. The
    directory is written whole or not at all (`_files.staged_directory`).

    Args:
        model: a `SentenceEncoder` with a preprocessor, or another Keras
            model from one `(batch,)` string input to `(batch, dim)` vectors.
        export_dir: str. Written to a temporary sibling and moved into place.
        overwrite: bool. Replace an earlier export of this package. Defaults to `False`.

    Returns:
        `export_dir`.
    """
    _check_embedding_model(model)
    export_dir = os.fspath(export_dir)
    info = describe_model(model)

    def embed(text):
        return tf.cast(model(text, training=False), tf.float32)  # (batch, dim)

    signature = [tf.TensorSpec([None], tf.string, name="text")]
    archive = keras.export.ExportArchive()
    archive.track(model)
    variables_once(archive)  # each weight saved once (Keras lists it twice)
    archive.add_endpoint("__call__", embed, input_signature=signature)
    archive.add_endpoint("serving_default", lambda text: {"embeddings": embed(text)}, input_signature=signature)
    with staged_directory(export_dir, overwrite, kind=EXPORT_KIND, info={"dimension": info["dimension"]}) as staging:
        write_archive(archive, staging)  # each endpoint traced once
        directory_under(staging, "assets.extra", argument="export_dir")  # made now: a planted link is refused
        with open(os.path.join(staging, "assets.extra", EXPORT_INFO_FILE), "w") as f:
            json.dump(info, f, indent=2)
    logger.info("Exported the sentence encoder to %s", export_dir)
    return export_dir


def _check_embedding_model(model):
    inputs = getattr(model, "inputs", None) or []
    outputs = getattr(model, "outputs", None) or []
    takes_strings = len(inputs) == 1 and keras.backend.standardize_dtype(inputs[0].dtype) == "string"
    if not isinstance(model, keras.Model) or not takes_strings or len(outputs) != 1 or len(outputs[0].shape) != 2:
        raise ValueError(
            "Received an invalid value for argument `model`, expected a model from a (batch,) string input to "
            "(batch, dim) embeddings, such as a SentenceEncoder with a preprocessor. Received: "
            f"{type(model).__name__}" + ("" if not isinstance(model, keras.Model) else
                                         f" with inputs {[tuple(t.shape) for t in inputs]} {[str(t.dtype) for t in inputs]}")
        )


def describe_model(model):
    """What names an embedding model: its source, pooling, normalisation, maximum length and dimension.

    Read from a `SentenceEncoder`'s attributes (None where a model lacks one).
    """
    source = getattr(model, "source", None)
    preprocessor = getattr(model, "preprocessor", None)
    return {
        "source": None if source is None else os.path.abspath(source),
        "pooling": getattr(model, "pooling", None),
        "normalize": getattr(model, "normalize", None),
        "max_seq_length": getattr(preprocessor, "seq_length", None),
        "dimension": int(model.outputs[0].shape[-1]),
    }


class ExportedSentenceEncoder(EmbeddingMethods):
    """A sentence encoder loaded from `export_sentence_encoder`'s directory: `encode` as `SentenceEncoder.encode`.

    Args:
        export_dir: str. The SavedModel directory.

    Attributes:
        embedding_dim: int. The length of an embedding.
        info: dict. `assets.extra/sentence_encoder.json` (source, pooling,
            normalize, max_seq_length, dimension).
    """

    def __init__(self, export_dir):
        self.export_dir = os.fspath(export_dir)
        info_file = os.path.join(self.export_dir, "assets.extra", EXPORT_INFO_FILE)
        if not os.path.isfile(os.path.join(self.export_dir, "saved_model.pb")) or not os.path.isfile(info_file):
            raise ValueError(
                f"{self.export_dir!r} is not a sentence encoder written by export_sentence_encoder (it needs "
                f"saved_model.pb and assets.extra/{EXPORT_INFO_FILE})."
            )
        try:
            with open(info_file, encoding="utf-8") as f:
                self.info = json.load(f)
            self.embedding_dim = check_positive_int("dimension", self.info["dimension"])
        except (OSError, ValueError, TypeError, KeyError, RecursionError) as error:
            raise ValueError(f"{info_file} cannot be read ({error}): the export is damaged; export the model again.") from None
        self._saved = load(self.export_dir)
        self._embedder = BatchEmbedder(self._saved)

    def __call__(self, texts):
        """`(batch,)` strings -> `(batch, dim)` float32 tensor."""
        return self._saved(texts)

    def encode(self, texts, batch_size=32):
        """Embeddings of texts, float32 `(len(texts), dim)` in input order (`(dim,)` for a single str)."""
        return encode_in_batches(texts, batch_size, self.embedding_dim, self._embedder)


def load_sentence_encoder(export_dir):
    """Loads `export_sentence_encoder`'s directory (tensorflow-text's ops registered first): an `ExportedSentenceEncoder`."""
    return ExportedSentenceEncoder(export_dir)
