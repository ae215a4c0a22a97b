"""The SavedModel engine: read the manifest, refuse another kind, load the SavedModel, check it, warm it up, run it.

`LoadedExport` is the engine (`engine.Engine`) of an export directory;
`ExportedClassifier`, `ExportedTagger`, `ExportedReader` and
`ExportedSentenceEncoder` are it mixed with their kind's answers
(`export.kinds`): each says what it serves (`kind`) and what its signatures
must look like (`_check_signatures`); loading, refusing with the right hint,
the warm-up and running a signature (`run`) are done here, once.
"""

import atexit
import contextlib
import logging
import os
import sys
import threading
import time

import tensorflow as tf

# Loading an export imports no Keras (`_platform.loading`; tests/export/test_loader_imports.py).
from bert_keras._platform.loading import functions_unoptimized, load_saved_model, saved_model_without
from bert_keras.export import warmup
from bert_keras.export.engine import Engine
from bert_keras.export.manifest import ExportError, read_manifest, wrong_kind

logger = logging.getLogger(__name__)

# The export's endpoints on token ids (`export._writer`'s `IDS_ENDPOINT`, `PADDED_IDS_ENDPOINT`): what `export_litert`
# converts, which reads the directory itself; no loader calls them, so a loader leaves them (and the functions only
# they call) unloaded: a tagger's load took 1.9 s with them, 1.2 s without (2 cores).
UNUSED_ENDPOINTS = ("serve_ids", "serve_ids_padded")

# How long the interpreter's exit waits for background warm-ups to end their request in flight (one length bucket's
# compile, or the rewrite of the graph): bounded, so that no exit hangs on a call that never returns.
STOP_SECONDS = 60.0

_warm_ups = set()  # the background warm-up threads still running, each with its stop event: `stop_warm_ups`' work
_warm_ups_lock = threading.Lock()


def stop_warm_ups(timeout=STOP_SECONDS):
    """Stops every background warm-up of this process between two of its requests and waits for it to end.

    Registered with `atexit` (this module's import): a warm-up thread left
    inside TensorFlow while the interpreter finalizes is a daemon thread in
    C++ when the process tears down under it. Returning from TensorFlow to
    a finalizing interpreter, it is ended by unwinding its C++ frames,
    which some of TensorFlow's frames do not allow ("terminate called
    after throwing an instance of ...", "FATAL: exception not rethrown":
    the process aborts after the user's work has printed); until then it
    runs on while the libraries' static objects are destroyed. Stopped
    here first, the process ends with its own status, and the user's own
    `atexit` handlers run as they would. The request in flight is not
    interrupted (TensorFlow cannot cancel a compile): the wait is the
    rest of it, at most `timeout` seconds in all. The command line ends with
    `os._exit`, without finalizing, and never comes here.

    Before it waits, it flushes `sys.stdout` and `sys.stderr`: the
    interpreter flushes them only after the `atexit` handlers, so a script
    whose output goes to a pipe or a file would otherwise show its answer
    only once the request in flight has ended.

    Returns:
        The number of warm-ups still running after `timeout` (0 once all ended).
    """
    with _warm_ups_lock:
        running = list(_warm_ups)
    for _, stop in running:
        stop.set()
    if running:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, OSError, ValueError):  # None, a closed pipe, a closed file
                stream.flush()
    deadline = time.monotonic() + timeout
    for thread, _ in running:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = sum(thread.is_alive() for thread, _ in running)
    if left:
        logger.warning("%d background warm-up(s) still inside TensorFlow after %.0f s; a process exiting now may end "
                       "abnormally. Load with warm_up=True or warm_up=False to have none running.", left, timeout)
    return left


atexit.register(stop_warm_ups)


