"""The extractive question-answering export: a SavedModel from a raw question and context to the answer's span.

`export_reader` writes a `BertSpanLabeler`'s own computation behind
signatures that take raw strings: `serving_default` returns the best answer's
character span (`start`, `end`, code points into the context), its `score`
and text, and the null (`[CLS]`) score; `windows` returns every window's
start and end probabilities and its pieces' offsets, `window_range` a range
of them. `load_reader` reads it back as an `ExportedReader`, whose `predict`
decodes the windows as transformers 4's question-answering pipeline does
(top-k of distinct spans, unanswerable questions, `max_answer_len`, answers
widened to whole words), a few hundred windows at a time.

The windows are transformers' (`bert_keras.text.windows.qa_windows`: up to 384
pieces, stride 128, `only_second`; RoBERTa's `<s> q </s></s> c </s>` for a
byte-level BPE model); probabilities are a softmax per window over `[CLS]`
and the context's pieces; a span's score is p(start) x p(end)
with `[CLS]` left out, start <= end, at most `max_answer_len` pieces; the
best window wins.
"""

import logging
import os

import tensorflow as tf

from bert_keras._checks import check_int
from bert_keras.dtypes import check_compute_dtype, compute_dtype
from bert_keras.export._serving import WINDOWS_PER_CALL, in_chunks
# AnswerPool, decode_answers: the decoding, importable from here as before.
from bert_keras.export.kinds.reader import (  # noqa: F401
    RANGE_ENDPOINT, WINDOWS_PER_READ, AnswerPool, ReaderAnswers, decode_answers)
from bert_keras.export.loaded import LoadedExport
from bert_keras.export.manifest import READER

logger = logging.getLogger(__name__)

# The writer's graph (the windows, the model, Keras) is imported in the functions that build it, where an export is
# written or a model scored: loading an export imports none of it (tests/export/test_loader_imports.py).

INPUTS = ("question", "context")
RANGE_SIGNATURE = [tf.TensorSpec([], tf.int64, name="begin"), tf.TensorSpec([], tf.int64, name="size")]
DEFAULT_SEQ_LENGTH = 384  # transformers' question-answering pipeline: max_seq_len = min(model_max_length, 384)
WINDOW_OUTPUTS = ("example_index", "start_probabilities", "end_probabilities", "context_mask", "char_starts",
                  "char_ends", "word_starts", "word_ends")


def _tokenizer_of(model):
    """The model's tokenizer with character offsets, or a `ValueError` saying what the export needs."""
    tokenizer = getattr(getattr(model, "preprocessor", None), "tokenizer", None)
    if not callable(getattr(model, "serving_outputs", None)) or not callable(
            getattr(tokenizer, "tokenize_with_char_offsets", None)):
        raise ValueError(
            "Received an invalid value for argument `model`, expected a BertSpanLabeler with a BertPreprocessor "
            "(e.g. BertSpanLabeler.from_checkpoint(folder)): the export cuts its own windows with the "
            f"preprocessor's tokenizer and keeps each piece's character offsets. Received: {type(model).__name__} "
            f"with preprocessor {type(getattr(model, 'preprocessor', None)).__name__}"
        )
    if tokenizer.packing == "roberta" and getattr(model, "context_segment_id", None) is not None:
        raise ValueError(
            f"Received a span labeler with context_segment_id={model.context_segment_id} whose tokenizer packs "
            "RoBERTa's way (`<s> question </s></s> context </s>`, type ids all 0): its answer mask would leave only "
            "the first token. Build it with context_segment_id=None, e.g. "
            "BertSpanLabeler.from_checkpoint(folder, context_segment_id=None): the export masks the question by "
            "its windows."
        )
    return tokenizer


