"""The commands' input and output: texts from TEXT arguments, --input or standard input; tsv fields and JSON text;
`Output`, the one writer of answers as tsv, JSON lines or one JSON array.

Files and standard input are read by `bert_keras.data.texts.read_texts` (no TensorFlow), the reader of every command.
"""

import json
import sys

from bert_keras._checks import NotRegularFileError
from bert_keras.data.texts import read_texts, split_pair


class InputError(Exception):
    """Input (or a model) that a command refuses, found before or while streaming: the message for the user (exit 2)."""


# How the readers of bert_keras.data.texts name our arguments in their messages.
READER_ARGUMENTS = {"delimiter": "--delimiter", "text_column": "--text-column", "text_pair_column": "--text-pair-column"}


def argument_texts(texts):
    """TEXT arguments as records; an argument that is not valid UTF-8 (a surrogate escape) is refused."""
    for number, text in enumerate(texts, start=1):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise InputError(f"TEXT argument {number} is not valid UTF-8 (byte 0x{ord(text[error.start]) & 0xFF:02x} "
                             f"at character {error.start + 1}); pass UTF-8 text.") from None
        yield number, text


def standard_input(what="text", hint="pass TEXT arguments or --input FILE"):
    """`sys.stdin.buffer`, the bytes every command reads; an `InputError` when standard input is closed.

    Started with standard input closed (`bert-keras predict ... <&-`), Python sets `sys.stdin` to None: no text can
    come from there, which the commands say before TensorFlow and the model load.
    """
    if sys.stdin is None:
        raise InputError(f"no {what} given: standard input is closed; {hint}.")
    return sys.stdin.buffer


def prompt(what="texts"):
    """On a terminal, says that standard input is read (a closed one is no terminal)."""
    if sys.stdin is not None and sys.stdin.isatty():
        print(f"Reading {what} from standard input, one per line (end with Ctrl-D).", file=sys.stderr)


def input_records(args, pairs):
    """`(line number, [text] or [text, pair])` from TEXT arguments, --input or standard input, streamed."""
    if args.texts:
        if args.input:
            raise InputError("pass TEXT arguments or --input FILE, not both.")
        return ((n, split_pair(t, f"TEXT argument {n}") if pairs else [t]) for n, t in argument_texts(args.texts))
    if not args.input:
        standard_input(hint="pass --input FILE" if getattr(args, "command", None) == "index"
                       else "pass TEXT arguments or --input FILE")
    try:
        return read_texts(args.input or sys.stdin.buffer, text_column=args.text_column,
                          text_pair_column=args.text_pair_column, pairs=pairs, delimiter=args.delimiter,
                          arguments=READER_ARGUMENTS)
    except FileNotFoundError as error:
        raise InputError(f"cannot read --input {error}") from None
    except NotRegularFileError as error:  # a FIFO, /dev/stdin: read once, here, it would be read without end
        raise InputError(f"--input {error} Without --input, standard input is read: pipe the texts there.") from None
    except ValueError as error:  # an argument that does not apply to the input, or a file that cannot be read
        raise InputError(str(error)) from None


# Control characters (C0, DEL, C1: terminal escape sequences among them) as visible escapes.
_ESCAPES = {code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)]}
_ESCAPES.update({ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})
_JSON_C1 = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}


def tsv_field(text):
    r"""A field of tsv output: tabs, line breaks, backslashes and control characters escaped (`\t`, `\x1b`)."""
    return text.translate(_ESCAPES)


def json_text(value):
    """`value` as one line of JSON, with every control character escaped."""
    # json.dumps escapes C0 controls; C1 controls (0x80-0x9f, e.g. CSI) pass through unless escaped too.
    return json.dumps(value, ensure_ascii=False).translate(_JSON_C1)


class Output:
    """Prints one line per answer: tsv, jsonl, or json (the lines as one JSON array, each written as it comes).

    Args:
        fmt: str. `"tsv"`, `"jsonl"` or `"json"`.
        out: a text stream (standard output).
        tsv: callable. `(fields, answer) -> str`, an answer's tsv line (its fields escaped by `tsv_field`).
        json: callable. `(fields, answer) -> value`, an answer as a JSON value (written by `json_text`).
    """

    def __init__(self, fmt, out, tsv, json):
        self.fmt, self.out, self._tsv, self._json, self.count = fmt, out, tsv, json, 0

    def write(self, fields, answer):
        if self.fmt == "tsv":
            line = self._tsv(fields, answer)
        else:
            line = json_text(self._json(fields, answer))
            if self.fmt == "json":
                line = ("[" if self.count == 0 else ",") + line
        self.out.write(line + "\n")
        self.count += 1

    def close(self):
        """Ends the JSON array (`[]` when nothing was written) and flushes."""
        if self.fmt == "json":
            self.out.write("[]\n" if self.count == 0 else "]\n")
        self.out.flush()
