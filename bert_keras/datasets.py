"""Users' text files, read one record at a time: CSV, TSV, JSON, JSONL, or one text per line.

One reader serves every command that reads users' files: `read_texts`
streams the texts of a file or of standard input (`bert-keras predict`), and
`read_labelled_file` reads labelled examples (fine-tuning, `bert-keras
evaluate` and `probe`) through the same record reader, so the same files are
accepted and bad ones are refused with the same messages, each naming the
file (or standard input) and the line where the record starts. The caller
names its own arguments in those messages (`arguments=`, e.g. the command
line's `--delimiter`). `stratified_split` splits labelled examples.

Departure from the layout in DESIGN.md (text/: readers of users' files):
this module imports no TensorFlow, so the command line reads and checks its
input before TensorFlow loads; `bert_keras.text` imports it.
"""

import contextlib
import csv
import dataclasses
import itertools
import json
import math
import os
import re
import threading

import numpy as np

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "json"}
# How messages name each format; "lines" is one text per line (any other file, standard input).
_FORMAT_NAMES = {"csv": "CSV", "tsv": "TSV", "json": "JSON", "jsonl": "JSONL", "lines": "one text per line"}
_DELIMITERS = {"csv": ",", "tsv": "\t"}
STANDARD_INPUT = "standard input"
# The arguments whose names messages mention; a caller passes its own names for them (`arguments=`).
_ARGUMENTS = ("delimiter", "text_column", "text_pair_column")
# Tried on the header when columns are missing, to suggest the `delimiter` argument.
_LIKELY_DELIMITERS = (",", ";", "\t", "|")
# The line breaks `csv` counts (a lone carriage return ends a line too).
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_AFTER_LONE_CR = re.compile(rb"(?<=\r)(?!\n)")
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# `csv.field_size_limit` is process-wide: raised and restored under a lock.
_FIELD_LIMIT_LOCK = threading.RLock()


class DataError(ValueError):
    """A user's file that cannot be used; the message names the file (or standard input) and the place."""


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


def _plural(count, word):
    return f"{count} {word}{'' if count == 1 else 's'}"


def _line(name, number):
    """Where a message points: `data.csv: line 3`, or `standard input line 3` (no path, so no colon)."""
    return f"{name} line {number}" if name == STANDARD_INPUT else f"{name}: line {number}"


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
# Lines: a binary stream, decoded one line at a time.
# ---------------------------------------------------------------------------


def _open(path):
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file.") from None
    except OSError as error:
        raise DataError(f"{path} cannot be read: {error.strerror}.") from None


def _decoded_lines(stream, name, lone_cr_ends_lines=False):
    """`(number, line)` of a binary stream, line breaks kept, read one line at a time.

    A line ends at a line feed (and, with `lone_cr_ends_lines`, at a carriage
    return that no line feed follows, as `csv` counts lines). A byte-order
    mark at the start is dropped. Invalid UTF-8 is a `DataError` naming the
    line and the column of the byte.
    """
    number = 0
    for chunk in stream:
        pieces = _AFTER_LONE_CR.split(chunk) if lone_cr_ends_lines and b"\r" in chunk else (chunk,)
        for raw in pieces:
            if not raw:
                continue
            number += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DataError(
                    f"{_line(name, number)} is not valid UTF-8 (byte 0x{raw[error.start]:02x} at column "
                    f"{error.start + 1}); re-encode it as UTF-8."
                ) from None
            yield number, (line[1:] if number == 1 and line.startswith("\ufeff") else line)