class LoadedExport(Engine):
    """A SavedModel export of this package, loaded for serving.

    Subclasses set `kind` (one of `manifest.KINDS`) and `expected` (what its
    signature must look like, in words), and implement `_check_signatures`,
    which reads `self._saved` and raises `self._refuse(found)` for anything
    else.

    Args:
        export_dir: str. The export's directory.
        warm_up: `"background"`, `True` or `False`. What to do with the
            export's TF Serving warm-up requests
            (`assets.extra/tf_serving_warmup_requests`: one text per length
            bucket, a batch). `True` replays them before returning, as TF
            Serving does when it loads a model, so that no later request waits
            for a trace or a compile (a server's choice; `warm_up_seconds` says
            what it took). `"background"` returns at once and, once the first
            request is answered (by a kind that has one, on a path that needs
            no compile: the classifier's `serve_plain`), replays them in a
            thread, so that a user who asks one question waits neither for
            every bucket nor for a warm-up sharing the cores with their
            question; `warmed` is set when it is done. Until then requests run
            the graph as loaded, without TensorFlow's graph rewrites (Grappler),
            which a function's first call otherwise waits for; the warm-up
            builds the rewritten graph (`_instantiate`) for the requests after
            it (the same values up to float rounding: a server that needs
            every answer bit for bit alike replays with `True`). `False` replays nothing (and a kind with a path that needs no
            compile keeps to it). A background warm-up still running when the
            interpreter exits is stopped between two of its requests
            (`stop_warm_ups`, an `atexit` hook), so that the process ends
            with its own status. Defaults to `"background"`.

    Attributes:
        export_dir: str.
        manifest: dict, the export's settings (`manifest.read_manifest`); None
            for a SavedModel that records none (`model.export()`'s).

    Raises:
        ExportError (a `ValueError`): the directory is another kind of export
            (the message names the loader and command that serve it), its
            manifest is damaged, or its signatures are not this kind's.
    """

    kind = None
    expected = ""
    # Endpoints beside `UNUSED_ENDPOINTS` that the kind's requests do not call, left unloaded: names, or callables
    # given the names the file serves (`saved_model_without`); once loaded, the names the export served and the load
    # left out. `whole` loads them where a caller asks for one (`run` of a signature left out, `ExportedReader()`).
    left_out = ()
    # Whether the warm-up runs on endpoints `left_out` (a classifier's compiled `serve`, while `serve_plain` answers):
    # it then loads the whole SavedModel in its thread, warms it, and the requests after it run on it.
    warms_what_is_left_out = False
    # Whether a SavedModel without a manifest is taken (a classifier from Keras' `model.export()`).
    accepts_unrecorded = False

    def __init__(self, export_dir, warm_up="background"):
        self.export_dir = os.fspath(export_dir)
        if self.export_dir.endswith(".keras") and os.path.isfile(self.export_dir):
            raise ExportError(
                f"{self.export_dir!r} is a Keras model file, not an export. Load it with "
                "`keras.saving.load_model(path)`, or export the model once (e.g. "
                "`bert_keras.export.export_classifier(model, DIR, label_names)`) and load DIR."
            )
        if not os.path.isfile(os.path.join(self.export_dir, "saved_model.pb")):
            raise ExportError(f"{self.export_dir!r} is not an export: it holds no saved_model.pb. Expected a directory "
                              f"written by bert_keras' `export_{self.kind}`.")
        self.manifest = read_manifest(self.export_dir)
        found = None if self.manifest is None else self.manifest["kind"]
        if found is not None and found != self.kind:
            raise wrong_kind(self.export_dir, found, self.kind)
        if found is None and not self.accepts_unrecorded:
            raise ExportError(f"{self.export_dir!r} is not a {self.kind.replace('_', ' ')} written by bert_keras' "
                              f"`export_{self.kind}`: its assets.extra/ records no kind of export.")
        if warm_up not in (True, False, "background"):
            raise ValueError(f"Received an invalid value for argument `warm_up`, expected True, False or "
                             f'"background". Received: warm_up={warm_up!r}')
        self.warmed = threading.Event()  # set once the warm-up requests are replayed (never with warm_up=False)
        self.warm_up_seconds = None
        # Started by `answered` after the first user request; a probe while the signatures are checked is none.
        self._warm_up_pending = False
        self._background = warm_up == "background"  # requests skip the graph rewrites until `warmed`
        self._warming_thread = None
        self._stop_warming = threading.Event()  # set by `stop_warm_ups`: no more warm-up requests
        self._loading = threading.Lock()  # `whole`: one load of the endpoints left out at a time
        self._warming = None  # the whole SavedModel a warm-up loaded, until it is warm (`warms_what_is_left_out`)
        self._saved, self.left_out = self._load(self.left_out)  # the same functions for every request, fewer
        self._check_signatures()
        self._warm_up_pending = warm_up == "background"
        if warm_up is True:
            self.warm_up()
        elif warm_up is False:
            self.warm_up_seconds = 0.0

    def settings(self):
        """The kind's settings the manifest records (what `export_<kind>` was given), without its bookkeeping (format,
        version, kind) and without how the model tokenizes (`tokenizer`)."""
        return {key: value for key, value in (self.manifest or {}).items()
                if key not in ("format", "version", "kind", "tokenizer")}

    def setting(self, name, default=None):
        """A setting of the export's manifest (`default` where it records none, or null)."""
        value = (self.manifest or {}).get(name)
        return default if value is None else value

    def _check_signatures(self):
        raise NotImplementedError

    def _refuse(self, found):
        """The `ExportError` for signatures that are not this kind's: what was found, what was expected."""
        return ExportError(f"{self.export_dir!r} is not a {self.kind.replace('_', ' ')} written by bert_keras' "
                           f"`export_{self.kind}`: {found}. Expected {self.expected}.")

    def _load(self, left_out):
        """The SavedModel without `UNUSED_ENDPOINTS` and `left_out`, and the names of `left_out` it served (sorted)."""
        with saved_model_without((*UNUSED_ENDPOINTS, *left_out)) as names:
            saved = load_saved_model(self.export_dir)
        return saved, tuple(sorted(names - set(UNUSED_ENDPOINTS)))

    def whole(self):
        """The SavedModel with the endpoints `left_out` at the load (every endpoint but `UNUSED_ENDPOINTS`), loaded
        now where they were left out; later requests run on it. Loaded once, in the calling thread."""
        if self.left_out:
            with self._loading:
                if self.left_out:  # a warm-up's whole SavedModel where one is loaded (not yet warm: it still serves)
                    self._use(self._warming if self._warming is not None else self._load(())[0])
        return self._saved

    def _use(self, saved):
        """Serves `saved` (the whole SavedModel) from now on."""
        self._saved, self.left_out = saved, ()
        self._loaded_whole()

    def _loaded_whole(self):
        """Called once the whole SavedModel serves (`whole`, or the end of a warm-up that loaded it): a kind that
        keeps functions read from `_saved` reads them again."""

    def serving_signature(self):
        """The signature the warm-up requests are replayed on (`serving_default`)."""
        signatures = getattr(self._served(), "signatures", None) or {}
        if "serving_default" not in signatures:
            raise self._refuse(f"it has no `serving_default` signature (signatures: {sorted(signatures)})")
        return signatures["serving_default"]

    def run(self, signature, **inputs):
        """The SavedModel's signature `signature` on one batch (see `Engine.run`), in the request's context
        (`requesting`): each input converted to the dtype the signature takes, each output to numpy."""
        signatures = self._saved.signatures
        if signature not in signatures and self.left_out:  # one the requests do not call: the rest loaded now
            signatures = self.whole().signatures
        function = signatures[signature]
        _, specs = function.structured_input_signature
        with self.requesting():
            outputs = function(**{name: tf.constant(value, specs[name].dtype) for name, value in inputs.items()})
        return {name: value.numpy() for name, value in outputs.items()}

    def answered(self):
        """Called by the kinds after each request: starts a pending background warm-up (once)."""
        if self._warm_up_pending:
            self._warm_up_pending = False
            # A daemon thread (a user's process never waits for a warm-up it did not ask for), stopped between two
            # of its requests before the interpreter finalizes (`stop_warm_ups`).
            self._warming_thread = threading.Thread(target=self._warm_up_in_background,
                                                    name=f"warm-up of {self.export_dir}", daemon=True)
            with _warm_ups_lock:
                _warm_ups.add((self._warming_thread, self._stop_warming))
            self._warming_thread.start()

    def _warm_up_in_background(self):
        try:
            self.warm_up()
        finally:
            with _warm_ups_lock:
                _warm_ups.discard((self._warming_thread, self._stop_warming))

    def requesting(self):
        """The context the kinds answer a request in: before a background warm-up has ended, the graph as loaded
        (`functions_unoptimized`: a first call ready seconds sooner); after it, or without one, the rewritten graph."""
        if self._background and not self.warmed.is_set() and threading.current_thread() is not self._warming_thread:
            return functions_unoptimized()
        return contextlib.nullcontext()

    def _instantiate(self):
        """One small request on each function the kind's requests call, so that their rewritten graphs are built
        (in the warm-up's thread). The kinds whose requests call more than the replayed signature override it."""

    def warm_up(self):
        """Replays the export's warm-up requests now; returns the seconds it took (0 without a warm-up file).

        A failure is logged, never raised from the background: serving goes on colder.
        """
        started = time.perf_counter()
        try:
            if self.left_out and self.warms_what_is_left_out:
                with self._loading:
                    self._warming, _ = self._load(())
            self.warm_up_seconds = warmup.replay(self.export_dir, self.serving_signature(), stop=self._stop_warming)
        except Exception as error:  # noqa: BLE001 - a background thread has no caller to raise to
            logger.warning("The warm-up of %s stopped (%s); serving goes on without it.", self.export_dir, error)
            self.warm_up_seconds = time.perf_counter() - started
        try:
            background = threading.current_thread() is self._warming_thread
            if background and not self._stop_warming.is_set():  # the requests after it take the rewritten graph
                self._instantiate()
        except Exception as error:  # noqa: BLE001 - as above
            logger.warning("The warm-up of %s stopped (%s); serving goes on without it.", self.export_dir, error)
        finally:
            if self._warming is not None:  # warm now (or as warm as the warm-up got): it serves from here on
                with self._loading:
                    self._use(self._warming)
                    self._warming = None
            self.warmed.set()
        return self.warm_up_seconds

    def _served(self):
        """The SavedModel the warm-up runs on: the whole one it loaded, else the one that serves."""
        return self._warming if self._warming is not None else self._saved

    def __repr__(self):
        return f"{type(self).__name__}({self.export_dir!r})"
