"""Keeps TensorFlow's C++ log lines off the command line's stderr; everything else passes through unchanged.

TensorFlow 2.21 logs through absl before absl's logging is initialised, so
`TF_CPP_MIN_LOG_LEVEL` no longer silences the lines it prints while it loads
and starts its devices ("oneDNN custom operations are on", "Could not find
cuda drivers", "failed call to cuInit", "oneDNN supports DT_INT64 only on
platforms with AVX-512" on a CPU that has AVX-512): they reach file
descriptor 2 from C++, under any verbosity. `NativeLogFilter` puts a pipe (a
pseudo-terminal when stderr is a terminal, so that progress lines still
update in place) in front of descriptor 2 and drops the lines in absl's
format (`I0000 00:00:1796113984.064114   23050 port.cc:153] ...`) and absl's
"All log messages before absl::InitializeLog()" notice; Python's messages,
warnings and tracebacks, and the output of child processes, pass through
as written.

`quiet_tensorflow_import` does the same for a Python user, for the one
import of TensorFlow only (see its docstring): a library cannot filter
descriptor 2 for the whole session. That import also leaves Keras to be
imported where it is used: TensorFlow 2.21's `__init__` imports
`keras.src.optimizers` (with the whole of Keras, and scikit-learn,
matplotlib and IPython where installed) inside `try: ... except
ImportError: pass`, for a registration of tf_keras' optimizers that Keras 3
does not make; a loader of an export needs TensorFlow only.
"""

import contextlib
import gc
import importlib.abc
import importlib.util
import os
import re
import sys
import threading

# absl's line prefix: severity and date, time, thread id, file:line] — or absl's one notice before it is initialised.
_NATIVE_LINE = re.compile(
    rb"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\s:\]]+:\d+\] "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|To enable the following instructions: .*in other operations, rebuild TensorFlow with the appropriate compiler flags\.$"
    rb"|INFO: Created TensorFlow Lite XNNPACK delegate for CPU\.$)"  # LiteRT's interpreter, each time it is made
)


def is_native_log_line(line):
    """Whether a line (bytes, without its newline) is one of TensorFlow's C++ log lines."""
    return _NATIVE_LINE.match(line) is not None


class NativeLogFilter:
    """A context in which descriptor 2 drops TensorFlow's C++ log lines; on exit it is the original again.

    Example:

    ```python
    with NativeLogFilter():
        import tensorflow as tf   # its start-up lines are dropped
        print("kept", file=sys.stderr)
    ```
    """

    def __enter__(self):
        _flush_stderr()
        self._original = os.dup(2)
        try:
            reader, writer = self._open_pipe()
        except OSError:
            os.close(self._original)
            raise
        os.dup2(writer, 2)
        os.close(writer)
        self._thread = threading.Thread(target=self._pump, args=(reader,), name="native-log-filter", daemon=True)
        self._thread.start()
        return self

    @staticmethod
    def _open_pipe():
        if os.isatty(2):
            import tty  # here, not at the top: Unix only, and `import bert_keras` imports this module

            reader, writer = os.openpty()
            tty.setraw(writer)  # bytes through unchanged (no "\n" -> "\r\n")
            return reader, writer
        return os.pipe()

    def _write(self, data):
        while data:
            try:
                data = data[os.write(self._original, data):]
            except OSError:  # the reader of stderr is gone: nothing more to show
                return

    def _pump(self, reader):
        pending = b""
        while True:
            try:
                chunk = os.read(reader, 65536)
            except OSError:  # a pseudo-terminal reports EIO once its last writer has closed
                chunk = b""
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            kept = [line + b"\n" for line in lines if not is_native_log_line(line)]
            # A partial line that cannot become a log line (a progress update, "\r..."): shown now, not at its end.
            if pending and (pending[:1] not in (b"I", b"W", b"E", b"F") or b"\r" in pending):
                kept.append(pending)
                pending = b""
            self._write(b"".join(kept))
        if pending and not is_native_log_line(pending):
            self._write(pending)
        os.close(reader)

    def __exit__(self, *exc_info):
        _flush_stderr()
        os.dup2(self._original, 2)  # closes this process's end of the pipe: the pump reads to its end
        self._thread.join(timeout=2.0)  # a child process that still holds the pipe must not hold the exit too
        os.close(self._original)
        return False


