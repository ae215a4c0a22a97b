"""Argument validation shared by every module, with Keras-style messages.

Each check names the argument, says what was expected and what was received,
and returns the value (converted where it says so), so that callers write
`self.num_heads = check_positive_int("num_heads", num_heads)`.

`open_regular_file` and `check_regular_file` are the one rule for reading a
file the package did not write (a user's data, an index, an export's
metadata): it must be a regular file. A FIFO would wait for a writer that
may never come, and a device may never end. `read_json` is the one reader
of a JSON file in a user's folder (configs, tokenizer options, indexes): it
reads with that rule and names the file in every error.
"""

import errno
import itertools
import json
import numbers
import os
import stat


def _invalid(name, expected, value):
    return ValueError(
        f"Received an invalid value for argument `{name}`, expected {expected}. Received: {name}={value!r}"
    )


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name, value, minimum=None, maximum=None):
    """Raises a `ValueError` unless `value` is an integer in [`minimum`, `maximum`]; returns it as `int`.

    >>> check_int("seq_length", 128, minimum=3)
    128
    >>> check_int("seq_length", 2, minimum=3)
    Traceback (most recent call last):
    ...
    ValueError: Received an invalid value for argument `seq_length`, expected an integer >= 3. Received: seq_length=2
    """
    if minimum is not None and maximum is not None:
        expected = f"an integer in [{minimum}, {maximum}]"
    elif minimum is not None:
        expected = f"an integer >= {minimum}"
    elif maximum is not None:
        expected = f"an integer <= {maximum}"
    else:
        expected = "an integer"
    if not _is_int(value) or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise _invalid(name, expected, value)
    return int(value)


def check_positive_int(name, value):
    """Raises a `ValueError` unless `value` is a positive integer; returns it as `int`.

    >>> check_positive_int("num_heads", 0)
    Traceback (most recent call last):
    ...
    ValueError: Received an invalid value for argument `num_heads`, expected a positive integer. Received: num_heads=0
    """
    if not _is_int(value) or value <= 0:
        raise _invalid(name, "a positive integer", value)
    return int(value)


def check_float(name, value, minimum=None, maximum=None, include_maximum=True, include_minimum=True):
    """Raises a `ValueError` unless `value` is a real number within the bounds; returns it as `float`.

    >>> check_float("rate", 1.0, 0, 1, include_maximum=False)
    Traceback (most recent call last):
    ...
    ValueError: Received an invalid value for argument `rate`, expected a float in [0, 1). Received: rate=1.0
    """
    low = "-inf" if minimum is None else minimum
    high = "inf" if maximum is None else maximum
    expected = f"a float in {'[' if include_minimum else '('}{low}, {high}{']' if include_maximum else ')'}"
    if minimum is not None and maximum is None and include_minimum and minimum == 0:
        expected = "a non-negative float"
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or value != value:
        raise _invalid(name, expected, value)
    too_low = minimum is not None and (value < minimum or (not include_minimum and value == minimum))
    too_high = maximum is not None and (value > maximum or (not include_maximum and value == maximum))
    if too_low or too_high:
        raise _invalid(name, expected, value)
    return float(value)


def check_positive_float(name, value):
    """Raises a `ValueError` unless `value` is a real number > 0; returns it as `float`."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not value > 0:
        raise _invalid(name, "a positive float", value)
    return float(value)


def check_rate(name, value):
    """Raises a `ValueError` unless `value` is a float in [0, 1) (a dropout rate); returns it as `float`."""
    return check_float(name, value, 0, 1, include_maximum=False)


def check_choice(name, value, choices):
    """Raises a `ValueError` unless `value` is one of `choices`; returns it."""
    if value not in choices:
        raise _invalid(name, f"one of {list(choices)}", value)
    return value


def protected_directory(path):
    """Why `path` is never an output directory (the current directory or one of its parents, home, root), or None."""
    real = os.path.realpath(path)
    cwd = os.path.realpath(os.getcwd())
    if real == cwd or cwd.startswith(real.rstrip(os.sep) + os.sep):
        return "it is the current directory or one of its parents"
    if real in (os.path.realpath(os.path.expanduser("~")), os.path.realpath(os.sep)):
        return "it is the home or root directory"
    return None


def replace_hint(argument):
    """How the caller asks for an existing output to be replaced: `--force` where `argument` is a command-line flag
    (`--out`), the Python argument `overwrite=True` otherwise."""
    return "pass --force" if str(argument).startswith("--") else "pass overwrite=True"


class NotRegularFileError(OSError, ValueError):
    """A path to read that is a FIFO, a device or a socket, not a regular file (an `OSError` and a `ValueError`)."""

    def __init__(self, path, kind):
        super().__init__(errno.EINVAL, f"it is a {kind}, not a regular file (reading one may never end); pass "
                         "a regular file", os.fspath(path))
        self.kind = kind

    def __str__(self):
        return f"{self.filename} cannot be read: {self.strerror}."


def _special_kind(mode):
    """What a file of `st_mode` is, in words, when it is neither a regular file nor a directory; else None."""
    for test, kind in ((stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "special file"


def check_regular_file(path):
    """Returns `path` unless it exists and is not a regular file (links followed): a `NotRegularFileError` then.

    For a reader that opens `path` itself; `open_regular_file` checks the
    file it opened (no moment between the check and the open).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return path  # missing, or unreadable: the reader's open says so
    kind = _special_kind(mode)
    if kind is not None:
        raise NotRegularFileError(path, kind)
    return path


