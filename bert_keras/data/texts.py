"""Users' text files, read one record at a time: CSV, TSV, JSON, JSONL, or one text per line.

One reader serves every command that reads users' files: `read_texts`
streams the texts of a file or of standard input (`bert-keras predict`), and
`read_labelled_file` reads labelled examples (fine-tuning, `bert-keras
evaluate` and `probe`) through the same record reader
(`bert_keras.data._records`), so the same files are accepted and bad ones are
refused with the same messages, each naming the file (or standard input) and
the line where the record starts. The caller names its own arguments in
those messages (`arguments=`, e.g. the command line's `--delimiter`).
`stratified_split` splits labelled examples.

It sits in `bert_keras.data` with the other readers of users' files, not in
`bert_keras.text`: it imports no TensorFlow, so the command line reads and
checks its input before TensorFlow loads.
"""

import contextlib
import dataclasses
import math
import os
import re

import numpy as np

from bert_keras._checks import check_regular_file
from bert_keras.data._records import (
    DELIMITERS,
    FIELD_SIZE_LIMIT,
    STANDARD_INPUT,
    DataError,
    decoded_lines,
    delimited_records,
    open_file,
    parse_line,
    place,
    read_rows,
)

__all__ = [
    "FIELD_SIZE_LIMIT",
    "FORMATS",
    "STANDARD_INPUT",
    "DataError",
    "LabelledText",
    "delimited_records",
    "read_labelled_file",
    "read_texts",
    "split_pair",
    "stratified_split",
]

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "json"}
# How messages name each format; "lines" is one text per line (any other file, standard input).
_FORMAT_NAMES = {"csv": "CSV", "tsv": "TSV", "json": "JSON", "jsonl": "JSONL", "lines": "one text per line"}
# The arguments whose names messages mention; a caller passes its own names for them (`arguments=`).
_ARGUMENTS = ("delimiter", "text_column", "text_pair_column")
# The line breaks `csv` counts (a lone carriage return ends a line too): where a field spans lines.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


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


def _argument_names(arguments):
    names = {key: key for key in _ARGUMENTS}
    unknown = sorted(set(arguments or {}) - set(names))
    if unknown:
        raise ValueError(
            f"Received an invalid value for argument `arguments`, expected names for some of {list(_ARGUMENTS)}. "
            f"Received unknown keys: {unknown}"
        )
    names.update(arguments or {})
    return names


# ---------------------------------------------------------------------------
# Records: the one reader.
# ---------------------------------------------------------------------------


def _check_delimiter(delimiter, fmt, name, argument):
    if delimiter is None:
        return
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\"\r\n":
        raise ValueError(
            f"Received an invalid value for argument `{argument}`, expected one character other than a "
            f"quote or a line break. Received: {argument}={delimiter!r}"
        )
    if fmt not in DELIMITERS:
        raise ValueError(
            f"Received an invalid value for argument `{argument}`: it applies to CSV and TSV files, not to "
            f"{name} ({_FORMAT_NAMES[fmt]}). Received: {argument}={delimiter!r}"
        )


def split_pair(text, where):
    """`[text, text_pair]` of a line written `TEXT<TAB>TEXT_PAIR`; a blank line gives `[text, ""]`.

    >>> split_pair("a question\\tits answer", "line 1")
    ['a question', 'its answer']
    """
    if not text.strip():
        return [text, ""]
    parts = text.split("\t", 1)
    if len(parts) != 2:
        raise DataError(f"{where} is not a text pair: give each as TEXT<TAB>TEXT_PAIR (a tab between the two texts).")
    return parts


def _closing(stream, records):
    with contextlib.closing(stream):
        yield from records


