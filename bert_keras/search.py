"""Semantic search: an index directory of a stream of texts' embeddings, and exact cosine search over it.

`build_index` embeds texts into an index directory (what `bert-keras index`
writes), `load_index` opens one as a `SentenceIndex` (checked as it is
read: an index is data), and `SentenceIndex.search` finds the nearest texts
of queries by exact cosine similarity. `model_identity` is what an index
records of the model that wrote it; `load_embedding_model` rebuilds that
model from the record, reading it only as weights, never as a graph.
"""

import json
import os
import shlex

import numpy as np

from bert_keras._checks import NotRegularFileError, check_int, check_positive_int, check_regular_file, open_regular_file
from bert_keras._files import staged_directory
from bert_keras.checkpoints import ModuleRefusedError
from bert_keras.embedding_files import ROWS_PER_CHUNK, stream_embeddings
from bert_keras.export.kinds.sentence_encoder import SentenceEncoderAnswers
from bert_keras.export.sentence_encoder import ExportedSentenceEncoder, describe_model
from bert_keras.tasks.sentence_encoder import SentenceEncoder

__all__ = ["SentenceIndex", "build_index", "load_embedding_model", "load_index", "model_identity"]

INDEX_FORMAT = "bert_keras.sentence_index"
INDEX_KIND = "sentence_index"
INDEX_FILE = "index.json"
VECTORS_FILE = "vectors.npy"
TEXTS_FILE = "texts.jsonl"
# Embedded with every index: a query model that gives another vector for it is another model.
PROBE_TEXT = "bert-keras index probe: is this the model that wrote the index?"
_PROBE_TOLERANCE = 1e-4


def model_identity(model):
    """What an index records of the model that wrote it: a `SentenceEncoder`'s source, pooling, normalisation,
    maximum length and dimension, or for a loaded export (a directory, or its `.tflite` file) where it is (`export`)
    and its recorded description."""
    if isinstance(model, ExportedSentenceEncoder):
        return dict(model.info, export=os.path.abspath(model.export_dir))
    if isinstance(model, SentenceEncoderAnswers):  # the LiteRT engine's (`LiteRTSentenceEncoder`)
        return dict(model.info, export=os.path.abspath(model.path))
    return describe_model(model)


def load_embedding_model(identity, recorded_in=INDEX_FILE):
    """The model an index names (`model_identity`), read only as weights: an index is data, never a module to run.

    A recorded checkpoint is read as weights (Hugging Face, sentence-transformers,
    Google BERT, keras-nlp), configured as it was. A recorded export, or a
    source that is a TF Hub module, is a SavedModel whose graph runs when it
    is loaded: it is refused, with the flag that loads it when the user names
    it (`--model` / `--checkpoint`; in Python `load_sentence_encoder`,
    `SentenceEncoder.from_checkpoint`).

    Args:
        identity: dict. What the index records of its model (`SentenceIndex.model`).
        recorded_in: str. The file the record came from, named in messages.

    Raises:
        ModuleRefusedError: the record names an export or a module.
        ValueError: the record names no model, or has fields of the wrong type.
    """
    export, source = identity.get("export"), identity.get("source")
    if export:
        raise ModuleRefusedError(
            recorded_in, None, f"records the export {_shown_path(export)} as the model that wrote the index. An export "
            "is a SavedModel, whose graph runs when it is loaded, and an index is data: the model it records is read "
            "only as weights, never loaded as a graph. If you trust that export, pass it yourself: --model "
            f"{_shown_path(export)} (in Python: bert_keras.export.load(path)).")
    if not source:
        raise ValueError(f"{recorded_in} names no model it could load (it was written by a model built in Python).")
    pooling, normalize, length = identity.get("pooling"), identity.get("normalize"), identity.get("max_seq_length")
    modes = [pooling] if isinstance(pooling, str) else pooling
    if not (isinstance(source, str) and isinstance(modes, list) and modes and all(isinstance(m, str) for m in modes)
            and isinstance(normalize, bool) and (length is None or type(length) is int)):
        raise ValueError(
            f"{recorded_in} records its model as {json.dumps(identity, default=str)[:300]}; expected a string `source`, a "
            "`pooling` mode (a string or a list of strings), a boolean `normalize` and an integer (or null) "
            "`max_seq_length`: the index is damaged; build it again.")
    try:
        return SentenceEncoder.from_checkpoint(source, pooling=pooling, normalize=normalize, max_seq_length=length,
                                               allow_modules=False)
    except ModuleRefusedError:
        # The flags that rebuild the recorded model from the module, so that the probe check passes when it is that model.
        flags = (f"--checkpoint {_shown_path(source)} --pooling {_shown_path(','.join(modes))}"
                 + (" --normalize" if normalize else "") + ("" if length is None else f" --max-seq-length {length}"))
        raise ModuleRefusedError(
            recorded_in, None, f"records {_shown_path(source)} as the source of its model, and it is (or names) a TF "
            "Hub module: a SavedModel, whose graph runs when it is loaded. An index is data: the model it records is "
            "read only as weights (a Hugging Face, sentence-transformers, Google BERT or keras-nlp checkpoint), never "
            f"loaded as a graph. If you trust that module, pass it yourself: {flags} (in Python: "
            "SentenceEncoder.from_checkpoint(path, ...)).") from None


