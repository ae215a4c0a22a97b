"""Labelled text from users' files (CSV, TSV, JSONL), and stratified splits.

Departure from the layout in DESIGN.md: reading labelled files is shared by
`finetune` and the CLI, so it lives in its own module rather than in `cli.py`.
"""

import csv
import dataclasses
import io
import json
import os

import numpy as np

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}


class DataError(ValueError):
    """A labelled-text file that cannot be used; the message names the file and the place."""


@dataclasses.dataclass
class LabelledText:
    """Texts (and optional second texts), integer labels, and the label names they index."""

    texts: list
    labels: np.ndarray
    label_names: list
    text_pairs: list = None

    def __len__(self):
        return len(self.texts)

    def subset(self, indices):
        indices = np.asarray(indices, dtype=int)
        return LabelledText(
            texts=[self.texts[i] for i in indices],
            labels=self.labels[indices],
            label_names=self.label_names,
            text_pairs=None if self.text_pairs is None else [self.text_pairs[i] for i in indices],
        )


def _decode(path, data):
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise DataError(
            f"{path}: line {line} is not valid UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start}). "
            "Re-encode the file as UTF-8."
        ) from None


def _rows(path, text, fmt):
    """Yields `(line_number, row_dict)`; trailing newlines at the end of the file are fine."""
    text = text.rstrip("\r\n")
    if fmt == "jsonl":
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                raise DataError(f"{path}: line {number} is empty. Remove empty lines from the file.")
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataError(f"{path}: line {number} is not valid JSON ({error.msg}).") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}: line {number} is not a JSON object.")
            yield number, row
        return
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t" if fmt == "tsv" else ",")
    header = next(reader, None)
    for row in reader:
        if not row or all(not cell.strip() for cell in row):
            raise DataError(f"{path}: line {reader.line_num} is empty. Remove empty lines from the file.")
        yield reader.line_num, dict(zip(header, row))


def _columns(path, text, fmt):
    if fmt == "jsonl":
        for line in text.split("\n"):
            if line.strip():
                try:
                    return list(json.loads(line))
                except (json.JSONDecodeError, TypeError):
                    return []
        return []
    return next(csv.reader(io.StringIO(text, newline=""), delimiter="\t" if fmt == "tsv" else ","), [])


def read_labelled_file(path, text_column="text", label_column="label", text_pair_column=None, label_names=None, fmt=None):
    """Reads labelled examples from a CSV, TSV or JSONL file.

    Args:
        path: str. The file; its format comes from the extension unless `fmt` is given.
        text_column: str. Column (or JSON key) of the text. Defaults to `"text"`.
        label_column: str. Column of the label. Defaults to `"label"`.
        text_pair_column: optional str. Column of a second text (sentence pairs).
        label_names: optional list of str. Fixes the label order (e.g. the
            training file's labels when reading a test file); a label outside
            it is an error. By default the sorted distinct labels.
        fmt: optional `"csv"`, `"tsv"` or `"jsonl"`.

    Returns:
        `LabelledText`.

    Raises:
        FileNotFoundError: the file does not exist.
        DataError: empty file, missing column, invalid UTF-8, empty line or
            text, unknown label; the message names the file and the line.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file.")
    fmt = fmt or FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt not in ("csv", "tsv", "jsonl"):
        raise DataError(f"{path}: unknown format; use a .csv, .tsv or .jsonl file (or pass the format).")
    with open(path, "rb") as f:
        text = _decode(path, f.read())
    if not text.strip():
        raise DataError(f"{path} is empty: expected one labelled example per line.")
    columns = _columns(path, text, fmt)
    wanted = [c for c in (text_column, label_column, text_pair_column) if c is not None]
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {missing}. Columns found: {columns}.")

    texts, pairs, raw_labels = [], [], []
    for number, row in _rows(path, text, fmt):
        value = row.get(text_column)
        if value is None or not str(value).strip():
            raise DataError(f"{path}: line {number} has an empty `{text_column}`.")
        label = row.get(label_column)
        if label is None or str(label).strip() == "":
            raise DataError(f"{path}: line {number} has an empty `{label_column}`.")
        texts.append(str(value))
        raw_labels.append(str(label).strip())
        if text_pair_column is not None:
            pairs.append(str(row.get(text_pair_column) or ""))
    if not texts:
        raise DataError(f"{path} holds a header but no examples.")
    names = sorted(set(raw_labels)) if label_names is None else list(label_names)
    unknown = sorted(set(raw_labels) - set(names))
    if unknown:
        raise DataError(
            f"{path}: label(s) {unknown} do not occur in the training data (labels there: {names}). "
            "A model cannot predict a class it was not trained on."
        )
    index = {name: i for i, name in enumerate(names)}
    return LabelledText(
        texts=texts,
        labels=np.array([index[label] for label in raw_labels], dtype="int32"),
        label_names=names,
        text_pairs=pairs if text_pair_column is not None else None,
    )


def stratified_split(labels, fractions, seed=0):
    """Splits example indices by class, keeping class shares in every part.

    Args:
        labels: 1-D array of integer labels.
        fractions: sequence of floats summing to at most 1, e.g. `(0.8, 0.1, 0.1)`.
        seed: int. Defaults to `0`.

    Returns:
        A list of index arrays, one per fraction, each shuffled.
    """
    labels = np.asarray(labels)
    if sum(fractions) > 1 + 1e-9 or any(f <= 0 for f in fractions):
        raise ValueError(f"Expected positive `fractions` summing to at most 1. Received: fractions={fractions!r}")
    rng = np.random.default_rng(seed)
    parts = [[] for _ in fractions]
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        bounds = np.floor(np.cumsum([0.0] + list(fractions)) * len(members)).astype(int)
        for i in range(len(fractions)):
            parts[i].extend(members[bounds[i] : bounds[i + 1]])
    return [rng.permutation(np.array(part, dtype=int)) for part in parts]