def read_texts(source, text_column=None, text_pair_column=None, *, pairs=False, fmt=None, delimiter=None, name=None,
               arguments=None):
    """Streams the texts of a file or of standard input, one record at a time.

    The formats, from the file's extension: `.csv`, `.tsv` (a header line
    names the columns; CSV quoting as in `read_labelled_file`), `.jsonl` and
    `.json` (one object per line, or an array of objects, read whole); any
    other file, or a stream, is read as one text per line (for text pairs:
    `TEXT<TAB>TEXT_PAIR`). Empty lines are records of empty texts, kept so
    that outputs line up with inputs; whether to classify them is the
    caller's choice. Anything else that is wrong (invalid UTF-8, bad quoting,
    a missing column or key, a record of the wrong width) is a `DataError`
    naming the file and the line, raised when that record is read.

    Args:
        source: str or path of a file, or a binary stream (any iterable of
            lines of bytes, e.g. `sys.stdin.buffer`), read as one text per
            line unless `fmt` says otherwise.
        text_column: optional str. The column (or JSON key) of the text.
            Defaults to `"text"`. Not for one text per line.
        text_pair_column: optional str. The column of the second text, read
            with `pairs`. Defaults to `"text_pair"`. Not for one text per line.
        pairs: bool. Read text pairs. Defaults to `False`.
        fmt: optional str. `"csv"`, `"tsv"`, `"json"`, `"jsonl"` or
            `"lines"`; by default from the extension.
        delimiter: optional str, one character. The field separator of CSV
            or TSV. Defaults to `","` for CSV and a tab for TSV.
        name: optional str. How messages name the source. Defaults to the
            path, or `"standard input"` for a stream.
        arguments: optional dict. How the caller names `delimiter`,
            `text_column` and `text_pair_column` in messages (e.g.
            `{"delimiter": "--delimiter"}`). Defaults to those names.

    Returns:
        An iterator of `(line, texts)`: the line where the record starts and
        `[text]` (`[text, text_pair]` with `pairs`). The arguments are
        checked, and the file opened, by this call.

    Raises:
        FileNotFoundError: no such file.
        ValueError: an argument that does not apply (e.g. `delimiter` for
            JSON, `text_column` for one text per line), or a file that is not
            a regular file (a FIFO, a device: `NotRegularFileError`).

    Example:
    >>> import io
    >>> list(read_texts(io.BytesIO(b"good movie\\n\\nbad plot\\n")))
    [(1, ['good movie']), (2, ['']), (3, ['bad plot'])]
    """
    names = _argument_names(arguments)
    path = os.fspath(source) if isinstance(source, (str, bytes, os.PathLike)) else None
    name = name or (STANDARD_INPUT if path is None else path)
    fmt = fmt or ("lines" if path is None else FORMATS.get(os.path.splitext(path)[1].lower(), "lines"))
    if fmt not in _FORMAT_NAMES:
        raise ValueError(
            f"Received an invalid value for argument `fmt`, expected one of {list(_FORMAT_NAMES)}. "
            f"Received: fmt={fmt!r}"
        )
    _check_delimiter(delimiter, fmt, name, names["delimiter"])
    if fmt == "lines":
        for key, value in (("text_column", text_column), ("text_pair_column", text_pair_column)):
            if value is not None:
                raise ValueError(
                    f"Received an invalid value for argument `{names[key]}`: it applies to CSV, TSV, JSON and JSONL "
                    f"files; {name} is read as one text per line. Received: {names[key]}={value!r}"
                )
    stream = source if path is None else open_file(path)
    if fmt == "lines":
        records = (
            (number, split_pair(text, place(name, number)) if pairs else [text])
            for number, text in ((n, line.rstrip("\r\n")) for n, line in decoded_lines(stream, name))
        )
    else:
        columns = [text_column or "text"] + ([text_pair_column or "text_pair"] if pairs else [])
        records = (
            (line, [""] * len(columns) if row is None else [row[column] for column in columns])
            for line, row in read_rows(stream, name, fmt, columns, delimiter, names)
        )
    return records if path is None else _closing(stream, records)


# ---------------------------------------------------------------------------
# Labels.
# ---------------------------------------------------------------------------


def _number(label):
    """The value of a label written as a decimal number (`1`, `1.0`, `-2e3`), else None."""
    if _NUMBER.fullmatch(label):
        value = float(label)
        if math.isfinite(value):
            return value
    return None