def window_probabilities(model, tokenizer, questions, contexts, seq_length, doc_stride, max_question_length,
                         windows_per_call=WINDOWS_PER_CALL, window_range=None):
    """Every window of the batch with its start and end probabilities (float32), as `windows` serves them.

    The windows are packed and run through the model `windows_per_call` at a
    time, one call after another (`_serving.in_chunks`): a context of any
    length holds the packed inputs and activations of that many windows at
    once, beside its pieces and the outputs.

    Args:
        window_range: optional `(begin, size)` int64 scalars: only windows
            `[begin, begin + size)` of the batch's (in order; clipped to
            those there are), and the dict gains `window_count`, all the
            batch's windows. Defaults to all of them.
    """
    from bert_keras.text.windows import qa_layout  # the writer's graph: see above

    layout = qa_layout(tokenizer, questions, contexts, seq_length, doc_stride, max_question_length)
    begin, end = tf.constant(0, tf.int64), layout["count"]
    if window_range is not None:
        begin = tf.minimum(tf.maximum(tf.cast(window_range[0], tf.int64), 0), end)
        end = tf.minimum(begin + tf.maximum(tf.cast(window_range[1], tf.int64), 0), end)
    specs = {"example_index": (tf.int64, [None]), "context_mask": (tf.bool, [None, None]),
             **{key: (tf.int64, [None, None]) for key in ("char_starts", "char_ends", "word_starts", "word_ends")},
             **{f"{name}_probabilities": (tf.float32, [None, None]) for name in ("start", "end")}}
    outputs = _in_window_chunks(model, layout, begin, end, lambda windows: windows, specs, windows_per_call)
    if window_range is not None:
        outputs["window_count"] = layout["count"]
    return outputs


def _in_window_chunks(model, layout, begin, end, reduce, specs, windows_per_call):
    """`reduce(windows)` of windows `[begin, end)` of `layout`, packed and run `windows_per_call` at a time.

    Every chunk is cut to the width of the range's longest window (padding
    carries nothing), so that chunks concatenate and each window's
    probabilities are what one call of all the windows gives.
    """
    from bert_keras.text.windows import pack_qa_windows  # the writer's graph: see above

    example, first, last = (layout[key][begin:end] for key in ("example", "first", "last"))
    lengths = tf.gather(layout["question_length"], example) + layout["num_special"] + (last - first)
    width = tf.maximum(tf.reduce_max(tf.concat([lengths, [1]], 0)), 1)  # the longest window: real pieces

    def run(chunk_begin, chunk_end):
        windows = pack_qa_windows(layout, begin + chunk_begin, begin + chunk_end)
        windows = {key: value[:, :width] if value.shape.rank == 2 else value for key, value in windows.items()}
        packed = {key: windows[key] for key in ("input_word_ids", "input_mask", "input_type_ids")}
        logits = model.serving_outputs(packed)
        # [CLS] and the context's pieces only, as the pipeline's `p_mask`: the model's own mask (BERT's packing,
        # where the context is segment 1) is the same; a model without one (RoBERTa's packing) needs it here.
        allowed = windows["context_mask"] | tf.equal(tf.range(width), 0)[None, :]  # (chunk, width)
        for name in ("start", "end"):
            windows[f"{name}_probabilities"] = tf.nn.softmax(
                tf.where(allowed, tf.cast(logits[f"{name}_logits"], tf.float32), -1e9), axis=-1)
        outputs = reduce(windows)
        return {key: outputs[key] for key in specs}

    return in_chunks(run, end - begin, specs, windows_per_call)


