"""The LiteRT engine: a `.tflite` file of `export_litert` served without TensorFlow (`load_litert`, `LiteRTModel`).

The interpreter is `ai-edge-litert`'s, with tensorflow-text's kernels
registered from their shared library (`_text_kernels`); the file's record
(`litert_record.file_record`) is checked before LiteRT reads the file.
`LiteRTModel` is the engine (`engine.Engine`: `run` a signature); the file's
kind answers through the same code as its SavedModel export
(`export.kinds`): `LiteRTClassifier`, `LiteRTTagger`, `LiteRTSentenceEncoder`.
"""

import logging
import os
import threading

import numpy as np

from bert_keras._checks import check_int
from bert_keras._platform.native_log import NativeLogFilter
from bert_keras._platform.native import load_text_kernels
from bert_keras.export.engine import Engine
from bert_keras.export.entity_groups import check_aggregation  # no TensorFlow (text.decoding)
from bert_keras.export.kinds.classifier import ClassifierAnswers
from bert_keras.export.kinds.reader import ReaderAnswers
from bert_keras.export.kinds.sentence_encoder import SentenceEncoderAnswers
from bert_keras.export.kinds.tagger import OUTPUTS as TAGGER_OUTPUTS  # noqa: F401 - litert.py names it
from bert_keras.export.kinds.tagger import TaggerAnswers, piece_rows
from bert_keras.export.litert_record import (_RecordValueError, _expect, _ids_only, _record_tokenizer, _recorded,
                                             _recorded_names, check_carried, file_record)
from bert_keras.export.litert_windows import reader_settings, window_reads
from bert_keras.export.manifest import CLASSIFIER, READER, SENTENCE_ENCODER, TAGGER, ExportError
from bert_keras.predictions import EmbeddingMethods, text_list

logger = logging.getLogger(__name__)

# A tagger's windows per `serve_ids` call: one long text holds one call's activations, however many windows it makes
# (the SavedModel tagger's `_serving.WINDOWS_PER_CALL`, which this module cannot import: it imports TensorFlow).
WINDOWS_PER_CALL = 64
_IDS_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")
# Pieces per raw character at most: a code point normalises to at most 18 (NFKD's longest expansion, U+FDFA), and a
# piece holds one at least. A text of few enough characters holds at most `windows_per_call` windows for sure.
_PIECES_PER_CHARACTER = 18


def _text_kernels():
    """tensorflow-text's LiteRT kernels, registered by name from its shared library, without importing TensorFlow
    (`_platform.native.load_text_kernels`); the registrar module's functions where that library is not found."""
    try:
        with NativeLogFilter():  # the libraries' start-up lines in absl's format ("oneDNN custom operations are on")
            return load_text_kernels()
    except OSError as error:
        logger.info("Registering tensorflow-text's kernels through its module (%s)", error)
        from tensorflow_text import tflite_registrar

        return list(tflite_registrar.SELECT_TFTEXT_OPS)


def check_num_threads(num_threads):
    """The interpreter's threads: `num_threads`, an int in [1, os.cpu_count()] (None: every core); a `ValueError`
    naming it otherwise. More threads than cores only wait on each other, and LiteRT ends the process (a
    segmentation fault) on a count of thousands."""
    cores = os.cpu_count() or 1
    return cores if num_threads is None else check_int("num_threads", num_threads, minimum=1, maximum=cores)