def _flush_stderr():
    if sys.stderr is not None:  # None under pythonw and in some daemons
        sys.stderr.flush()


# The level TensorFlow's C++ log gets when the user left TF_CPP_MIN_LOG_LEVEL unset: 3 (none), as `bert-keras`
# shows at its default verbosity. Level 2 still lets through the ERROR lines TensorFlow prints after its
# import on a healthy machine ("failed call to cuInit" without a GPU, "oneDNN supports DT_INT64 only on
# platforms with AVX-512" on one that has AVX-512); real failures reach Python as exceptions at any level.
QUIET_LEVEL = "3"


# What Keras imports at its own import only for `keras.wrappers` (scikit-learn estimators) and `keras.visualization`
# (pyplot), where installed; each guarded by `except ImportError`. The command line imports TensorFlow without them.
KERAS_OPTIONAL = ("sklearn", "matplotlib")


class _Unavailable(importlib.abc.MetaPathFinder):
    """Makes the top-level packages `names` (and their submodules) fail to import, as if not installed, while it
    is on `sys.meta_path`; a package already imported is not affected."""

    def __init__(self, names):
        self._names = frozenset(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self._names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (left out of TensorFlow's import)", name=fullname)
        return None


class _LeanKerasFinder(importlib.abc.MetaPathFinder):
    """The command line's: the first imports of `tensorflow` and of `keras` (whichever comes first imports the
    other) run with `KERAS_OPTIONAL` unavailable; the packages are found by the other finders, as usual."""

    def __init__(self):
        self._finding = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in ("tensorflow", "keras") or self._finding:
            return None
        self._finding = True  # the other finders' turn (`_QuietTensorFlowFinder` wraps TensorFlow's loader too)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _LoaderWithout(spec.loader, KERAS_OPTIONAL)
        return spec


class _LoaderWithout(importlib.abc.Loader):
    """A package's own loader, run while the top-level packages `names` cannot be imported."""

    def __init__(self, loader, names):
        self._loader = loader
        self._names = names

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self._loader
        unavailable = _Unavailable(self._names)
        sys.meta_path.insert(0, unavailable)
        try:
            self._loader.exec_module(module)
        finally:
            sys.meta_path.remove(unavailable)


class _KerasLater(importlib.abc.MetaPathFinder):
    """While on `sys.meta_path`, `keras` is found as usual (its spec, its folder) but its import fails with an
    `ImportError`, leaving nothing in `sys.modules`: the next import of Keras, after, is a whole one."""

    def __init__(self):
        self._finding = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras" or self._finding:
            return None
        self._finding = True  # the other finders' turn
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        if spec is not None and spec.loader is not None:
            spec.loader = _NotNow()
        return spec


class _NotNow(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ImportError("Keras is imported where it is used, not by TensorFlow's import", name=module.__name__)


class _QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
    """Finds TensorFlow's package once, for the other finders, and has it loaded by `_QuietLoader`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tensorflow":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once: from here on imports are as if this finder had never been
        # Found here by the other finders, every time: Python's own loop over sys.meta_path, which this
        # removal shortened under it, would skip the finder after this one.
        spec = importlib.util.find_spec(fullname)
        quiet = "TF_CPP_MIN_LOG_LEVEL" not in os.environ  # else the user's choice (the command line sets its own)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _QuietLoader(spec.loader, quiet)
        return spec


class _QuietLoader(importlib.abc.Loader):
    """TensorFlow's own loader, run with its C++ log level at `QUIET_LEVEL` and its start-up lines dropped (where
    `quiet`), for the command line without Python's cyclic collector (`freeze_tensorflow_import`), and without
    importing Keras where Keras is not being imported already (`_KerasLater`; see `quiet_tensorflow_import`)."""

    def __init__(self, loader, quiet=True):
        self._loader = loader
        self._quiet = quiet

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # TensorFlow sees its own loader, as it would without this one.
        module.__spec__.loader = module.__loader__ = self._loader
        if self._quiet:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = QUIET_LEVEL
        collecting = gc.isenabled()
        if collecting:  # paused for this import only (see `quiet_tensorflow_import`)
            gc.disable()
        later = _KerasLater()
        sys.meta_path.insert(0, later)
        try:
            with contextlib.ExitStack() as stack:
                try:
                    if self._quiet:
                        stack.enter_context(NativeLogFilter())
                except OSError:  # descriptor 2 closed, or no pipe to be had: the import runs unfiltered
                    pass
                self._loader.exec_module(module)
        finally:
            sys.meta_path.remove(later)
            if collecting:
                if _frozen_import:  # the import's objects live as long as the process: no collection walks them again
                    gc.freeze()
                gc.enable()
            # TensorFlow read the level while it loaded (measured on 2.21: later lines, as "failed call to
            # cuInit" at the first op, stay quiet): the environment is left as the user had it, and child
            # processes inherit nothing.
            if self._quiet and os.environ.get("TF_CPP_MIN_LOG_LEVEL") == QUIET_LEVEL:
                del os.environ["TF_CPP_MIN_LOG_LEVEL"]


_frozen_import = False  # set by `freeze_tensorflow_import`


def freeze_tensorflow_import():
    """For a process that owns its whole life (the command line): TensorFlow's first import runs without Python's
    cyclic garbage collector, and what it created is then frozen out of later collections (`gc.freeze`); and
    Keras, imported with it, does not import scikit-learn and matplotlib (`KERAS_OPTIONAL`).

    TensorFlow's import creates hundreds of thousands of objects that live as long as the process; collecting
    while it runs, and walking them in every full collection after, cost the command line ~0.6 s of a first
    answer (measured on 2 cores). Keras imports scikit-learn (with SciPy's statistics) for `keras.wrappers`'
    estimators and matplotlib's pyplot for `keras.visualization`, whenever they are installed, as this package's
    requirements install them: about a quarter of the import's time, for parts of Keras no command uses. They
    stay importable: a command that needs them (reports, plots) imports them itself, later. A library does not
    do this to its user's process: the Python API pauses the collector for TensorFlow's import only and freezes
    nothing, and defers Keras (whole when it comes) rather than leaving parts of it out. Call it before
    TensorFlow is imported, with `quiet_tensorflow_import`'s hook installed (as `import bert_keras` does).
    """
    global _frozen_import
    _frozen_import = True
    if not any(isinstance(finder, _LeanKerasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _LeanKerasFinder())


def quiet_tensorflow_import():
    """Makes the first import of TensorFlow in this process print none of TensorFlow's C++ log lines.

    Unless the user sets `TF_CPP_MIN_LOG_LEVEL` (any value, before
    TensorFlow is imported), TensorFlow is then imported with it set to
    `QUIET_LEVEL`, and the variable is removed again once the import is
    done; the lines TensorFlow 2.21 prints while it loads whatever the
    level is (absl's, before absl logging is initialised) are dropped by a
    `NativeLogFilter` around that import only, so everything else written
    to stderr meanwhile (Python warnings, other threads) passes through and
    descriptor 2 is the original again afterwards. Nothing happens when
    TensorFlow is already imported, and the hook (a `sys.meta_path` finder)
    leaves `sys.meta_path` at TensorFlow's import, whatever it decides.
    Where TensorFlow's import itself aborts the process, what it printed in
    that window may be lost with the filter's thread: setting
    `TF_CPP_MIN_LOG_LEVEL=0` shows it.

    Whatever the level, TensorFlow's import then imports no Keras unless
    Keras is being imported already (Keras imports TensorFlow first): the
    import TensorFlow 2.21 makes of `keras.src.optimizers` fails as if Keras
    were not installed, which TensorFlow passes over, and leaves nothing
    behind; the first `import keras` (or `tf.keras`) after is a whole one, as
    if TensorFlow had made it. A process that only loads an export (Python's
    `load_classifier`, `bert-keras predict`) never pays for Keras. Python's
    cyclic collector is paused while TensorFlow's import runs (its objects
    live as long as the process: collecting among them is work for nothing)
    and runs again, as it was, after.
    """
    if "tensorflow" in sys.modules or any(isinstance(finder, _QuietTensorFlowFinder) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _QuietTensorFlowFinder())