def _with_text(lines, name, fmt):
    """`(blank lines, first line with text, the lines after it)`; a `DataError` when no line holds text."""
    blank = []
    for number, line in lines:
        if line.strip():
            return blank, (number, line), lines
        blank.append((number, line))
    expected = "a header and one record per line" if fmt in _DELIMITERS else "one JSON object per line, or an array"
    raise DataError(f"{name} is empty: expected {expected}.")


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
    """The one CSV / TSV parser of the package: yields the cells of each record, read lazily from `lines`.

    Every reader of CSV and TSV (`read_texts`, `read_labelled_file`) parses
    through it: CSV quoting is strict (a quoted field may span lines and must
    close), TSV has no quoting, and a field may be of any length (`csv`'s
    limit of 131,072 characters is lifted while a record is read, and
    restored between records, so nothing else in the process sees it changed).

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


def _csv_records(name, lines, fmt, delimiter, last_line):
    """Yields `(line, cells)` per record; `line` is the physical line where the record starts.

    `last_line()` is the last line that is not empty, read so far (for the
    message of a quote that is never closed).
    """
    records = delimited_records(lines, fmt, delimiter)
    start = 1
    while True:
        try:
            end, cells = next(records)
        except StopIteration:
            return
        except csv.Error as error:
            if str(error) == "unexpected end of data":
                raise DataError(
                    f"{_line(name, start)}: a quote opened in this record is never closed; the field runs "
                    f"to the end of the file (line {last_line()}). Close the quote, or write a quote inside a "
                    'quoted field as "".'
                ) from None
            raise DataError(
                f"{_line(name, start)}: malformed quoting ({error}). A quoted field must end with a quote "
                'followed by the delimiter or the end of the line; write a quote inside it as "".'
            ) from None
        yield start, cells
        start = end + 1


def _delimiter_hint(header_line, wanted, delimiter, argument):
    for candidate in _LIKELY_DELIMITERS:
        cells = _parse_line(header_line, "csv", candidate) if candidate != delimiter else None
        if cells and all(column in cells for column in wanted):
            if argument == "delimiter":
                advice = f"delimiter={candidate!r} (bert-keras finetune --delimiter {candidate!r})"
            else:
                advice = f"{argument} {candidate!r}"
            return f" The header looks {candidate!r}-separated: pass {advice}."
    return ""


def _check_header(name, line, header, wanted, hint):
    first = {}
    for number, column in enumerate(header, start=1):
        if column in first:
            raise DataError(
                f"{_line(name, line)}: column {column!r} appears twice in the header "
                f"(columns {first[column]} and {number})."
            )
        first[column] = number
    missing = [column for column in wanted if column not in header]
    if missing:
        raise DataError(f"{name}: missing column(s) {missing}. Columns found: {header}.{hint()}")


def _table_rows(name, lines, fmt, delimiter, columns, names):
    """`(line, row)` per record after the header: `row` maps every column to its cell; None for an empty record.

    An empty record is an empty line, or one whose cells are all blank. The
    header's names must be distinct and hold `columns`; every other record
    has as many cells as the header.
    """
    header_line, last = [""], [0]

    def physical():
        for number, line in lines:
            if number == 1:
                header_line[0] = line
            if line.rstrip("\r\n"):
                last[0] = number
            yield line

    def hint():
        return _delimiter_hint(header_line[0], columns, delimiter, names["delimiter"])

    records = _csv_records(name, physical(), fmt, delimiter, lambda: last[0])
    try:
        start, header = next(records)
    except DataError as error:
        raise DataError(f"{error}{hint()}") from None
    _check_header(name, start, header, columns, hint)
    for start, cells in records:
        if all(not cell.strip() for cell in cells):
            yield start, None
            continue
        if len(cells) != len(header):
            extra = ""
            if len(cells) > len(header) and fmt == "csv":
                extra = f" Quote a field that contains the delimiter {delimiter!r}."
            raise DataError(
                f"{_line(name, start)} has {_plural(len(cells), 'field')}, expected {len(header)} "
                f"(as the header).{extra}"
            )
        yield start, dict(zip(header, cells))


# ---------------------------------------------------------------------------
# JSON: one object per line (JSONL), or an array of objects.
# ---------------------------------------------------------------------------


def _line_at(text, position):
    return text.count("\n", 0, position) + 1


def _json_kind(value):
    return {dict: "object", list: "array"}.get(type(value), type(value).__name__)


def _json_row(name, line, value, columns):
    """The `columns` of a JSON object as text (null: empty); a `DataError` for anything else."""
    where = _line(name, line)
    if not isinstance(value, dict):
        raise DataError(f"{where} is not a JSON object.")
    missing = [column for column in columns if column not in value]
    if missing:
        raise DataError(f"{where} has no key(s) {missing}. Keys found: {sorted(value)}")
    row = {}
    for column in columns:
        field = value[column]
        if field is not None and not isinstance(field, (str, int, float)):
            raise DataError(
                f"{where}: `{column}` holds a JSON {_json_kind(field)}; expected text (a string or a number)."
            )
        if isinstance(field, str):
            _check_no_surrogate(where, column, field)
        row[column] = "" if field is None else str(field)
    return row


def _check_no_surrogate(where, column, text):
    """Refuses a string holding a lone surrogate: JSON can escape one (`"\\ud800"`), but it is not text.

    Every other format is decoded from UTF-8, which holds none; this is the
    one place a surrogate can enter, and past it the tokenizer would fail
    with an error that names neither the file nor the line.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise DataError(
            f"{where}: `{column}` holds a lone surrogate (\\u{ord(text[error.start]):04x} at character "
            f"{error.start + 1}), which is not text. Write the character itself, or a surrogate pair for one "
            "outside the Basic Multilingual Plane."
        ) from None


def _json_lines(name, lines):
    """`(line, value)` per line of JSONL; None for an empty line."""
    for number, line in lines:
        if not line.strip():
            yield number, None
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{_line(name, number)} is not valid JSON ({error.msg}).") from None
        except (ValueError, RecursionError) as error:  # e.g. an integer of more than 4,300 digits
            raise DataError(f"{_line(name, number)} is not usable JSON ({error}).") from None