def _number_name(value):
    """The canonical text of a numeric label: 1.0 -> "1", 0.50 -> "0.5"."""
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _index_labels(path, raw_labels, label_names):
    """Returns `(int32 label ids, label names)`; numeric labels are matched by value."""
    numbers = [_number(label) for label in raw_labels]
    numeric = all(number is not None for number in numbers)
    if label_names is not None:
        names = list(label_names)
    elif numeric:
        names = [_number_name(value) for value in sorted(set(numbers))]
    else:
        names = sorted(set(raw_labels))
    name_numbers = [_number(str(name)) for name in names]
    by_value = numeric and all(number is not None for number in name_numbers)
    keys = numbers if by_value else raw_labels
    index = {key: i for i, key in enumerate(name_numbers if by_value else names)}
    unknown = sorted({label for label, key in zip(raw_labels, keys) if key not in index})
    if unknown:
        raise DataError(
            f"{path}: label(s) {unknown} do not occur in the training data (labels there: {names}). "
            "A model cannot predict a class it was not trained on."
        )
    return np.array([index[key] for key in keys], dtype="int32"), names


def _labelled_rows(path, rows):
    """The rows, every one holding text; an empty line between records is refused, empty lines at the end dropped."""
    kept, empty = [], None
    for line, row in rows:
        if row is None:
            empty = empty or line
            continue
        if empty is not None:
            raise DataError(f"{place(path, empty)} is empty. Remove empty lines from the file.")
        kept.append((line, row))
    return kept


def _check_multi_line_fields(path, rows, label_column, fmt, delimiter):
    """Refuses records whose quoted fields swallowed what look like other records.

    The rule: a quoted field may span lines (multi-line text is valid CSV),
    but a label may not, and no line inside a field may read, on its own, as a
    complete record (as many fields as the header) whose label is one that the
    file uses. Both are what an unbalanced quote does to the rows after it.
    """
    header = list(rows[0][1])
    label_at = header.index(label_column)
    labels = {row[label_column].strip() for _, row in rows}
    for start, row in rows:
        label = row[label_column]
        if _LINE_BREAK.search(label):
            raise DataError(
                f"{place(path, start)}: the `{label_column}` spans "
                f"{len(_LINE_BREAK.split(label))} lines ({label!r}). A label cannot span lines; check "
                "the quotes in this record."
            )
        line = start  # where the current field starts
        for column, value in row.items():
            pieces = _LINE_BREAK.split(value)
            if len(pieces) > 1 and column != label_column:
                for offset, piece in enumerate(pieces):
                    inner = parse_line(piece, fmt, delimiter)
                    if inner and len(inner) == len(header) and inner[label_at].strip() in labels:
                        raise DataError(
                            f"{place(path, start)}: the quoted field `{column}` that starts in this record "
                            f"spans {len(pieces)} lines, and line {line + offset} inside it ({piece!r}) looks "
                            f"like a record of its own ({len(inner)} fields, label {inner[label_at].strip()!r}). "
                            'Check the quotes: a quote inside a quoted field is written "".'
                        )
            line += len(pieces) - 1


