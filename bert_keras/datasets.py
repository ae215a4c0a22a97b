"""Labelled text from users' files (CSV, TSV, JSON, JSONL), and stratified splits.

Departure from the layout in DESIGN.md: reading labelled files is shared by
`finetune` and the CLI, so it lives in its own module rather than in `cli.py`.
"""

import contextlib
import csv
import dataclasses
import io
import json
import math
import os
import re
import threading

import numpy as np

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "json"}
_DELIMITERS = {"csv": ",", "tsv": "\t"}
# Tried on the header when columns are missing, to suggest the `delimiter` argument.
_LIKELY_DELIMITERS = (",", ";", "\t", "|")
# The line breaks `csv` counts (it reads lines through `io.StringIO(newline="")`).
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# `csv.field_size_limit` is process-wide: raised and restored under a lock.
_FIELD_LIMIT_LOCK = threading.RLock()


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


def _plural(count, word):
    return f"{count} {word}{'' if count == 1 else 's'}"


def _check_columns(path, columns, wanted, hint=""):
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {missing}. Columns found: {columns}.{hint}")


# ---------------------------------------------------------------------------
# CSV and TSV.
# ---------------------------------------------------------------------------


# The longest field `csv` may read: no limit of its own beyond the input (a field of one file is at most
# the file). `csv.field_size_limit` defaults to 131,072 characters; every reader of this package lifts it
# the same way, through `delimited_records`.
FIELD_SIZE_LIMIT = 2**31 - 1  # the largest a C long holds on every platform


@contextlib.contextmanager
def _field_size_limit(limit):
    """Lets `csv` read fields of up to `limit` characters (its default is 131,072), restored after."""
    with _FIELD_LIMIT_LOCK:
        previous = csv.field_size_limit()
        csv.field_size_limit(max(previous, limit))
        try:
            yield
        finally:
            csv.field_size_limit(previous)


def _reader(lines, fmt, delimiter):
    # TSV has no quoting: a quote is text. CSV quoting is strict: a quoted
    # field ends with a quote followed by the delimiter or a line break.
    quoting = csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL
    return csv.reader(lines, delimiter=delimiter, quoting=quoting, strict=True)


def delimited_records(lines, fmt, delimiter):
    """The one CSV / TSV reader of the package: yields the cells of each record, read lazily from `lines`.

    Both `read_labelled_file` and `bert-keras predict` (which streams) read
    through it, so they accept the same files: CSV quoting is strict (a quoted
    field may span lines and must close), TSV has no quoting, and a field may
    be of any length (`csv`'s limit of 131,072 characters is lifted while a
    record is read, and restored between records, so nothing else in the
    process sees it changed).

    Args:
        lines: an iterable of str, the physical lines with their line breaks.
        fmt: `"csv"` or `"tsv"`.
        delimiter: str, one character.

    Yields:
        `(line_num, cells)`: the physical line where the record ends (the
        reader's `line_num`) and its list of str.

    Raises:
        csv.Error: malformed quoting; the caller names the file and the line.
    """
    reader = _reader(lines, fmt, delimiter)
    while True:
        with _field_size_limit(FIELD_SIZE_LIMIT):
            try:
                cells = next(reader)
            except StopIteration:
                return
        yield reader.line_num, cells


def _parse_line(line, fmt, delimiter):
    """The cells of one line on its own, or None if it is not a well-formed record."""
    try:
        return next((cells for _, cells in delimited_records([line], fmt, delimiter)), [])
    except csv.Error:
        return None


def _csv_records(path, text, fmt, delimiter):
    """Yields `(line, cells)` per record; `line` is the physical line where the record starts."""
    records = delimited_records(io.StringIO(text, newline=""), fmt, delimiter)
    start = 1
    while True:
        try:
            end, cells = next(records)
        except StopIteration:
            return
        except csv.Error as error:
            if str(error) == "unexpected end of data":
                raise DataError(
                    f"{path}: line {start}: a quote opened in this record is never closed; the field runs "
                    f"to the end of the file (line {len(_LINE_BREAK.split(text))}). Close the quote, or write a "
                    'quote inside a quoted field as "".'
                ) from None
            raise DataError(
                f"{path}: line {start}: malformed quoting ({error}). A quoted field must end with a quote "
                'followed by the delimiter or the end of the line; write a quote inside it as "".'
            ) from None
        yield start, cells
        start = end + 1


