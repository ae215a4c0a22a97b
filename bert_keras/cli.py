"""The `bert-keras` command line: the top parser gathered from `bert_keras.commands` (one module per command: its
arguments, its checks before TensorFlow loads, its run), logging, the path checks done before any command runs,
and the run wrapper that turns what a command raises into a message and an exit status."""

import argparse
import contextlib
import difflib
import logging
import os
import re
import sys

from bert_keras import __version__  # bert_keras' __init__ imports no TensorFlow: --help stays fast
from bert_keras._platform.native_log import NativeLogFilter, freeze_tensorflow_import
from bert_keras.commands import (convert, demo, embed, evaluate, explain, finetune, litert, predict, presets, pretrain,
                                 search)
from bert_keras.commands._common import CommandParser, UsageError, fail, set_quiet, verbosity_arguments
from bert_keras.presets import checkpoint_name_hint  # plain Python: no TensorFlow

# The command modules, in the order `bert-keras --help` lists their commands.
COMMANDS = (presets, convert, demo, finetune, pretrain, predict, evaluate, explain, embed, search, litert)


class _Parser(argparse.ArgumentParser):
    """The top parser: an unknown option is named with the closest real one (`--topk`: did you mean --top-k?).

    No parser takes abbreviations (`allow_abbrev=False`, here and in `CommandParser`): `finetune --epoch 2` is refused,
    not taken as `--epochs 2`.
    """

    def parse_args(self, args=None, namespace=None):
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:  # argparse's own message, and the closest option of the top parser or of the command
            helps = self.format_help() + self.commands.choices[parsed.command].format_help()  # public: no ._actions
            flags = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", helps)))
            close = [match for word in unknown if word.startswith("--")
                     for match in difflib.get_close_matches(word.split("=", 1)[0], flags, n=1)]
            self.error(f"unrecognized arguments: {' '.join(unknown)}" + (f" (did you mean {close[0]}?)" if close else ""))
        return parsed


def _build_parser():
    parser = _Parser(prog="bert-keras", description="BERT for Keras 3 and TensorFlow.", allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    verbosity_arguments(parser, default=0)
    common = argparse.ArgumentParser(add_help=False)  # -v/-q after the command too
    verbosity_arguments(common, default=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    parser.commands = commands
    for command in COMMANDS:
        command.register(commands, common)
    return parser


def _configure_logging(verbosity):
    """-q: errors; default: warnings; -v: info; -vv: debug. TensorFlow's C++ log follows (it is read at import)."""
    level = logging.ERROR if verbosity < 0 else (logging.WARNING, logging.INFO)[verbosity] if verbosity < 2 else logging.DEBUG
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=level, force=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3" if verbosity < 0 else "2" if verbosity < 2 else "0")
    if verbosity < 2:
        logging.getLogger("tensorflow").setLevel(max(level, logging.ERROR))
        logging.getLogger("absl").setLevel(max(level, logging.ERROR))


def main(argv=None):
    """Runs the command line; returns its exit status (2: bad input or arguments, 1: an internal failure)."""
    args = _build_parser().parse_args(argv)
    freeze_tensorflow_import()  # this process is the command's: TensorFlow's import is kept out of collections
    verbosity = args.verbose - args.quiet
    _configure_logging(verbosity)
    set_quiet(verbosity < 0)
    with contextlib.ExitStack() as stack:
        if verbosity < 2:  # -vv shows TensorFlow's own log lines too
            stack.enter_context(NativeLogFilter())
        return _run(args, verbosity)


# Paths the commands read, checked before TensorFlow is imported (a missing one is reported in well under a
# second): argument name -> how the message names it. Hub handles (--encoder, --preprocess) may be URLs: not here.
_READ_PATHS = {"source": "SOURCE", "index": "INDEX", "train": "--train", "validation": "--validation", "test": "--test",
               "data": "--data", "input": "--input", "model": "--model", "modules": "--modules",
               "checkpoint": "--checkpoint", "vocab": "--vocab", "corpus": "--corpus",
               "validation_corpus": "--validation-corpus"}


def _missing_path(args):
    """The message for the first path argument that does not exist, or None."""
    for name, shown in _READ_PATHS.items():
        values = getattr(args, name, None)
        for value in values if isinstance(values, list) else [values]:
            if not isinstance(value, str) or value == "-" or os.path.exists(value):
                continue
            if name == "source" and os.path.exists(value + ".index"):  # a TF checkpoint prefix
                continue
            hint = checkpoint_name_hint(value) if name in ("source", "checkpoint") else ""
            return f"{shown} {value}: no such file or directory.{hint}"
    return None


def _run(args, verbosity):
    missing = _missing_path(args)
    if missing is not None:
        return fail(args.command, missing)
    try:
        return args.func(args)
    except UsageError as error:
        return fail(error.command, str(error))
    except KeyboardInterrupt:
        print(f"bert-keras {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `bert-keras predict ... | head`: the reader is gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # noqa: BLE001 - the last line of defence: a message, not a traceback
        if verbosity >= 1:
            raise
        print(f"bert-keras {args.command}: internal error: {type(error).__name__}: {error} "
              "(rerun with -v for the traceback)", file=sys.stderr)
        return 1


def entry_point():
    """The `bert-keras` executable: `main`, then the process ends at once with its status.

    Everything a command writes is closed when `main` returns (outputs are
    renamed into place, locks released): what is left is TensorFlow's own
    teardown at interpreter exit, measured at ~1.2 s after a one-text
    `predict` (docs/performance.md), which a user waits for and which does
    nothing for them. Standard output, standard error and logging are
    flushed first. `main` itself returns normally, for callers in Python.
    """
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader of the output is gone: nothing more to flush
        pass
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    entry_point()
