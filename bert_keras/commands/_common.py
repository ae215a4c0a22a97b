"""What the commands share: argument types, messages, verbosity, the parser class, the strategy of a training run.

Nothing here imports TensorFlow at module level: `bert-keras --help` and the checks before a command's run must not
pay for it; `strategy` imports `bert_keras.training.strategy` (TensorFlow) when a run asks for one.
"""

import argparse
import contextlib
import difflib
import hashlib
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time

from bert_keras._checks import protected_directory  # no TensorFlow import
from bert_keras import dtypes  # no TensorFlow import; read at call time (tests replace its CPU check)
from bert_keras.commands._speaker import Silence  # standard library only
from bert_keras.export import opening  # no TensorFlow
from bert_keras.export.manifest import CLASSIFIER, READER, SENTENCE_ENCODER, TAGGER  # no TensorFlow


def at_least(minimum):
    """An argparse type: an integer >= `minimum` (argparse names the flag and exits with status 2)."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def positive_float(text):
    """An argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def say(text):
    """Prints a line of the command's output (on a new line if a progress bar left one open); a speaker hears of it."""
    speaker = _speaker
    if speaker is not None and speaker.open_line:
        text = "\n" + text
    print(text, flush=True)
    if speaker is not None:
        lines = [line for line in str(text).splitlines() if line.strip()]
        speaker.tell("said " + (lines[-1].strip()[:120] if lines else ""))


def fail(command, message):
    """Prints `bert-keras COMMAND: message` on standard error; returns exit status 2."""
    print(f"bert-keras {command}: {message}", file=sys.stderr)
    return 2


# `_files.MARKER`, which cannot be imported before TensorFlow loads (tests/commands/test_terminal_progress.py checks
# that they agree).
OUTPUT_MARKER = ".bert_keras_output.json"


def refused_output(path, force, flag="--out"):
    """Before TensorFlow loads: why the directory `path` may not be written (a message), or None.

    A non-empty directory is refused without --force when bert-keras wrote it, and always when it did not; the
    whole check (`_files.check_target`: links, kinds, locks) comes after, in the run.
    """
    if os.path.islink(path) or not os.path.isdir(path):
        return None
    protected = protected_directory(path)
    if protected:
        return f"{flag} {path}: {protected}; bert-keras never writes over it. Pick a new directory."
    try:
        entries = sorted(os.listdir(path))
    except OSError:
        return None
    if not entries:
        return None
    if not os.path.isfile(os.path.join(path, OUTPUT_MARKER)):
        return (f"{flag} {path} exists and was not written by bert-keras (it holds {entries[:5]}); it is never "
                f"replaced, even with --force. Pick another {flag}, or remove it yourself.")
    if force:
        return None
    return f"{flag} {path} already holds an output of bert-keras; pass --force to replace it, or pick another {flag}."


def fit_verbosity():
    """Keras' `verbose` for `fit`: a progress bar on a terminal, one line per epoch in a log."""
    return 1 if sys.stdout.isatty() else 2


# Progress on standard error: updated in place on a terminal; piped or logged, one line every PROGRESS_SECONDS.
PROGRESS_SECONDS = 10.0
# The longest silence of a command (`watching`, `working`): under 10 s with a second to spare, since a loaded
# machine may start the speaker's line late (docs/demo.md#what-you-see-while-it-runs: measured).
SILENCE_SECONDS = 9.0
_quiet = False


def set_quiet(quiet):
    """`-q`: no progress lines (`bert_keras.cli` sets it from the verbosity before a command runs)."""
    global _quiet
    _quiet = bool(quiet)


def progress(command, clock=time.monotonic):
    """A callable `progress(done)` that reports how many texts are done, on standard error; None with `-q`.

    On a terminal the count is updated in place; otherwise (piped, a log file) a line is written every
    `PROGRESS_SECONDS`, with the rate so far, so that a long run is never silent.
    """
    if _quiet:
        return None
    if sys.stderr.isatty():
        return lambda done: print(f"\rbert-keras {command}: {done} texts", end="", file=sys.stderr, flush=True)
    started = clock()
    last = [started]

    def report(done):
        now = clock()
        if now - last[0] >= PROGRESS_SECONDS:
            last[0] = now
            rate = done / max(now - started, 1e-9)
            print(f"bert-keras {command}: {done} texts ({rate:.0f} texts/s)", file=sys.stderr, flush=True)

    return report