def _delimiter_hint(text, wanted, delimiter):
    header = _LINE_BREAK.split(text, maxsplit=1)[0]
    for candidate in _LIKELY_DELIMITERS:
        cells = _parse_line(header, "csv", candidate) if candidate != delimiter else None
        if cells and all(column in cells for column in wanted):
            return (
                f" The header looks {candidate!r}-separated: pass delimiter={candidate!r} "
                f"(bert-keras finetune --delimiter {candidate!r})."
            )
    return ""


def _check_header(path, header, wanted, text, delimiter):
    first = {}
    for number, name in enumerate(header, start=1):
        if name in first:
            raise DataError(
                f"{path}: line 1: column {name!r} appears twice in the header (columns {first[name]} and {number})."
            )
        first[name] = number
    _check_columns(path, header, wanted, _delimiter_hint(text, wanted, delimiter))


def _check_multi_line_fields(path, header, records, label_column, fmt, delimiter):
    """Refuses records whose quoted fields swallowed what look like other records.

    The rule: a quoted field may span lines (multi-line text is valid CSV),
    but a label may not, and no line inside a field may read, on its own, as a
    complete record (as many fields as the header) whose label is one that the
    file uses. Both are what an unbalanced quote does to the rows after it.
    """
    label_at = header.index(label_column)
    labels = {cells[label_at].strip() for _, cells in records}
    for start, cells in records:
        label = cells[label_at]
        if _LINE_BREAK.search(label):
            raise DataError(
                f"{path}: line {start}: the `{label_column}` spans "
                f"{len(_LINE_BREAK.split(label))} lines ({label!r}). A label cannot span lines; check "
                "the quotes in this record."
            )
        line = start  # where the current field starts
        for column, value in zip(header, cells):
            pieces = _LINE_BREAK.split(value)
            if len(pieces) > 1 and column != label_column:
                for offset, piece in enumerate(pieces):
                    inner = _parse_line(piece, fmt, delimiter)
                    if inner and len(inner) == len(header) and inner[label_at].strip() in labels:
                        raise DataError(
                            f"{path}: line {start}: the quoted field `{column}` that starts in this record "
                            f"spans {len(pieces)} lines, and line {line + offset} inside it ({piece!r}) looks "
                            f"like a record of its own ({len(inner)} fields, label {inner[label_at].strip()!r}). "
                            'Check the quotes: a quote inside a quoted field is written "".'
                        )
            line += len(pieces) - 1


def _delimited_rows(path, text, fmt, delimiter, wanted, label_column):
    """`(line, row dict)` of every record of a CSV or TSV text, checked."""
    records = _csv_records(path, text, fmt, delimiter)
    try:
        _, header = next(records)
    except DataError as error:
        raise DataError(f"{error}{_delimiter_hint(text, wanted, delimiter)}") from None
    _check_header(path, header, wanted, text, delimiter)
    checked = []
    for line, cells in records:
        if not cells or all(not cell.strip() for cell in cells):
            raise DataError(f"{path}: line {line} is empty. Remove empty lines from the file.")
        if len(cells) != len(header):
            hint = ""
            if len(cells) > len(header) and fmt == "csv":
                hint = f" Quote a field that contains the delimiter {delimiter!r}."
            raise DataError(
                f"{path}: line {line} has {_plural(len(cells), 'field')}, expected {len(header)} "
                f"(as the header).{hint}"
            )
        checked.append((line, cells))
    _check_multi_line_fields(path, header, checked, label_column, fmt, delimiter)
    return [(line, dict(zip(header, cells))) for line, cells in checked]


# ---------------------------------------------------------------------------
# JSON: one object per line (JSONL), or an array of objects.
# ---------------------------------------------------------------------------


def _line_at(text, position):
    return text.count("\n", 0, position) + 1


def _json_object(path, line, value):
    if not isinstance(value, dict):
        raise DataError(f"{path}: line {line} is not a JSON object.")
    return value


