"""The sentence-encoder export: a SavedModel from raw strings to embeddings (as the Universal Sentence Encoder).

`export_sentence_encoder` writes the model's own graph (for a
`bert_keras.sentence_encoder.SentenceEncoder`: preprocessor, padding cut,
encoder, pooling) behind `__call__` and `serving_default`;
`load_sentence_encoder` reads it back as an `ExportedSentenceEncoder`, whose
`encode` is `SentenceEncoder.encode`'s: both batch their texts through
`bert_keras.embedder.encode_in_batches` and share its `EmbeddingMethods`.
"""

import json
import logging
import os

import keras
import tensorflow as tf

from bert_keras._checks import check_positive_int
from bert_keras._files import directory_under, staged_directory
from bert_keras._keras_compat import variables_once, write_archive
from bert_keras.embedder import BatchEmbedder, EmbeddingMethods, encode_in_batches
from bert_keras.hub.loader import load

logger = logging.getLogger(__name__)

EXPORT_INFO_FILE = "sentence_encoder.json"
EXPORT_KIND = "sentence_encoder"


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
