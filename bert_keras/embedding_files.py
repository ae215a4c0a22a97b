"""Embedding files: the embeddings of a stream of texts written to a `.npy` or `.jsonl` file, whole or not at all.

`write_embeddings` is what `bert-keras embed` runs; `stream_embeddings` is
the streamed writer it shares with `bert_keras.search.build_index`: texts are
read and embedded a few batches at a time, so memory does not grow with
their number. The model is anything with `encode(texts, batch_size)` and
`embedding_dim` (a `SentenceEncoder` or a loaded export).
"""

import contextlib
import json
import os
import tempfile

import numpy as np

from bert_keras._checks import check_positive_int

__all__ = ["write_embeddings"]

ROWS_PER_CHUNK = 65536  # rows of the vectors read at a time (searching, copying, checking): 100 MB at dim 384


def _chunks(texts, size):
    chunk = []
    for text in texts:
        chunk.append(text)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _embed_stream(model, texts, batch_size, progress):
    """`(texts, vectors)` per chunk of a stream of texts: sixteen batches at a time, sorted by length within."""
    check_positive_int("batch_size", batch_size)
    done = 0
    for chunk in _chunks(texts, 16 * batch_size):
        vectors = np.asarray(model.encode(chunk, batch_size=batch_size), dtype="float32")
        done += len(chunk)
        if progress is not None:
            progress(done)
        yield chunk, vectors


def _npy_from_raw(raw_path, npy_path, rows, dimension):
    """Writes `rows x dimension` float32 values of a raw file as a `.npy` file, a chunk at a time."""
    target = np.lib.format.open_memmap(npy_path, mode="w+", dtype="float32", shape=(rows, dimension))
    if rows:
        source = np.memmap(raw_path, dtype="float32", mode="r", shape=(rows, dimension))
        for start in range(0, rows, ROWS_PER_CHUNK):
            target[start : start + ROWS_PER_CHUNK] = source[start : start + ROWS_PER_CHUNK]
        del source
    target.flush()
    del target


def stream_embeddings(model, texts, path, kind, batch_size, progress, texts_path=None):
    """Streams the embeddings of `texts` into `path` (`kind`: `"npy"` or `"jsonl"`), and with `texts_path` the
    texts into that file, one JSON string per line (an index's `texts.jsonl`); returns the number of texts."""
    raw = path + ".raw"
    count = 0
    with open(path if kind == "jsonl" else raw, "wb") as out, (
        open(texts_path, "w", encoding="utf-8") if texts_path is not None else contextlib.nullcontext()
    ) as text_out:
        for chunk, vectors in _embed_stream(model, texts, batch_size, progress):
            if kind == "jsonl":
                out.write("".join(json.dumps({"text": t, "embedding": v.tolist()}, ensure_ascii=False) + "\n"
                                  for t, v in zip(chunk, vectors)).encode("utf-8"))
            else:
                out.write(vectors.tobytes())
            if text_out is not None:
                text_out.write("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in chunk))
            count += len(chunk)
    if kind != "jsonl":
        _npy_from_raw(raw, path, count, model.embedding_dim)
        os.remove(raw)
    return count


def write_embeddings(model, texts, out, batch_size=32, progress=None):
    """Writes the embeddings of a stream of texts to a new `.npy` or `.jsonl` file, whole or not at all.

    The texts are read and embedded a few batches at a time (memory does not
    grow with their number); the file is written under a hidden temporary
    name next to `out` and linked into place at the end: nothing appears at
    `out` if anything fails (a bad input record, a full disk), and an
    existing file is never replaced.

    Args:
        model: a `SentenceEncoder` or a loaded export (anything with
            `encode(texts, batch_size)` and `embedding_dim`).
        texts: an iterable of str, read once, in order (a blank text is
            embedded too, so that rows line up with the input).
        out: str. `FILE.npy` (a float32 `(n, dim)` array) or `FILE.jsonl`
            (one `{"text": ..., "embedding": [...]}` per line).
        batch_size: int. Texts per model call. Defaults to `32`.
        progress: optional callable, called with the number of texts done.

    Returns:
        The number of texts embedded.

    Raises:
        FileExistsError: `out` exists (checked first, and again at the end).
        ValueError: `out` ends neither in `.npy` nor in `.jsonl`.
    """
    out = os.fspath(out)
    kind = os.path.splitext(out)[1].lower().lstrip(".")
    if kind not in ("npy", "jsonl"):
        raise ValueError(f"Received an invalid value for `out`, expected a .npy or .jsonl file. Received: out={out!r}")
    if os.path.lexists(out):
        raise FileExistsError(f"{out!r} exists; it is never replaced. Pick another name, or remove it yourself.")
    parent = os.path.dirname(os.path.abspath(out))
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.partial-", dir=parent)
    try:
        count = stream_embeddings(model, texts, os.path.join(staging, os.path.basename(out)), kind, batch_size, progress)
        os.link(os.path.join(staging, os.path.basename(out)), out)  # fails, replacing nothing, if `out` appeared
    finally:
        for name in os.listdir(staging):
            os.remove(os.path.join(staging, name))
        os.rmdir(staging)
    return count