def _json_lines(path, text):
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            raise DataError(f"{path}: line {number} is empty. Remove empty lines from the file.")
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}: line {number} is not valid JSON ({error.msg}).") from None
        except (ValueError, RecursionError) as error:  # e.g. an integer of more than 4,300 digits
            raise DataError(f"{path}: line {number} is not usable JSON ({error}).") from None
        yield number, _json_object(path, number, value)


def _json_array(path, text):
    """Yields `(line, object)` per item of a JSON array; `line` is where the item starts."""
    decoder = json.JSONDecoder()
    position = _JSON_SPACE.match(text, text.index("[") + 1).end()
    closed = position < len(text) and text[position] == "]"
    while not closed:
        line = _line_at(text, position)
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise DataError(
                f"{path}: line {line} is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})."
            ) from None
        except (ValueError, RecursionError) as error:
            raise DataError(f"{path}: line {line} is not usable JSON ({error}).") from None
        yield line, _json_object(path, line, value)
        position = _JSON_SPACE.match(text, position).end()
        separator = text[position : position + 1]
        if separator not in (",", "]"):
            found = repr(separator) if separator else "the end of the file"
            raise DataError(
                f"{path}: line {_line_at(text, position)} is not valid JSON (expected ',' or ']' "
                f"after an item of the array, found {found})."
            )
        position = _JSON_SPACE.match(text, position + 1).end()
        closed = separator == "]"
    if position < len(text):
        raise DataError(
            f"{path}: line {_line_at(text, position)} is not valid JSON (text after the array's closing ']')."
        )


def _json_rows(path, text, wanted):
    """`(line, object)` of every example of a JSON array or a JSONL text, checked."""
    is_array = text.lstrip().startswith("[")
    rows = _json_array(path, text) if is_array else _json_lines(path, text)
    first = next(rows, None)
    if first is None:
        raise DataError(f"{path} holds an empty JSON array: expected one object per example.")
    _check_columns(path, list(first[1]), wanted)
    return [first, *rows]


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


def _check_delimiter(delimiter, fmt):
    if delimiter is None:
        return
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\"\r\n":
        raise ValueError(
            "Received an invalid value for argument `delimiter`, expected one character other than a "
            f"quote or a line break. Received: delimiter={delimiter!r}"
        )
    if fmt not in _DELIMITERS:
        raise ValueError(
            f"Received an invalid value for argument `delimiter`: it applies to CSV and TSV files, "
            f"not to {fmt.upper()}. Received: delimiter={delimiter!r}"
        )


def read_labelled_file(
    path, text_column="text", label_column="label", text_pair_column=None, label_names=None, fmt=None, delimiter=None
):
    """Reads labelled examples from a CSV, TSV, JSON or JSONL file.

    CSV is read strictly: a quoted field may span lines, but it must close,
    with the quote followed by the delimiter or a line break (a quote inside
    it is written `""`); every record has as many fields as the header, whose
    column names are distinct. An unbalanced quote that swallows the rows
    after it is refused: a label may not span lines, and no line inside a
    quoted field may read as a complete record with a label the file uses.
    TSV has no quoting: quotes are kept as text. Errors name the line where
    the record starts.

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

    Returns:
        `LabelledText`.

    Raises:
        FileNotFoundError: the file does not exist.
        DataError: empty file, missing or repeated column, invalid UTF-8,
            malformed quoting, a record of the wrong width, empty line or
            text, unknown label; the message names the file and the line.
        ValueError: an invalid `delimiter`.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file.")
    fmt = fmt or FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt not in ("csv", "tsv", "json", "jsonl"):
        raise DataError(f"{path}: unknown format; use a .csv, .tsv, .json or .jsonl file (or pass the format).")
    _check_delimiter(delimiter, fmt)
    with open(path, "rb") as f:
        text = _decode(path, f.read())
    if not text.strip():
        raise DataError(f"{path} is empty: expected one labelled example per line.")
    text = text.rstrip("\r\n")
    wanted = [c for c in (text_column, label_column, text_pair_column) if c is not None]
    if fmt in _DELIMITERS:
        rows = _delimited_rows(path, text, fmt, delimiter or _DELIMITERS[fmt], wanted, label_column)
    else:
        rows = _json_rows(path, text, wanted)

    texts, pairs, raw_labels = [], [], []
    for number, row in rows:
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