def open_regular_file(path, mode="rb", encoding=None):
    """`path` opened for reading (`mode` `"rb"` or `"r"`), refused with a `NotRegularFileError` unless a regular file.

    The file is opened without waiting (a FIFO opens at once then), checked
    on the open descriptor, then read as any file. A directory is an
    `IsADirectoryError`, a missing file a `FileNotFoundError`, as `open`'s.
    """
    if mode not in ("r", "rb"):
        raise _invalid("mode", "'r' or 'rb'", mode)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        kind = _special_kind(info.st_mode)
        if kind is not None:
            raise NotRegularFileError(path, kind)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, mode, encoding=encoding)
    except BaseException:
        os.close(descriptor)
        raise


def shortened(text, limit=80):
    """`text` cut to `limit` characters, the last three `"..."`, where it is longer.

    >>> shortened("O, B-PER, I-PER, B-LOC", limit=12)
    'O, B-PER,...'
    """
    return text if len(text) <= limit else text[: limit - 3] + "..."


def quoted(value, limit=80):
    """`repr(value)` cut to `limit` characters (`shortened`), for a message that quotes what a user's file holds.

    A long string, list or dict is cut before its `repr` is made: a 5 MB
    token or 200,000 labels cost no more than a short one.

    >>> quoted("a" * 200, limit=12)
    "'aaaaaaaa..."
    >>> quoted(list(range(1000)), limit=20)
    '[0, 1, 2, 3, 4, 5...'
    >>> quoted("short")
    "'short'"
    """
    if isinstance(value, (str, bytes, list, tuple)) and len(value) > limit:
        value = value[:limit]
    elif isinstance(value, dict) and len(value) > limit:
        value = dict(itertools.islice(value.items(), limit))
    return shortened(repr(value), limit)


class FileContentError(ValueError):
    """A file the package did not write that cannot be read as what it should hold; the message names the file.

    Attributes:
        file: str. The file.
        reason: str. What is wrong, without the file's name (`"is not valid JSON (...)."`).
        detail: str. What the check or the parser said, for a caller's own wording.
    """

    def __init__(self, file, reason, detail):
        self.file, self.reason, self.detail = os.fspath(file), reason, detail
        super().__init__(f"{self.file}: {reason}")


def read_user_file(path):
    """The bytes of a file the package did not write.

    Raises:
        FileContentError: not a regular file (a FIFO is refused without
            waiting, `open_regular_file`), or a directory.
        FileNotFoundError: `path` does not exist (for the caller to word).
    """
    try:
        with open_regular_file(path) as f:
            return f.read()
    except NotRegularFileError as refused:
        detail = refused.strerror
        raise FileContentError(path, f"{detail}.", detail) from refused
    except IsADirectoryError as directory:
        raise FileContentError(path, "is a directory; expected a file.", "it is a directory") from directory


def read_json(path):
    """The JSON value of a file the package did not write: the one reader of JSON files in users' folders.

    Raises:
        FileContentError: not a regular file, a directory, not UTF-8, not
            JSON, nested too deep, or an integer of more than 4,300 digits.
        FileNotFoundError: `path` does not exist.
    """
    data = read_user_file(path)
    try:
        return json.loads(data.decode("utf-8"))
    # ValueError: not UTF-8, not JSON, or an integer of more than 4,300 digits; RecursionError: nested too deep.
    except (ValueError, RecursionError) as invalid:
        detail = str(invalid)[:200]
        raise FileContentError(path, f"is not valid JSON ({detail}).", detail) from invalid