def _shown_path(path):
    """A recorded path as a message shows it: ready to paste into a shell, or escaped when it holds control characters
    (a path read from a file must not drive the terminal it is printed on)."""
    path = str(path)
    return shlex.quote(path) if path.isprintable() else ascii(path)


def build_index(model, texts, index_dir, batch_size=32, overwrite=False, input_name=None, progress=None):
    """Embeds a stream of texts into an index directory for `load_index(...).search`, whole or not at all.

    The directory holds `vectors.npy` (float32 `(n, dim)`, the model's
    embeddings as `encode` gives them), `texts.jsonl` (one JSON string per
    line, in order) and `index.json` (count, dimension, the model that wrote
    it (`model_identity`), and the embedding of a probe text, by which a
    query model is checked to be the same model). It is written through
    `bert_keras._files.staged_directory`: a failure leaves `index_dir` as
    it was.

    Args:
        model: a `SentenceEncoder` or a loaded export.
        texts: an iterable of str, read once, in order.
        index_dir: str. The index directory.
        batch_size: int. Texts per model call. Defaults to `32`.
        overwrite: bool. Replace an earlier index (or output) of this package. Defaults to `False`.
        input_name: optional str. What the texts came from, recorded in `index.json`.
        progress: optional callable, called with the number of texts done.

    Returns:
        The `SentenceIndex`.
    """
    index_dir = os.fspath(index_dir)
    identity = model_identity(model)
    probe = np.asarray(model.encode([PROBE_TEXT]), dtype="float32")[0]
    with staged_directory(index_dir, overwrite, kind=INDEX_KIND, argument="index directory") as staging:
        count = stream_embeddings(model, texts, os.path.join(staging, VECTORS_FILE), "npy", batch_size, progress,
                                  texts_path=os.path.join(staging, TEXTS_FILE))
        with open(os.path.join(staging, INDEX_FILE), "w", encoding="utf-8") as f:
            json.dump({
                "format": INDEX_FORMAT, "version": 1, "count": count, "dimension": model.embedding_dim,
                "model": identity, "input": input_name, "probe": {"text": PROBE_TEXT, "embedding": probe.tolist()},
            }, f, indent=2, ensure_ascii=False)
    return load_index(index_dir)