@contextlib.contextmanager
def working(command, what, seconds=None):
    """Says, on standard error, that `what` is still under way once it has taken `seconds`, then every `seconds`.

    A step that ends sooner prints nothing (a quick run stays quiet); one that
    takes long is never silent for more than `seconds`: `bert-keras predict:
    loading the tagger in ner/ ... 20 s`. Output written meanwhile (a progress
    line) counts: the next line comes `seconds` after it. Nothing with `-q`.
    Inside `watching`, its speaker says it; otherwise one is started for the step. `seconds` defaults to
    `SILENCE_SECONDS`.
    """
    if _quiet:
        yield
        return
    with contextlib.ExitStack() as stack:
        speaker = _speaker or stack.enter_context(watching(command, seconds))
        speaker.tell(f"step {what}")
        try:
            yield
        finally:
            speaker.tell("end")


_SPEAKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_speaker.py")
_speaker = None  # the `_Speaker` of the command under way, if any


@contextlib.contextmanager
def watching(command, seconds=None):
    """Never `seconds` of silence while the block runs, on a terminal or not: when nothing was written for
    `seconds`, a line on standard error says what is under way (`working`'s step), or `still working after: ` the
    last line `say` printed ` ... N s`. Nothing with `-q`; a `watching` inside another adds nothing. `seconds`
    defaults to `SILENCE_SECONDS`, read at the call (a test may shorten it)."""
    global _speaker
    if _quiet or _speaker is not None:
        yield _speaker
        return
    _speaker = _Speaker(command, SILENCE_SECONDS if seconds is None else seconds)
    try:
        yield _speaker
    finally:
        speaker, _speaker = _speaker, None
        speaker.close()


class _Speaker:
    """`_speaker.Silence` in a child process writing to the standard error file descriptor (a thread's line
    would wait while TensorFlow holds the GIL, as its LiteRT converter and SavedModel restores do), or in a thread
    where standard error is no file descriptor (a test's capture). Standard output and error are watched while it
    runs: what they write counts as speech."""

    def __init__(self, command, seconds):
        self.open_line = False
        self._streams = sys.stdout, sys.stderr
        self._fd = self._process = self._thread = None
        try:
            sys.stderr.flush()
            error_fd = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):
            error_fd = None
        if error_fd is not None:
            read, self._fd = os.pipe()
            try:
                self._process = subprocess.Popen([sys.executable, "-I", "-S", _SPEAKER_SCRIPT, command, str(seconds)],
                                                 stdin=read, stdout=subprocess.DEVNULL, stderr=error_fd)
            except OSError:
                os.close(self._fd)
                self._fd = None
            finally:
                os.close(read)
        if self._fd is not None:
            os.set_blocking(self._fd, False)
        else:
            self._news = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._speak, args=(Silence(command, seconds, time.monotonic()),),
                                            name=f"bert-keras {command}: speaker", daemon=True)
            self._thread.start()
        sys.stdout, sys.stderr = _Watched(sys.stdout, self), _Watched(sys.stderr, self)

    def tell(self, news):
        if self._fd is None:
            self._news.put((news, time.monotonic()))
            return
        try:
            os.write(self._fd, news.replace("\n", " ").encode("utf-8", "replace") + b"\n")
        except OSError:  # a full pipe (the speaker is behind) or a gone speaker: news is never worth a wait
            pass

    def wrote(self, text):
        self.open_line = not text.endswith("\n")
        self.tell(f"out {int(not self.open_line)}")

    def _speak(self, silence):
        while True:
            try:
                news, at = self._news.get(timeout=silence.wait(time.monotonic()))
                if news is None:
                    return
                silence.news(news, at)
            except queue.Empty:
                pass
            text = silence.due(time.monotonic())
            if text is not None:
                self.open_line = False
                print(text, end="", file=self._streams[1], flush=True)

    def close(self):
        for name, stream in zip(("stdout", "stderr"), self._streams):
            if isinstance(getattr(sys, name), _Watched):
                setattr(sys, name, stream)
        if self._fd is not None:
            self.tell("quit")
            os.close(self._fd)
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        else:
            self._news.put((None, 0.0))
            self._thread.join()


class _Watched:
    """A standard stream that tells the speaker when something was written."""

    def __init__(self, stream, speaker):
        self._stream, self._speaker = stream, speaker

    def write(self, text):
        written = self._stream.write(text)
        if text:
            self._speaker.wrote(text)
        return written

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


class UsageError(Exception):
    """Bad arguments or environment found by a command: `bert-keras COMMAND: message`, exit status 2."""

    def __init__(self, command, message):
        super().__init__(message)
        self.command = command


def verbosity_arguments(parser, default):
    parser.add_argument("-v", "--verbose", action="count", default=default,
                        help="show the library's log lines (-v: info, -vv: debug, with TensorFlow's)")
    parser.add_argument("-q", "--quiet", action="count", default=default, help="errors only")