def _json_array(name, text):
    """Yields `(line, value)` per item of a JSON array; `line` is where the item starts."""
    decoder = json.JSONDecoder()
    position = _JSON_SPACE.match(text, text.index("[") + 1).end()
    closed = position < len(text) and text[position] == "]"
    if closed and not text[position + 1 :].strip():
        raise DataError(f"{name} holds an empty JSON array: expected one object per example.")
    while not closed:
        line = _line_at(text, position)
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise DataError(
                f"{_line(name, line)} is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})."
            ) from None
        except (ValueError, RecursionError) as error:
            raise DataError(f"{_line(name, line)} is not usable JSON ({error}).") from None
        yield line, value
        position = _JSON_SPACE.match(text, position).end()
        separator = text[position : position + 1]
        if separator not in (",", "]"):
            found = repr(separator) if separator else "the end of the file"
            raise DataError(
                f"{_line(name, _line_at(text, position))} is not valid JSON (expected ',' or ']' "
                f"after an item of the array, found {found})."
            )
        position = _JSON_SPACE.match(text, position + 1).end()
        closed = separator == "]"
    if position < len(text):
        raise DataError(
            f"{_line(name, _line_at(text, position))} is not valid JSON (text after the array's closing ']')."
        )


def _json_rows(name, blank, first, rest, columns):
    """`(line, row)` per object: `row` holds `columns` as text; None for an empty line of JSONL.

    A text whose first character is `[` is an array of objects (read whole);
    any other, one object per line (read a line at a time).
    """
    if first[1].lstrip().startswith("["):
        text = "".join(line for _, line in itertools.chain(blank, [first], rest))
        values = _json_array(name, text.rstrip("\r\n"))  # an error at the end points at the last line
    else:
        values = _json_lines(name, itertools.chain(blank, [first], rest))
    for line, value in values:
        yield line, None if value is None else _json_row(name, line, value, columns)


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
    if fmt not in _DELIMITERS:
        raise ValueError(
            f"Received an invalid value for argument `{argument}`: it applies to CSV and TSV files, not to "
            f"{name} ({_FORMAT_NAMES[fmt]}). Received: {argument}={delimiter!r}"
        )


def _rows(stream, name, fmt, columns, delimiter, names):
    """`(line, row)` per record of a CSV, TSV, JSON or JSONL stream (see `_table_rows`, `_json_rows`)."""
    lines = _decoded_lines(stream, name, lone_cr_ends_lines=fmt in _DELIMITERS)
    blank, first, rest = _with_text(lines, name, fmt)
    if fmt in _DELIMITERS:
        lines = itertools.chain(blank, [first], rest)
        return _table_rows(name, lines, fmt, delimiter or _DELIMITERS[fmt], columns, names)
    return _json_rows(name, blank, first, rest, columns)


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
            JSON, `text_column` for one text per line).

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
    stream = source if path is None else _open(path)
    if fmt == "lines":
        records = (
            (number, split_pair(text, _line(name, number)) if pairs else [text])
            for number, text in ((n, line.rstrip("\r\n")) for n, line in _decoded_lines(stream, name))
        )
    else:
        columns = [text_column or "text"] + ([text_pair_column or "text_pair"] if pairs else [])
        records = (
            (line, [""] * len(columns) if row is None else [row[column] for column in columns])
            for line, row in _rows(stream, name, fmt, columns, delimiter, names)
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
            raise DataError(f"{_line(path, empty)} is empty. Remove empty lines from the file.")
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
                f"{_line(path, start)}: the `{label_column}` spans "
                f"{len(_LINE_BREAK.split(label))} lines ({label!r}). A label cannot span lines; check "
                "the quotes in this record."
            )
        line = start  # where the current field starts
        for column, value in row.items():
            pieces = _LINE_BREAK.split(value)
            if len(pieces) > 1 and column != label_column:
                for offset, piece in enumerate(pieces):
                    inner = _parse_line(piece, fmt, delimiter)
                    if inner and len(inner) == len(header) and inner[label_at].strip() in labels:
                        raise DataError(
                            f"{_line(path, start)}: the quoted field `{column}` that starts in this record "
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
        ValueError: an invalid `delimiter`.
    """
    path = os.fspath(path)
    argument_names = _argument_names(arguments)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file.")
    fmt = fmt or FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt not in ("csv", "tsv", "json", "jsonl"):
        raise DataError(f"{path}: unknown format; use a .csv, .tsv, .json or .jsonl file (or pass the format).")
    _check_delimiter(delimiter, fmt, path, argument_names["delimiter"])
    wanted = list(dict.fromkeys(c for c in (text_column, label_column, text_pair_column) if c is not None))
    with _open(path) as stream:
        rows = _labelled_rows(path, _rows(stream, path, fmt, wanted, delimiter, argument_names))
    if not rows:
        raise DataError(f"{path} holds a header but no examples.")
    if fmt in _DELIMITERS:
        _check_multi_line_fields(path, rows, label_column, fmt, delimiter or _DELIMITERS[fmt])

    texts, pairs, raw_labels = [], [], []
    for number, row in rows:
        value = row.get(text_column)
        if value is None or not str(value).strip():
            raise DataError(f"{_line(path, number)} has an empty `{text_column}`.")
        label = row.get(label_column)
        if label is None or str(label).strip() == "":
            raise DataError(f"{_line(path, number)} has an empty `{label_column}`.")
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