class SentenceIndex:
    """An index directory written by `build_index`, checked as it is opened; exact cosine search over it.

    Args:
        index_dir: str.

    Attributes:
        count: int. The number of texts.
        dimension: int. The length of an embedding.
        model: dict. The model that wrote it (`model_identity`).
        texts: list of str, in index order.
        vectors: float32 `(count, dimension)` array, read from disk as needed (a memory map).

    Raises:
        ValueError: naming the file and what is wrong: a file that is not a
            regular file (a FIFO, a device), no `index.json` of this format, a vectors file that cannot be read, of another
            shape or dtype, or with values that are not finite, a probe
            embedding that is not `dimension` finite numbers, a texts file
            of another length.
    """

    def __init__(self, index_dir):
        self.index_dir = os.fspath(index_dir)
        info_path = os.path.join(self.index_dir, INDEX_FILE)
        try:
            with open_regular_file(info_path, "r", encoding="utf-8") as f:
                info = json.load(f)
            if not isinstance(info, dict) or info.get("format") != INDEX_FORMAT:
                raise ValueError(f"it is not a {INDEX_FORMAT} description")
            self.count = check_int("count", info["count"], minimum=0)
            self.dimension = check_positive_int("dimension", info["dimension"])
            self.model = dict(info["model"])
            probe = info["probe"]["embedding"]
        except FileNotFoundError:
            raise ValueError(f"{self.index_dir!r} is not an index written by bert-keras index (no {INDEX_FILE}).") from None
        except NotRegularFileError:  # a ValueError naming the file: a FIFO, a device
            raise
        except (OSError, ValueError, TypeError, KeyError, RecursionError) as error:
            raise ValueError(f"{info_path} cannot be read as an index description ({error}).") from None
        # The probe is what tells the index's model from another (`check_model`): a NaN compares as no difference
        # and an empty or shorter one does not compare at all, so either would let any model search the index.
        self._probe = self._read_probe(probe, info_path)
        self.vectors = self._read_vectors()
        self.texts = self._read_texts()

    def _read_probe(self, probe, info_path):
        """The probe embedding of `index.json`: `dimension` finite float32 numbers, or a ValueError naming the file."""
        try:
            with np.errstate(over="ignore"):  # a number beyond float32 becomes inf, refused below with a message
                array = np.asarray(probe, dtype="float32")  # (dimension,)
        except (ValueError, TypeError, OverflowError, RecursionError):
            array = None
        if array is None:
            found = "values that are not numbers"
        elif array.shape != (self.dimension,):
            found = f"shape {array.shape}"
        elif not np.isfinite(array).all():
            found = "values that are not finite"  # NaN, or beyond float32's range (1e39 -> inf)
        else:
            return array
        raise ValueError(f"{info_path}: its probe embedding must be {self.dimension} finite numbers (the index's "
                         f"dimension); found {found}: the index is damaged; build it again.")

    def _read_vectors(self):
        path = os.path.join(self.index_dir, VECTORS_FILE)
        try:
            vectors = np.load(check_regular_file(path), mmap_mode="r", allow_pickle=False)
        except NotRegularFileError:
            raise
        except (OSError, ValueError, EOFError) as error:
            raise ValueError(f"{path} cannot be read as a .npy array ({error}): the index is damaged; build it again.") from None
        if vectors.dtype != np.float32 or vectors.shape != (self.count, self.dimension):
            raise ValueError(
                f"{path} holds a {vectors.dtype} array of shape {vectors.shape}, but {INDEX_FILE} describes "
                f"float32 ({self.count}, {self.dimension}): the index is damaged; build it again."
            )
        self._inverse_norms = np.empty(self.count, dtype="float32")  # (count,): cosines from dot products
        for start in range(0, self.count, ROWS_PER_CHUNK):
            rows = np.asarray(vectors[start : start + ROWS_PER_CHUNK])
            if not np.isfinite(rows).all():
                raise ValueError(f"{path} holds values that are not finite: the index is damaged; build it again.")
            self._inverse_norms[start : start + len(rows)] = 1.0 / np.maximum(np.linalg.norm(rows, axis=1), 1e-12)
        return vectors

    def _read_texts(self):
        path = os.path.join(self.index_dir, TEXTS_FILE)
        try:
            with open_regular_file(path, "r", encoding="utf-8") as f:
                texts = [json.loads(line) for line in f]
        except NotRegularFileError:
            raise
        except (OSError, ValueError) as error:
            raise ValueError(f"{path} cannot be read ({error}): the index is damaged; build it again.") from None
        if len(texts) != self.count or not all(isinstance(text, str) for text in texts):
            raise ValueError(f"{path} holds {len(texts)} lines for {self.count} vectors: the index is damaged; build it again.")
        return texts

    def check_model(self, model):
        """Raises a `ValueError` unless `model` is the model that wrote the index (its dimension, then its probe vector)."""
        dimension = int(model.embedding_dim)
        recorded = self.model.get("export") or self.model.get("source")
        written_by = _shown_path(recorded) if recorded else "a model built in Python"
        if dimension != self.dimension:
            raise ValueError(
                f"Dimension mismatch: the index {self.index_dir!r} holds {self.dimension}-dimensional vectors (written by "
                f"{written_by}), but the query model gives {dimension}. Search with the model that wrote the index."
            )
        probe = np.asarray(model.encode([PROBE_TEXT]), dtype="float32")[0]
        difference = float(np.max(np.abs(probe - self._probe)))
        if difference > _PROBE_TOLERANCE:
            raise ValueError(
                f"The index {self.index_dir!r} was written by another model ({written_by}, pooling "
                f"{self.model.get('pooling')!r}): the query model embeds its probe text differently (max difference "
                f"{difference:.3g}). Search with the model that wrote the index, or build the index again."
            )

    def search(self, query_vectors, top_k=10):
        """The `top_k` texts of highest cosine similarity to each query, exactly (matrix products over all rows).

        Args:
            query_vectors: float array `(q, dim)` (or `(dim,)`).
            top_k: int. Results per query (at most `count`). Defaults to `10`.

        Returns:
            `(indices, scores)`: int64 and float32 arrays `(q, k)`, best first
            (ties: the earlier text first).
        """
        check_positive_int("top_k", top_k)
        queries = np.atleast_2d(np.asarray(query_vectors, dtype="float32"))  # (q, dim)
        if queries.shape[1] != self.dimension:
            raise ValueError(f"Expected queries of dimension {self.dimension}. Received: shape {queries.shape}")
        queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        k = min(top_k, self.count)
        best_scores = np.full((len(queries), 0), -np.inf, dtype="float32")
        best_indices = np.zeros((len(queries), 0), dtype="int64")
        for start in range(0, self.count, ROWS_PER_CHUNK):
            rows = np.asarray(self.vectors[start : start + ROWS_PER_CHUNK])  # (chunk, dim)
            chunk = (queries @ rows.T) * self._inverse_norms[start : start + len(rows)]  # (q, chunk) cosines
            kept_scores, kept_indices = [], []
            for query in range(len(queries)):
                # The candidates: every row scoring at least the chunk's k-th best (ties at the edge included), with
                # the best kept so far; sorted by score, then the earlier text. A partition, not a sort of the chunk.
                row = chunk[query]
                kth = np.partition(row, len(row) - min(k, len(row)))[len(row) - min(k, len(row))]
                candidates = np.flatnonzero(row >= kth)
                scores = np.concatenate([best_scores[query], row[candidates]])
                indices = np.concatenate([best_indices[query], candidates + start])
                order = np.lexsort((indices, -scores))[:k]
                kept_scores.append(scores[order])
                kept_indices.append(indices[order])
            best_scores, best_indices = np.stack(kept_scores), np.stack(kept_indices)
        return best_indices, best_scores


def load_index(index_dir):
    """Opens an index written by `build_index` (see `SentenceIndex`)."""
    return SentenceIndex(index_dir)