def _window_best(windows, max_answer_len):
    """Each window's best span: `best` (its p(start) x p(end), -1 for none), `start`, `end` (code points, widened
    to whole words), `null` (p([CLS]) x p([CLS])), `(windows,)` each."""
    start_p, end_p = windows["start_probabilities"], windows["end_probabilities"]
    in_context = windows["context_mask"]
    width = tf.shape(start_p)[1]
    padded_end = tf.pad(end_p, [[0, 0], [0, max_answer_len]])
    padded_mask = tf.pad(in_context, [[0, 0], [0, max_answer_len]])
    # scores[w, s, k]: the span from piece s to piece s + k (transformers' band of the outer product).
    scores = tf.stack([start_p * padded_end[:, k : k + width] for k in range(max_answer_len)], axis=2)
    valid = tf.stack([in_context & padded_mask[:, k : k + width] for k in range(max_answer_len)], axis=2)
    flat = tf.reshape(tf.where(valid, scores, -1.0), [tf.shape(scores)[0], -1])  # (windows, width * K)
    index = tf.argmax(flat, axis=1, output_type=tf.int64)  # first best: smallest start, then end
    rows = tf.range(tf.size(index, out_type=tf.int64))
    start_piece, end_piece = index // max_answer_len, index // max_answer_len + index % max_answer_len
    return {"best": tf.reduce_max(flat, axis=1), "null": start_p[:, 0] * end_p[:, 0],
            "start": tf.gather_nd(windows["word_starts"], tf.stack([rows, start_piece], 1)),
            "end": tf.gather_nd(windows["word_ends"], tf.stack([rows, end_piece], 1)),
            "example_index": windows["example_index"]}


_BEST_SPECS = {"best": (tf.float32, [None]), "null": (tf.float32, [None]), "start": (tf.int64, [None]),
               "end": (tf.int64, [None]), "example_index": (tf.int64, [None])}


def _example_best(per_window, contexts):
    """Per example, the best of its windows' best spans (`_window_best`): `best_answers`' dict."""
    example, batch = per_window["example_index"], tf.size(contexts, out_type=tf.int64)
    best = per_window["best"]
    # The best window: the first with the example's highest score.
    top = tf.math.unsorted_segment_max(best, example, batch)
    windows_count = tf.size(best, out_type=tf.int64)
    candidates = tf.where(best >= tf.gather(top, example), tf.range(windows_count, dtype=tf.int64), windows_count)
    window = tf.math.unsorted_segment_min(candidates, example, batch)
    found = tf.gather(best, window) >= 0
    start = tf.where(found, tf.gather(per_window["start"], window), 0)
    end = tf.where(found, tf.gather(per_window["end"], window), 0)
    return {
        "start": start,
        "end": end,
        "score": tf.where(found, tf.gather(best, window), 0.0),
        "answer": tf.strings.substr(contexts, start, end - start, unit="UTF8_CHAR"),
        "null_score": tf.math.unsorted_segment_min(per_window["null"], example, batch),
    }


def best_answers(windows, contexts, max_answer_len):
    """Per example, in the graph: the best span over its windows (top 1 of `ExportedReader.predict`).

    Returns:
        A dict of `(batch,)` tensors: `start`, `end` (int64 code points,
        widened to whole words), `score` (float32 p(start) x p(end); 0 when
        the context has no piece), `answer` (the context's characters), and
        `null_score` (the smallest p([CLS]) x p([CLS]) over the windows).
    """
    return _example_best(_window_best(windows, max_answer_len), contexts)


def chunked_best_answers(model, tokenizer, questions, contexts, seq_length, doc_stride, max_question_length,
                         max_answer_len, windows_per_call=WINDOWS_PER_CALL):
    """`best_answers(window_probabilities(...))`, each chunk of windows reduced to its best spans as it is run:
    what `serving_default` serves, holding a few numbers per window beside one chunk's windows."""
    from bert_keras.text.windows import qa_layout  # the writer's graph: see above

    layout = qa_layout(tokenizer, questions, contexts, seq_length, doc_stride, max_question_length)
    per_window = _in_window_chunks(model, layout, tf.constant(0, tf.int64), layout["count"],
                                   lambda windows: _window_best(windows, max_answer_len), _BEST_SPECS,
                                   windows_per_call)
    return _example_best(per_window, contexts)