def read_labelled_file(
    path, text_column="text", label_column="label", text_pair_column=None, label_names=None, fmt=None, delimiter=None,
    arguments=None,
):
    """Reads labelled examples from a CSV, TSV, JSON or JSONL file.

    Read through the same record reader as `read_texts`. CSV is read
    strictly: a quoted field may span lines, but it must close, with the
    quote followed by the delimiter or a line break (a quote inside it is
    written `""`); every record has as many fields as the header, whose
    column names are distinct. An unbalanced quote that swallows the rows
    after it is refused: a label may not span lines, and no line inside a
    quoted field may read as a complete record with a label the file uses.
    TSV has no quoting: quotes are kept as text. An empty line between
    records is refused (empty lines at the end are ignored). Errors name the
    line where the record starts.

    Labels that are all decimal numbers are classes by value: `1`, `1.0` and
    `01` are one class named `"1"`, and classes are ordered by value (1, 2,
    10). Otherwise labels are strings, sorted.

    Args:
        path: str. The file; its format comes from the extension unless `fmt` is given.
        text_column: str. Column (or JSON key) of the text. Defaults to `"text"`.
        label_column: str. Column of the label. Defaults to `"label"`.
        text_pair_column: optional str. Column of a second text (sentence pairs).
        label_names: optional list of str. Fixes the label order (e.g. the
            training file's labels when reading a test file); a label outside
            it is an error. By default the sorted distinct labels.
        fmt: optional `"csv"`, `"tsv"`, `"json"` or `"jsonl"`. JSON (`.json`)
            is an array of objects or one object per line; so is JSONL.
        delimiter: optional str, one character. The field separator of a CSV
            or TSV file. Defaults to `","` for CSV and a tab for TSV.
        arguments: optional dict. How the caller names `delimiter` in
            messages (e.g. `{"delimiter": "--delimiter"}`). Defaults to its name.

    Returns:
        `LabelledText`.

    Raises:
        FileNotFoundError: the file does not exist.
        DataError: empty file, missing or repeated column, invalid UTF-8,
            malformed quoting, a record of the wrong width, empty line or
            text, unknown label; the message names the file and the line.
        ValueError: an invalid `delimiter`, or a file that is not a regular
            file (a FIFO, a device: `NotRegularFileError`).
    """
    path = os.fspath(path)
    argument_names = _argument_names(arguments)
    if not os.path.isfile(check_regular_file(path)):
        raise FileNotFoundError(f"{path}: no such file.")
    fmt = fmt or FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt not in ("csv", "tsv", "json", "jsonl"):
        raise DataError(f"{path}: unknown format; use a .csv, .tsv, .json or .jsonl file (or pass `fmt=`).")
    _check_delimiter(delimiter, fmt, path, argument_names["delimiter"])
    wanted = list(dict.fromkeys(c for c in (text_column, label_column, text_pair_column) if c is not None))
    with open_file(path) as stream:
        rows = _labelled_rows(path, read_rows(stream, path, fmt, wanted, delimiter, argument_names))
    if not rows:
        raise DataError(f"{path} holds a header but no examples.")
    if fmt in DELIMITERS:
        _check_multi_line_fields(path, rows, label_column, fmt, delimiter or DELIMITERS[fmt])

    texts, pairs, raw_labels = [], [], []
    for number, row in rows:
        value = row.get(text_column)
        if value is None or not str(value).strip():
            raise DataError(f"{place(path, number)} has an empty `{text_column}`.")
        label = row.get(label_column)
        if label is None or str(label).strip() == "":
            raise DataError(f"{place(path, number)} has an empty `{label_column}`.")
        texts.append(str(value))
        raw_labels.append(str(label).strip())
        if text_pair_column is not None:
            pairs.append(str(row.get(text_pair_column) or ""))
    labels, names = _index_labels(path, raw_labels, label_names)
    return LabelledText(
        texts=texts,
        labels=labels,
        label_names=names,
        text_pairs=pairs if text_pair_column is not None else None,
    )


def stratified_split(labels, fractions, seed=0):
    """Splits example indices by class, keeping class shares in every part.

    The first part is the training part. Each later part gets
    `floor(fraction * class size)` examples of every class, and the first part
    the rest of `floor(sum(fractions) * class size)`: a class too small to be
    split (one example, say) is all in the first part, where a model can learn
    it, rather than only in a validation or test part.

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
        # The tolerance keeps e.g. 0.1 * 30 (3.0000000000000004 or 2.9999999999999996) at 3.
        later = [math.floor(f * len(members) + 1e-9) for f in fractions[1:]]
        first = max(0, math.floor(sum(fractions) * len(members) + 1e-9) - sum(later))
        bounds = np.cumsum([0, first] + later)
        for i in range(len(fractions)):
            parts[i].extend(members[bounds[i] : bounds[i + 1]])
    return [rng.permutation(np.array(part, dtype=int)) for part in parts]