class CommandParser(argparse.ArgumentParser):
    """A command's parser: every option's default in its help line, unless the help states it already; no
    abbreviated options (`--epoch 2` is refused, not taken as `--epochs 2`)."""

    # A command whose trailing positional takes zero or more values (`search INDEX [QUERY ...]`) sets this, so that
    # its values may follow options too (`search INDEX --top-k 2 QUERY`): argparse would otherwise give the empty
    # list to the positional at once and refuse the later values as unrecognized.
    intermixed = False
    _parsing_intermixed = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        self._arguments = list(sys.argv[1:] if args is None else args)  # for `error`
        if not self.intermixed or self._parsing_intermixed:
            return super().parse_known_args(args, namespace)
        self._parsing_intermixed = True  # parse_known_intermixed_args calls parse_known_args itself
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._parsing_intermixed = False

    def add_argument(self, *flags, **kwargs):
        default, text = kwargs.get("default"), kwargs.get("help") or ""
        stated = "default" in text or kwargs.get("action") in ("store_true", "store_false", "count", "help", "version")
        # By identity: a default of 0 (`--seed`) is stated too; `0 in (None, False)` would be True.
        unstated = default is None or default is False or default is argparse.SUPPRESS
        if flags and flags[0].startswith("-") and not unstated and not stated:
            kwargs["help"] = f"{text} (default: %(default)s)".lstrip()
        return super().add_argument(*flags, **kwargs)


    def error(self, message):
        """A required option reported missing next to an unknown one close to it (`--modle x`) is the misspelling,
        named as such; every other message is argparse's (the top parser adds "did you mean" to the rest)."""
        if message.startswith("the following arguments are required"):
            flags = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", self.format_help())))  # public: no ._actions
            arguments = getattr(self, "_arguments", [])
            for arg in arguments[: arguments.index("--")] if "--" in arguments else arguments:
                name = arg.split("=", 1)[0]
                close = difflib.get_close_matches(name, flags, n=1) if name.startswith("--") and name not in flags else []
                if close:
                    message = f"unrecognized arguments: {arg} (did you mean {close[0]}?)"
                    break
        super().error(message)


def distributed_arguments():
    """The parent parser of the training commands' --strategy, --cpu-replicas, --connect-timeout and --run-id."""
    distributed = argparse.ArgumentParser(add_help=False)
    scale = distributed.add_argument_group("training on more than one device or machine")
    scale.add_argument("--strategy", choices=("default", "mirrored", "multi-worker"), default="default",
                       help="tf.distribute strategy (default: default): default (one device), mirrored (the local GPUs, or --cpu-replicas "
                       "logical CPUs), multi-worker (the cluster in the TF_CONFIG environment variable; run the same "
                       "command on every worker). --batch-size is the global batch, split among the replicas")
    scale.add_argument("--cpu-replicas", type=at_least(1), metavar="N",
                       help="with --strategy mirrored: split the CPU into N logical devices, one replica each")
    scale.add_argument("--connect-timeout", type=positive_float, default=120.0, metavar="SECONDS",
                       help="with --strategy multi-worker: how long to wait for the other workers (default: 120)")
    scale.add_argument("--run-id", metavar="TEXT",
                       help="with --strategy multi-worker: what the workers of this run share (default: a hash of the "
                       "command, its arguments and the sizes of its input files); a worker of another run is refused")
    return distributed


def strategy(args, command):
    """The `tf.distribute` strategy of `--strategy` (made first: `--cpu-replicas` must precede TensorFlow's start)."""
    from bert_keras.training.strategy import make_strategy  # TensorFlow: imported in a run, never for --help

    try:
        shared = run_id(args) if args.strategy == "multi-worker" else ""
        return make_strategy(args.strategy, cpu_replicas=args.cpu_replicas, connect_timeout=args.connect_timeout,
                             run_id=shared)
    except (ValueError, ConnectionError, RuntimeError) as error:
        raise UsageError(command, str(error)) from None


# Arguments that may differ between the workers of one run, and those that name input files or folders.
PER_WORKER_ARGUMENTS = ("func", "verbose", "quiet", "out", "backup_dir", "force", "connect_timeout", "run_id")
INPUT_ARGUMENTS = ("train", "validation", "test", "checkpoint", "modules", "encoder", "preprocess", "corpus",
                   "validation_corpus", "vocab")


