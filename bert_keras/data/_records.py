"""The records of users' files, parsed one at a time: lines decoded from bytes, CSV / TSV rows, JSON objects.

`read_rows` yields the rows of a CSV, TSV, JSON or JSONL stream, each a dict
of the wanted columns; `decoded_lines` the lines of any binary stream. Every
error is a `DataError` naming the file (or standard input) and the line
where the record starts (`place`). The public readers, `read_texts` and
`read_labelled_file`, are in `bert_keras.data.texts`; like them, this module
imports no TensorFlow.
"""

import contextlib
import csv
import itertools
import json
import re
import threading

from bert_keras._checks import NotRegularFileError, open_regular_file

DELIMITERS = {"csv": ",", "tsv": "\t"}
STANDARD_INPUT = "standard input"
# Tried on the header when columns are missing, to suggest the `delimiter` argument.
_LIKELY_DELIMITERS = (",", ";", "\t", "|")
# After a carriage return that no line feed follows: `csv` ends a line there too.
_AFTER_LONE_CR = re.compile(rb"(?<=\r)(?!\n)")
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
# `csv.field_size_limit` is process-wide: raised and restored under a lock.
_FIELD_LIMIT_LOCK = threading.RLock()


class DataError(ValueError):
    """A user's file that cannot be used; the message names the file (or standard input) and the place."""


def _plural(count, word):
    return f"{count} {word}{'' if count == 1 else 's'}"


def place(name, number):
    """Where a message points: `data.csv: line 3`, or `standard input line 3` (no path, so no colon)."""
    return f"{name} line {number}" if name == STANDARD_INPUT else f"{name}: line {number}"


# ---------------------------------------------------------------------------
# Lines: a binary stream, decoded one line at a time.
# ---------------------------------------------------------------------------


def open_file(path):
    """`path` opened for reading bytes; a missing file is a `FileNotFoundError`, an unreadable one a `DataError`.

    A FIFO, device or socket is refused when opened (`_checks.open_regular_file`, a `NotRegularFileError`): no
    moment lies between the check and the open.
    """
    try:
        return open_regular_file(path, "rb")
    except NotRegularFileError:
        raise
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file.") from None
    except OSError as error:
        raise DataError(f"{path} cannot be read: {error.strerror}.") from None


def decoded_lines(stream, name, lone_cr_ends_lines=False):
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
                    f"{place(name, number)} is not valid UTF-8 (byte 0x{raw[error.start]:02x} at column "
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
    expected = "a header and one record per line" if fmt in DELIMITERS else "one JSON object per line, or an array"
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


def parse_line(line, fmt, delimiter):
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
                    f"{place(name, start)}: a quote opened in this record is never closed; the field runs "
                    f"to the end of the file (line {last_line()}). Close the quote, or write a quote inside a "
                    'quoted field as "".'
                ) from None
            raise DataError(
                f"{place(name, start)}: malformed quoting ({error}). A quoted field must end with a quote "
                'followed by the delimiter or the end of the line; write a quote inside it as "".'
            ) from None
        yield start, cells
        start = end + 1


def _delimiter_hint(header_line, wanted, delimiter, argument):
    for candidate in _LIKELY_DELIMITERS:
        cells = parse_line(header_line, "csv", candidate) if candidate != delimiter else None
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
                f"{place(name, line)}: column {column!r} appears twice in the header "
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
                f"{place(name, start)} has {_plural(len(cells), 'field')}, expected {len(header)} "
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
    where = place(name, line)
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
            raise DataError(f"{place(name, number)} is not valid JSON ({error.msg}).") from None
        except (ValueError, RecursionError) as error:  # e.g. an integer of more than 4,300 digits
            raise DataError(f"{place(name, number)} is not usable JSON ({error}).") from None


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
                f"{place(name, line)} is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})."
            ) from None
        except (ValueError, RecursionError) as error:
            raise DataError(f"{place(name, line)} is not usable JSON ({error}).") from None
        yield line, value
        position = _JSON_SPACE.match(text, position).end()
        separator = text[position : position + 1]
        if separator not in (",", "]"):
            found = repr(separator) if separator else "the end of the file"
            raise DataError(
                f"{place(name, _line_at(text, position))} is not valid JSON (expected ',' or ']' "
                f"after an item of the array, found {found})."
            )
        position = _JSON_SPACE.match(text, position + 1).end()
        closed = separator == "]"
    if position < len(text):
        raise DataError(
            f"{place(name, _line_at(text, position))} is not valid JSON (text after the array's closing ']')."
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
# Rows: the one parser of every format with columns.
# ---------------------------------------------------------------------------


def read_rows(stream, name, fmt, columns, delimiter, names):
    """`(line, row)` per record of a CSV, TSV, JSON or JSONL stream (see `_table_rows`, `_json_rows`).

    `names` maps `"delimiter"` to how the caller names that argument, for
    the hint of a header that looks separated by another delimiter.
    """
    lines = decoded_lines(stream, name, lone_cr_ends_lines=fmt in DELIMITERS)
    blank, first, rest = _with_text(lines, name, fmt)
    if fmt in DELIMITERS:
        lines = itertools.chain(blank, [first], rest)
        return _table_rows(name, lines, fmt, delimiter or DELIMITERS[fmt], columns, names)
    return _json_rows(name, blank, first, rest, columns)