def window_settings(model, tokenizer, seq_length=None, doc_stride=None, max_question_length=None):
    """The export's `(seq_length, doc_stride, max_question_length)`: those given, checked; the model's own by default.

    `seq_length` defaults to the model's own length (its preprocessor's),
    at most 384, as transformers' question-answering pipeline serves
    (`min(model_max_length, 384)`); `doc_stride` to `min(seq_length // 2,
    128)` (the pipeline's) and at most half the context pieces beside the
    longest question; `max_question_length` to 64, or a quarter of a
    window for a shorter model. A length the encoder's positions cannot
    hold is refused here, at export time, not at the first long context.

    Raises:
        ValueError: naming the argument, e.g. a `seq_length` over the
            encoder's `max_sequence_length`.
    """
    from bert_keras.text.windows import check_window_arguments  # the writer's: see above

    num_special = tokenizer.num_special_tokens(2)
    if seq_length is None:
        seq_length = min(DEFAULT_SEQ_LENGTH, model.preprocessor.seq_length)
    seq_length = check_int("seq_length", seq_length, minimum=num_special + 1)
    max_length = getattr(getattr(model, "encoder", None), "max_sequence_length", None)
    if isinstance(max_length, int) and seq_length > max_length:
        raise ValueError(
            f"Received an invalid value for argument `seq_length`, expected at most the encoder's "
            f"max_sequence_length={max_length} (its positions: a longer window cannot be served). "
            f"Received: seq_length={seq_length}"
        )
    if max_question_length is None:
        max_question_length = max(1, min(64, (seq_length - num_special) // 4))
    if doc_stride is None:
        room = seq_length - num_special - max_question_length  # context pieces beside the longest question
        doc_stride = max(0, min(128, seq_length // 2, room // 2))
    check_window_arguments(seq_length, doc_stride, max_question_length, num_special)
    return seq_length, doc_stride, max_question_length


def export_reader(model, export_dir, overwrite=False, extra_assets=None, dtype="float32", seq_length=None,
                  doc_stride=None, max_question_length=None, max_answer_len=15):
    """Exports an extractive question-answering model as a SavedModel that takes the raw question and context.

    `serving_default` takes `question` and `context` (`(batch,)` strings) and
    returns the best answer per example: `start`, `end` (int64 code points
    into the context, `context[start:end]` is the answer), `score`,
    `answer` (string) and `null_score` (compare it with `score` for SQuAD
    v2.0's unanswerable questions). `windows` (same inputs) returns every
    window's `example_index`, `start_probabilities`, `end_probabilities`,
    `context_mask` and offsets (`char_starts`, `char_ends`, and
    `word_starts`, `word_ends` of the piece's word), which
    `ExportedReader.predict` decodes for top-k; `window_range` (the same
    inputs and int64 scalars `begin`, `size`) returns windows `[begin, begin
    + size)` of those and `window_count`, which `predict` reads a few
    hundred at a time. Every signature packs, runs and reduces
    `WINDOWS_PER_CALL` windows at a time, one call after another: the
    memory one context holds is that of its pieces, a few numbers per
    window and one call's windows, not all of its windows. All in the graph:
    `tf.saved_model.load(dir)` users and TF Serving get spans without Python
    (after `import tensorflow_text`). A TF Serving warm-up file is written.

    Args:
        model: a `BertSpanLabeler` with a `BertPreprocessor` (its tokenizer,
            WordPiece, SentencePiece or byte-level BPE, cuts the windows);
            for RoBERTa's packing, built with `context_segment_id=None`.
        export_dir: str. Written to a temporary sibling and moved into place.
        overwrite: bool. Replace an earlier export of this package. Defaults to `False`.
        extra_assets: optional dict of file name -> JSON-serialisable value
            (or `bytes`), written to `assets.extra/`.
        dtype: `"float32"`, or `"bfloat16"` for a model on a `BertEncoder`.
            Defaults to `"float32"`.
        seq_length: optional int. Pieces per window, at most the encoder's
            `max_sequence_length`. Defaults to the model's own length (its
            preprocessor's `seq_length`), at most 384 (transformers'
            question-answering pipeline: `min(model_max_length, 384)`).
        doc_stride: optional int. Context pieces shared by consecutive
            windows. Defaults to `min(seq_length // 2, 128)`, at most half
            the context pieces beside the longest question.
        max_question_length: optional int. A longer question keeps its first
            pieces. Defaults to `64`, or a quarter of the window where that
            is fewer.
        max_answer_len: int. The longest answer of `serving_default`, in
            pieces (`predict` takes its own). Defaults to `15`.

    Returns:
        `export_dir`.
    """
    from bert_keras.encoder import BertEncoder  # the writer's: see above
    from bert_keras.export._writer import ids_endpoints, write_export

    export_dir = os.fspath(export_dir)
    check_compute_dtype(dtype)
    tokenizer = _tokenizer_of(model)
    seq_length, doc_stride, max_question_length = window_settings(model, tokenizer, seq_length, doc_stride,
                                                                  max_question_length)
    max_answer_len = check_int("max_answer_len", max_answer_len, minimum=1)
    if dtype != "float32" and not isinstance(getattr(model, "encoder", None), BertEncoder):
        raise ValueError(f"Received dtype={dtype!r} for a model on a {type(model.encoder).__name__}; only a model on a "
                         "BertEncoder can be exported in bfloat16.")
    info = {"inputs": list(INPUTS), "seq_length": seq_length, "doc_stride": doc_stride,
            "max_question_length": max_question_length, "max_answer_len": max_answer_len, "dtype": dtype}
    signature = [tf.TensorSpec([None], tf.string, name=name) for name in INPUTS]
    with compute_dtype(model, dtype):
        def windows(questions, contexts):
            return window_probabilities(model, tokenizer, questions, contexts, seq_length, doc_stride,
                                        max_question_length)

        run = tf.function(windows, input_signature=signature, autograph=False)

        def window_range(question, context, begin, size):
            return window_probabilities(model, tokenizer, question, context, seq_length, doc_stride,
                                        max_question_length, window_range=(begin, size))

        def serve(question, context):
            return chunked_best_answers(model, tokenizer, question, context, seq_length, doc_stride,
                                        max_question_length, max_answer_len)

        def logits_of_ids(packed):  # the model on packed windows: (windows, seq) start and end logits
            return {key: tf.cast(value, tf.float32) for key, value in model.serving_outputs(packed).items()}

        padded = padded_logits(model) if isinstance(getattr(model, "encoder", None), BertEncoder) else None

        write_export(model, export_dir, kind=READER, overwrite=overwrite, extra_assets=extra_assets,
                     endpoints=[("serve", serve, signature), ("windows", run, signature),
                                (RANGE_ENDPOINT, window_range, signature + RANGE_SIGNATURE),
                                *ids_endpoints(logits_of_ids, padded)],
                     settings=info, warmup_requests=warmup_requests(seq_length), preprocessor=model.preprocessor)
    logger.info("Exported the reader to %s", export_dir)
    return export_dir


def padded_logits(model):
    """The model on packed windows in the padded layout (`BertEncoder.padded_outputs`: no token packing, the layout
    LiteRT converts, `serve_ids_padded`): float32 `start_logits`, `end_logits` `(windows, seq)`, as `serving_outputs`
    up to float rounding. The answer mask is applied to the `(windows, seq)` logits, not inside the head: a slice
    adding an axis to a bool tensor is no LiteRT builtin."""
    from bert_keras.tasks.reader import END_LOGITS, START_LOGITS, answer_mask  # the writer's graph: see above

    def logits(packed):
        sequence = model.encoder.padded_outputs(packed)["sequence_output"]  # (windows, seq, hidden)
        start, end = model.span_head(sequence)  # (windows, seq) each
        allowed = answer_mask(packed, model.context_segment_id)
        outputs = {START_LOGITS: tf.cast(start, tf.float32), END_LOGITS: tf.cast(end, tf.float32)}
        if allowed is None:
            return outputs
        return {name: tf.where(allowed, value, -1e9) for name, value in outputs.items()}

    return logits


def warmup_requests(seq_length):
    """A short pair, a context of about two windows, and a batch: each path traced before the first request."""
    long_context = " ".join(["a"] * (seq_length * 3 // 2))
    batch = [" ".join(["a"] * (1 + 7 * i)) for i in range(4)]
    return [{"question": ["a"], "context": ["a a"]}, {"question": ["a"], "context": [long_context]},
            {"question": ["a"] * len(batch), "context": batch}]


_ALL_WINDOWS = 1 << 62  # a `window_range` size past any batch's windows


def _left_out(served):
    """What a loaded reader leaves unloaded: where the file serves `window_range`, which is all `predict` calls, the
    string endpoints that hold the model once more each (`serving_default` and `serve`, for TF Serving, `windows`):
    a MiniLM reader's load took 2.3-2.6 s with them, 1.1 s without (2-core AMD EPYC)."""
    return ("serving_default", "serve", "windows") if RANGE_ENDPOINT in served else ()


class ExportedReader(ReaderAnswers, LoadedExport):
    """A question-answering export loaded from `export_reader`'s directory.

    `predict` reads the windows through `window_range`; an export that
    serves it is loaded without its other string endpoints, which
    `__call__` loads the first time it is called (the whole SavedModel
    again, once: seconds). An export written before `window_range` is read
    through `windows`.

    Args:
        export_dir: str. The SavedModel directory.
        warm_up: `"background"`, `True` or `False`: the export's TF Serving
            warm-up requests replayed in a thread, before returning, or not at
            all (see `LoadedExport`); on `window_range`, which is what `predict`
            calls, where the export serves it. Defaults to `"background"`.

    Attributes:
        info: dict. The export's settings (seq_length, doc_stride,
            max_question_length, max_answer_len, dtype).
    """

    kind = READER
    expected = (f"a `{RANGE_ENDPOINT}` signature taking the string tensors `question` and `context` and the int64 "
                f"scalars `begin` and `size`, or `serving_default` and `windows` signatures taking the string "
                f"tensors, returning {', '.join(WINDOW_OUTPUTS)}")
    left_out = (_left_out,)

    def _check_signatures(self):
        signatures = getattr(self._saved, "signatures", None) or {}
        # A window range: a long context read a few windows at a time (an export before it: all at once).
        self._window_range = RANGE_ENDPOINT in signatures
        if self._window_range:
            reads, expected_inputs = signatures[RANGE_ENDPOINT], [*INPUTS, "begin", "size"]
        elif "windows" in signatures and "serving_default" in signatures:
            reads, expected_inputs = signatures["windows"], list(INPUTS)
        else:
            raise self._refuse(f"its signatures are {sorted(signatures)}")
        _, inputs = reads.structured_input_signature
        missing = [name for name in WINDOW_OUTPUTS if name not in reads.structured_outputs]
        if sorted(inputs) != sorted(expected_inputs) or missing:
            name = RANGE_ENDPOINT if self._window_range else "windows"
            raise self._refuse(f"its `{name}` takes {sorted(inputs)} and lacks {missing}")
        self.info = self.settings()

    def __call__(self, question, context):
        """`serving_default` on `(batch,)` string tensors: the best span per example (see `export_reader`)."""
        return self.whole().signatures["serving_default"](question=question, context=context)

    def all_windows(self, question, context):
        """Every window of a batch in one call: the `windows` signature's numpy arrays (`window_range` over all of
        them, where the export serves it)."""
        if not self._window_range:
            return self.run("windows", question=question, context=context)
        outputs = self.run(RANGE_ENDPOINT, question=question, context=context, begin=0, size=_ALL_WINDOWS)
        outputs.pop("window_count")
        return outputs

    def serving_signature(self):
        """The warm-up's requests run `predict`'s first read (`window_range`), where the export serves it."""
        if not self._window_range:
            return super().serving_signature()
        read = self._saved.signatures[RANGE_ENDPOINT]

        def first_read(question, context):
            return read(question=question, context=context, begin=tf.constant(0, tf.int64),
                        size=tf.constant(WINDOWS_PER_READ, tf.int64))

        return first_read

    def _instantiate(self):
        if not self._window_range:  # `predict` calls `windows`, which the warm-up's requests did not
            self.run("windows", question=["a"], context=["a"])


def load_reader(export_dir, warm_up="background"):
    """Loads `export_reader`'s directory (tensorflow-text's ops registered first): an `ExportedReader`."""
    return ExportedReader(export_dir, warm_up=warm_up)