def run_id(args):
    """What the workers of one multi-worker run share: `--run-id`, else a hash of the command, its arguments and inputs.

    Paths may differ between hosts: an input file counts by its size, a folder by its files' names and sizes.
    """
    if args.run_id is not None:
        return args.run_id
    described = {name: _input_identity(value) if name in INPUT_ARGUMENTS else value
                 for name, value in vars(args).items() if name not in PER_WORKER_ARGUMENTS}  # `command` included
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _input_identity(value):
    if isinstance(value, list):
        return [_input_identity(item) for item in value]
    if value is None or not os.path.exists(value):
        return value  # a Hub handle (or a missing file, refused later)
    if os.path.isfile(value):
        return os.path.getsize(value)
    return sorted((os.path.relpath(os.path.join(folder, name), value), os.lstat(os.path.join(folder, name)).st_size)
                  for folder, _, names in os.walk(value) for name in names)


def warn_emulated_bfloat16(args, command):
    if getattr(args, "dtype", None) == "mixed_bfloat16" and not dtypes.cpu_supports_bfloat16():
        print(f"bert-keras {command}: warning: this CPU has no bfloat16 arithmetic (avx512_bf16 or amx_bf16): "
              "mixed_bfloat16 is emulated there and slower than float32", file=sys.stderr)


def default_backup_dir(out):
    parent, name = os.path.split(os.path.abspath(out))
    return os.path.join(parent, f".{name}.backup")


def served_kind(model, command):
    """The kind of export `model` is, a directory or a `.tflite` file, read without TensorFlow (`opening.served_kind`).

    A directory that records no kind (Keras' `model.export()` of a classifier) is served as a classifier. Any
    kind the command does not serve, a LiteRT file of token ids only, or a manifest or record that cannot be read
    is an `ExportError` (exit 2) that says what the export is and what serves it.
    """
    return opening.served_kind(model, SERVES[command])


# The kinds of export each command serves.
SERVES = {"predict": (CLASSIFIER, TAGGER, READER), "evaluate": (CLASSIFIER, TAGGER)}


# --- The sentence encoder of `embed`, `index` and `search` ------------------------------------------------


def sentence_model_arguments(command, required):
    """--checkpoint (with --pooling, --normalize, --max-seq-length) or --model, and --batch-size."""
    source = command.add_mutually_exclusive_group(required=required)
    source.add_argument("--checkpoint", help="a sentence-transformers folder (e.g. all-MiniLM-L6-v2), or a BERT checkpoint "
                        "folder with --pooling")
    source.add_argument("--model", help="a sentence encoder exported by export_sentence_encoder, or its .tflite "
                        "file (bert-keras litert)")
    command.add_argument("--pooling", metavar="MODE", help="with --checkpoint: mean, cls, max, mean_sqrt_len, weighted_mean "
                         "or last_token (several: separated by commas); default: the folder's pooling configuration")
    command.add_argument("--normalize", action="store_true", help="with --checkpoint: L2-normalise the embeddings "
                         "(default: as the folder says)")
    command.add_argument("--max-seq-length", type=at_least(3), metavar="N", help="with --checkpoint: the longest text in "
                         "tokens (default: as the folder says)")
    command.add_argument("--batch-size", type=at_least(1), default=32, help="texts per model call (default: 32)")


def embedding_model(args, command):
    """The sentence encoder of --checkpoint (with --pooling, --normalize, --max-seq-length) or of --model (an export)."""
    if args.model and (args.pooling or args.normalize or args.max_seq_length):
        raise UsageError(command, "--pooling, --normalize and --max-seq-length go with --checkpoint; an export keeps its own")
    from bert_keras.heads import POOLING_MODES
    from bert_keras.tasks.sentence_encoder import SentenceEncoder

    pooling = args.pooling.split(",") if args.pooling else None
    unknown = [mode for mode in pooling or [] if mode not in POOLING_MODES]
    if unknown:
        raise UsageError(command, f"--pooling {args.pooling}: no pooling mode {unknown[0]!r}; expected one of "
                         f"{', '.join(POOLING_MODES)} (several: separated by commas)")
    try:
        with working(command, f"loading the sentence encoder of {args.model or args.checkpoint}"):
            if args.model:  # an export directory or its .tflite file
                return opening.load(args.model, kind=SENTENCE_ENCODER)
            return SentenceEncoder.from_checkpoint(
                args.checkpoint, pooling=pooling[0] if pooling and len(pooling) == 1 else pooling,
                normalize=True if args.normalize else None, max_seq_length=args.max_seq_length)
    except (OSError, ValueError) as error:
        raise UsageError(command, f"cannot load a sentence encoder from {args.model or args.checkpoint}: {error}") from None