def _interpreter(path, strings, num_threads, xnnpack=True):
    """LiteRT's interpreter of `path`: with tensorflow-text's kernels for a file from strings; with LiteRT's default
    delegate (XNNPACK) unless `xnnpack` is False."""
    try:
        from ai_edge_litert import interpreter as litert
    except ImportError:
        raise ImportError("Serving a .tflite file needs the LiteRT interpreter: pip install ai-edge-litert "
                          "(or bert-keras[litert]).") from None
    threads = check_num_threads(num_threads)
    options = {} if xnnpack else {"experimental_op_resolver_type": litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    if not strings:
        return litert.Interpreter(model_path=path, num_threads=threads, **options)
    return litert.InterpreterWithCustomOps(model_path=path, num_threads=threads,
                                           custom_op_registerers=_text_kernels(), **options)


# The output of `serve_ids` whose last dimension the record's names count, per kind.
_OUTPUT_OF = {CLASSIFIER: "probabilities", TAGGER: "scores", SENTENCE_ENCODER: "embeddings"}


def _output_width(runner, output):
    """The last dimension of the signature runner's `output` (what the model was converted with)."""
    details = runner.get_output_details()
    return int(details[output]["shape_signature"][-1]) if output in details else None



class _LockedRunner:
    """The model's signature runner `name` as a caller gets it (`LiteRTModel.serve_ids`): its calls hold the model's
    lock (`LiteRTModel._call`); its details are the runner's."""

    def __init__(self, model, name):
        self._model, self._name = model, name

    def __call__(self, **inputs):
        return self._model._call(self._name, **inputs)

    def __getattr__(self, attribute):  # get_input_details, get_output_details
        return getattr(getattr(self._model, f"_{self._name}"), attribute)


class LiteRTModel(Engine):
    """A `.tflite` file of `export_litert`, loaded: `predict` / `encode` as the export's own loader answers.

    `LiteRTModel(path)` (and `load_litert`) gives the class of the file's
    kind: `LiteRTClassifier`, `LiteRTTagger` or `LiteRTSentenceEncoder`, each
    this engine mixed with its kind's answers (`export.kinds`), the code its
    SavedModel export answers with.

    A tagger's text is cut into windows by the file (its `windows`
    signature) and its windows run through `serve_ids` `windows_per_call` at
    a time, so that one long text holds one call's activations (a text too
    short to make more windows runs through `serve`, in one call); a file
    converted before `windows` existed runs all windows of a text in one call
    of its `serve` (memory growing with the text's length: convert it again).

    One model may be shared between threads: every use of its interpreter
    (a LiteRT interpreter is not thread-safe) holds the model's lock, so
    concurrent calls run one after another.

    Attributes:
        path: str. kind: str (classifier, tagger, sentence_encoder).
        record: dict. What `PATH.json` records (the export's settings).
        serves_strings: bool. Whether the file tokenizes (WordPiece) or
            serves token ids only (`serve_ids`).
        serve_ids: the file's `serve_ids` signature runner, called under the
            model's lock: `serve_ids(input_word_ids=..., input_mask=...,
            input_type_ids=...)`.
        windows_per_call: int. A tagger's windows per `serve_ids` call.
    """

    def __new__(cls, path, *args, **kwargs):
        if cls is LiteRTModel:  # the class of the file's kind; a file that cannot be read: `__init__` says why
            try:
                cls = _KINDS.get(file_record(path).get("kind"), LiteRTModel)
            except (ExportError, OSError):
                pass
        return super().__new__(cls)

    def __init__(self, path, num_threads=None, windows_per_call=WINDOWS_PER_CALL):
        self.path = os.fspath(path)
        self._num_threads = check_num_threads(num_threads)
        self.windows_per_call = check_int("windows_per_call", windows_per_call, minimum=1)
        # Held around every use of the interpreter (resize, allocate, set, invoke, get: a signature runner's call).
        self._lock = threading.RLock()
        record = file_record(self.path)  # the size and SHA-256 recorded, before LiteRT reads the file
        if type(self).kind not in (None, record.get("kind")):
            raise ExportError(f"{self.path!r} was replaced by a LiteRT {record.get('kind')} while it was loaded as a "
                              f"{type(self).kind}; load it again.")
        self.record, self.kind = record, record.get("kind")
        self.serves_strings = record.get("strings") is True
        tokenizer = _record_tokenizer(self.path, record)
        self._start(xnnpack=True)
        self.serve_ids = _LockedRunner(self, "serve_ids")
        width = _output_width(self._serve_ids, _OUTPUT_OF.get(self.kind))
        self.label_names = _recorded_names(self.path, record, "label_names", width) if self.kind == CLASSIFIER else None
        self.num_classes = len(self.label_names or ())
        self.inputs = ["question", "context"] if self.kind == READER else ["text"]
        self.tag_names = _recorded_names(self.path, record, "tag_names", width) if self.kind == TAGGER else None
        self.aggregation = _recorded(self.path, "aggregation", record.get("aggregation", "simple"), lambda value: (
            check_aggregation(_expect("aggregation", value, isinstance(value, str), "a str"))))
        self.embedding_dim = None
        if self.kind == SENTENCE_ENCODER:
            self.embedding_dim = _recorded(self.path, "dimension", record.get("dimension"),
                                           lambda value: check_int("dimension", value, minimum=width, maximum=width))
        self._unknown_token = tokenizer.get("unknown_token", "[UNK]")
        self._suffix_indicator = tokenizer.get("suffix_indicator", "")
        self.tokenizer_kind = tokenizer["kind"]
        self._one_call_characters = (self._tagger_one_call_characters(tokenizer)
                                      if self.kind == TAGGER and self.serves_strings else 0)
        self._reader_settings = _recorded(self.path, "windows", record, _reader_record) if self.kind == READER else None
        self._check_carried()
        if self.kind == TAGGER and self.serves_strings and self._windows is None:
            logger.warning("%s was converted before LiteRT taggers served a text's windows a few at a time: each text "
                           "runs all its windows in one call, and its memory grows with its length. Convert the "
                           "export again (bert-keras litert --force) to serve long texts in flat memory.", self.path)

    def _check_carried(self):
        """Refuses a record whose values differ from those the file carries (its `record` signature), read once the
        file's SHA-256 is checked: what the record says is what the file was converted with."""
        if "record" not in self._interpreter.get_signature_list():
            raise ExportError(f"{self.path!r} carries no copy of its record (converted by an earlier version of "
                              "bert_keras, or its record's version was edited): an edited record could not be told "
                              "apart. Convert the export again (bert-keras litert --force).")
        with self._lock, NativeLogFilter():  # its first call creates the delegate, which says so on stderr
            carried = self._interpreter.get_signature_runner("record")(unused=np.zeros([1], np.int32))["record"]
        check_carried(self.path, self.record, bytes(np.asarray(carried).reshape(-1)[0]).decode("utf-8"))

    def _tagger_one_call_characters(self, tokenizer):
        """The longest text whose windows (at most `windows_per_call` of them) `serve` runs in one call: one call fewer
        than `windows` and `serve_ids`, the same numbers."""
        seq_length = _recorded(self.path, "tokenizer.seq_length", tokenizer.get("seq_length"),
                               lambda value: check_int("tokenizer.seq_length", value, minimum=3))
        stride = _recorded(self.path, "stride", self.record.get("stride"),
                           lambda value: check_int("stride", value, minimum=0, maximum=seq_length - 3))
        window = seq_length - 2
        return (window + (self.windows_per_call - 1) * (window - stride)) // _PIECES_PER_CHARACTER

    def _start(self, xnnpack):
        self._interpreter = _interpreter(self.path, self.serves_strings, self._num_threads, xnnpack=xnnpack)
        self.xnnpack = xnnpack
        self._runners = {}  # signature -> its runner, made once per interpreter
        self._serve_ids = self._runner("serve_ids")
        self._serve = self._runner("serve") if self.serves_strings else None
        # A tagger file's `windows` (`_litert_graph.TAGGER_SIGNATURES`); None in a file converted before it.
        self._windows = self._runner("windows") if self.serves_strings else None
        self._prepared = set()  # the runners called once: LiteRT applies its delegate on a runner's first call

    def _runner(self, signature):
        """The interpreter's runner of `signature`, or None where the file has no such signature."""
        if signature not in self._runners:
            found = signature in self._interpreter.get_signature_list()
            self._runners[signature] = self._interpreter.get_signature_runner(signature) if found else None
        return self._runners[signature]

    def check_serves_text(self):
        if not self.serves_strings:
            raise ExportError(_ids_only(self.path, self.record))

    def run(self, signature, **inputs):
        """The file's signature `signature` on one batch (see `Engine.run`): lists of str as UTF-8 bytes."""
        return self._call(signature, **{name: _array(value) for name, value in inputs.items()})

    def _run(self, texts, signature="serve"):
        """The file's `signature` (`serve`, or a tagger's `windows`) on `texts`, a list of str."""
        return self.run(signature, text=texts)

    def _call(self, signature, **inputs):
        """The signature runner `signature` on `inputs`, its delegate's first-call lines kept off stderr."""
        with self._lock:  # a LiteRT interpreter is not thread-safe: one call of this model at a time
            return self._call_locked(signature, **inputs)

    def _call_locked(self, signature, **inputs):
        runner = self._runner(signature)
        if runner is None:
            raise ExportError(f"{self.path!r} has no signature {signature!r} (its signatures: "
                              f"{sorted(self._interpreter.get_signature_list())}).")
        if signature in self._prepared:
            return runner(**inputs)
        try:
            with NativeLogFilter():  # the delegate's "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."
                outputs = runner(**inputs)
            self._prepared.add(signature)
            return outputs
        except RuntimeError as error:
            # XNNPACK refuses to prepare the dynamic-range int8 graph of the token-packed encoder ("failed to create
            # XNNPACK Value for tensor -1"), which files converted from exports without `serve_ids_padded` hold (the
            # float32 graph, and int8 in the padded layout, it takes): LiteRT's own kernels then answer, slower.
            if not self.xnnpack or "XNNPACK" not in str(error):
                raise
            logger.info("%s: XNNPACK cannot prepare this graph (%s); serving with LiteRT's builtin kernels.",
                        self.path, str(error).splitlines()[0][:120])
            self._start(xnnpack=False)
            return self._call_locked(signature, **inputs)

    def _wrong_method(self, *args, **kwargs):
        """What a method of another kind says: which method this file's kind answers with."""
        method = {CLASSIFIER: "predict", TAGGER: "predict", READER: "predict", SENTENCE_ENCODER: "encode"}.get(self.kind,
                                                                                                        "run")
        raise ExportError(f"{self.path!r} is a LiteRT {str(self.kind).replace('_', ' ')}; call its `{method}`.")

    predict = predict_proba = tag_pieces = encode = _wrong_method  # the kinds' classes answer theirs

    def __repr__(self):
        return f"LiteRTModel({self.path!r}, kind={self.kind!r})"


# What a record holds besides the export's settings: its bookkeeping, the kind, how the file tokenizes and runs.
_NOT_SETTINGS = frozenset({"format", "version", "engine", "writer", "converted_from", "size", "sha256", "previous", "kind", "tokenizer", "quantize",
                           "strings", "label_names", "tag_names"})


def _reader_record(record):
    """A reader record's window settings (`litert_windows.reader_settings`), a `ValueError` in its own words."""
    try:
        return reader_settings(record)
    except ValueError as error:
        raise _RecordValueError(str(error)) from None


def _array(value):
    """An input of `LiteRTModel.run` as LiteRT takes it: a list of str as a numpy array of UTF-8 bytes."""
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return np.array([item.encode("utf-8") for item in value], dtype=object)
    return value


class LiteRTClassifier(ClassifierAnswers, LiteRTModel):
    """A LiteRT classifier: `predict` and `predict_proba` as `ExportedClassifier`'s (`kinds.classifier`)."""

    kind = CLASSIFIER

    def _scores(self, columns):
        return self.run("serve", text=columns[0])["probabilities"]


class LiteRTTagger(TaggerAnswers, LiteRTModel):
    """A LiteRT tagger: `predict` and `tag_pieces` as `ExportedTagger`'s (`kinds.tagger`), one text per call."""

    kind = TAGGER

    def _piece_batch(self, texts):
        """The per-piece outputs of `texts`, one text at a time: a text of more windows than one call holds runs
        its windows through `serve_ids` `windows_per_call` at a time (`_entry_scores`)."""
        rows = []
        for text in texts:
            in_one_call = self._windows is None or len(text) <= self._one_call_characters
            outputs = self.run("serve" if in_one_call else "windows", text=[text])
            packed = {name: outputs.pop(name) for name in _IDS_INPUTS if name in outputs}  # (windows, width) each
            [piece] = piece_rows(outputs)
            if packed:
                piece["scores"] = self._entry_scores(packed, piece["window"], piece.pop("column"))
                piece["tag_ids"] = np.argmax(piece["scores"], axis=-1).astype(np.int32)
            rows.append(piece)
        return rows

    def _entry_scores(self, packed, window, column):
        """The scores of one text's entries, float32 `(entries, tags)`: `serve_ids` on its packed windows
        `windows_per_call` at a time, each entry's taken at its `window` and `column` (entries window after window)."""
        scores = np.zeros((len(window), len(self.tag_names)), dtype=np.float32)
        count = len(packed["input_word_ids"]) if len(window) else 0  # a text of no pieces: no entry to score
        for begin in range(0, count, self.windows_per_call):
            end = min(begin + self.windows_per_call, count)
            first, last = np.searchsorted(window, [begin, end])  # the entries of windows [begin, end)
            chunk = self._call("serve_ids", **{name: value[begin:end] for name, value in packed.items()})["scores"]
            scores[first:last] = chunk[window[first:last] - begin, column[first:last]]  # (chunk, width, tags) -> rows
        return scores


class LiteRTSentenceEncoder(EmbeddingMethods, SentenceEncoderAnswers, LiteRTModel):
    """A LiteRT sentence encoder: `encode`, `encode_query`, `encode_documents` and `similarity` as
    `ExportedSentenceEncoder`'s (`kinds.sentence_encoder`, `predictions.EmbeddingMethods`).

    Attributes:
        info: dict. The export's settings as its record carries them
            (source, pooling, normalize, max_seq_length, dimension), as
            `ExportedSentenceEncoder.info`.
    """

    kind = SENTENCE_ENCODER

    @property
    def info(self):
        return {key: value for key, value in self.record.items() if key not in _NOT_SETTINGS}

    def _embed_batches(self, batches):
        for texts in batches:
            yield self.run("serve", text=texts)["embeddings"]


class LiteRTReader(ReaderAnswers, LiteRTModel):
    """A LiteRT reader: `predict` as `ExportedReader`'s (`kinds.reader`).

    The file tokenizes questions and contexts (its `pieces` signature, with
    character offsets) and runs the model on packed windows (`serve_ids`);
    the windows between the two are cut as the export's graph cuts them
    (`litert_windows`), `windows_per_call` at a time: a long context holds
    one call's activations.
    """

    kind = READER

    def _window_reads(self, questions, contexts):
        self.check_serves_text()
        settings = self._reader_settings

        def pieces(texts):
            return self.run("pieces", text=texts)

        def serve_ids(**packed):
            return self._call("serve_ids", **packed)

        yield from window_reads(pieces, serve_ids, questions, contexts, settings, self.windows_per_call)


# The class of each kind a LiteRT file serves (`LiteRTModel.__new__`).
_KINDS = {CLASSIFIER: LiteRTClassifier, TAGGER: LiteRTTagger, READER: LiteRTReader,
          SENTENCE_ENCODER: LiteRTSentenceEncoder}


def load_litert(path, num_threads=None, windows_per_call=WINDOWS_PER_CALL):
    """Loads a `.tflite` file of `export_litert` (see `LiteRTModel`) without importing TensorFlow.

    Args:
        path: str. The file; `PATH.json` beside it says what it serves, and
            the file's size and SHA-256, checked before LiteRT reads it.
        num_threads: optional int in [1, os.cpu_count()]. The interpreter's
            threads. Defaults to the machine's cores.
        windows_per_call: int, at least 1. A tagger's windows per call of
            its model: one text's memory holds this many windows'
            activations, however long it is. Defaults to `WINDOWS_PER_CALL`.

    Raises:
        ExportError: the file is not this package's, differs from its record
            (damaged, changed, cut), or its record is damaged.
        ValueError: `num_threads` is not an int in [1, os.cpu_count()], or
            `windows_per_call` not a positive int.
    """
    return LiteRTModel(path, num_threads=num_threads, windows_per_call=windows_per_call)
