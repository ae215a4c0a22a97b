"""The sentence-encoder export: a SavedModel from raw strings to embeddings (as the Universal Sentence Encoder).

`export_sentence_encoder` writes the model's own graph (for a
`bert_keras.tasks.sentence_encoder.SentenceEncoder`: preprocessor, padding cut,
encoder, pooling) behind `__call__` and `serving_default`;
`load_sentence_encoder` reads it back as an `ExportedSentenceEncoder`, whose
`encode` is the kind's (`kinds.sentence_encoder`, which the LiteRT file's
`encode` runs too): batches of similar lengths, two per call of the model as
`SentenceEncoder.encode` runs them (`bert_keras.embedder`), with its
`EmbeddingMethods`.
"""

import logging
import os

import numpy as np
import tensorflow as tf

from bert_keras._checks import check_positive_int
from bert_keras.embedder import BATCHES_PER_CALL, BatchEmbedder, EmbeddingMethods, encode_in_batches, string_batch
from bert_keras.export.kinds.sentence_encoder import SentenceEncoderAnswers
from bert_keras.export.loaded import LoadedExport
from bert_keras.export.manifest import SENTENCE_ENCODER, ExportError

logger = logging.getLogger(__name__)



def export_sentence_encoder(model, export_dir, overwrite=False):
    """Exports a sentence encoder as a SavedModel that maps raw strings to embeddings (as the Universal Sentence Encoder).

    `tf.saved_model.load(export_dir)(tf.constant(["a text"]))` gives the
    float32 `(batch, dim)` embeddings; the `serving_default` signature takes
    `text` (a `(batch,)` string tensor) and returns `embeddings`.
    `bert_keras.hub.KerasLayer(export_dir)` puts it into a Keras model
    (string in, vector out). The variables travel with it (`variables`,
    `trainable_variables`); the manifest (`assets.extra/export.json`) records
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
    # The writer (Keras): imported where an export is written, so that loading one imports no Keras.
    from bert_keras.export._writer import ids_endpoints, write_export

    _check_embedding_model(model)
    export_dir = os.fspath(export_dir)
    info = describe_model(model)

    def embed(text):
        return tf.cast(model(text, training=False), tf.float32)  # (batch, dim)

    signature = [tf.TensorSpec([None], tf.string, name="text")]
    endpoints = [("__call__", embed, signature), ("serving_default", lambda text: {"embeddings": embed(text)}, signature)]
    pooling, encoder = getattr(model, "pooling_layer", None), getattr(model, "encoder", None)
    if pooling is not None and encoder is not None:  # a SentenceEncoder: its pooling of the encoder's tokens

        def embeddings_of_ids(packed, padded=False):  # (batch, dim)
            if padded:  # the padded layout, fewer ops (what LiteRT converts)
                sequence = encoder.padded_outputs(packed)["sequence_output"]  # (batch, seq, hidden)
            else:
                sequence = encoder(packed, training=False)["sequence_output"]  # (batch, seq, hidden)
            return {"embeddings": tf.cast(pooling(sequence, packed["input_mask"]), tf.float32)}

        padded = (lambda packed: embeddings_of_ids(packed, padded=True)) if hasattr(encoder, "padded_outputs") else None
        endpoints += ids_endpoints(embeddings_of_ids, padded)
    write_export(model, export_dir, kind=SENTENCE_ENCODER, overwrite=overwrite, settings=info, endpoints=endpoints,
                 marker_info={"dimension": info["dimension"]}, preprocessor=getattr(model, "preprocessor", None))
    logger.info("Exported the sentence encoder to %s", export_dir)
    return export_dir


def _check_embedding_model(model):
    import keras  # the writer's: see export_sentence_encoder

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


class ExportedSentenceEncoder(EmbeddingMethods, SentenceEncoderAnswers, LoadedExport):
    """A sentence encoder loaded from `export_sentence_encoder`'s directory: `encode` as `SentenceEncoder.encode`.

    Args:
        export_dir: str. The SavedModel directory.

    Attributes:
        embedding_dim: int. The length of an embedding.
        info: dict. The export's settings (source, pooling, normalize,
            max_seq_length, dimension).
    """

    kind = SENTENCE_ENCODER
    expected = "a `serving_default` signature from a string tensor `text` to `embeddings` (batch, dim)"
    # Its requests run `serving_default`; the export's `__call__` (for `hub.KerasLayer`, as the Universal Sentence
    # Encoder's) holds the model once more: a MiniLM encoder's load took 2.0 s with it, 1.1 s without (2-core EPYC).
    left_out = ("__call__",)

    def __init__(self, export_dir):
        super().__init__(export_dir, warm_up=False)

    def _check_signatures(self):
        self.info = self.settings()
        try:
            self.embedding_dim = check_positive_int("dimension", self.info.get("dimension"))
        except (ValueError, TypeError) as error:
            raise ExportError(f"The manifest of {self.export_dir} holds no usable dimension ({error}): the export is "
                              "damaged; export the model again.") from None
        signature = self.serving_signature()
        outputs = signature.structured_outputs
        if list(outputs) != ["embeddings"] or outputs["embeddings"].shape[-1] != self.embedding_dim:
            raise self._refuse(f"its outputs are {dict((n, str(spec.shape)) for n, spec in outputs.items())}")
        self._embedder = BatchEmbedder(lambda texts: signature(text=texts)["embeddings"])

    def __call__(self, texts):
        """`(batch,)` strings -> `(batch, dim)` float32 tensor (`serving_default`)."""
        return self.serving_signature()(text=tf.convert_to_tensor(texts, tf.string))["embeddings"]

    _text_batch = staticmethod(string_batch)  # a string tensor too

    def _embed_batches(self, batches):
        """Each batch's embeddings, `BATCHES_PER_CALL` batches per call of the model (their graphs run at once)."""
        for begin in range(0, len(batches), BATCHES_PER_CALL):
            strings = [tf.constant(texts, dtype=tf.string) for texts in batches[begin : begin + BATCHES_PER_CALL]]
            with self.requesting():
                vectors = self._embedder.two(*strings) if len(strings) == 2 else [self._embedder.one(strings[0])]
            yield from (np.asarray(v) for v in vectors)

    def _instantiate(self):
        for texts in (["a"], ["a", "b"]):  # one batch a call, then two
            encode_in_batches(texts, 1, self.embedding_dim, self._embedder)


def load_sentence_encoder(export_dir):
    """Loads `export_sentence_encoder`'s directory (tensorflow-text's ops registered first): an `ExportedSentenceEncoder`."""
    return ExportedSentenceEncoder(export_dir)
