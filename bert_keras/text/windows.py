"""Question + context -> windows of `seq_length` word pieces with a document stride, in the graph.

A context longer than fits beside its question is cut as transformers' fast
tokenizers cut it (`truncation="only_second", stride=doc_stride,
return_overflowing_tokens=True`): every window holds `[CLS] question [SEP]
context pieces [SEP]` (RoBERTa's packing, a tokenizer whose `packing` is
`"roberta"`: `<s> question </s></s> context pieces </s>`, type ids all 0),
the context pieces of consecutive windows overlap by
`doc_stride`, and the last window ends with the context. Each piece keeps its
character offsets into its own string (`offset_mapping`), and each context
piece the span of its word's pieces inside the window (what transformers'
question-answering pipeline answers with `align_to_words=True`).

`qa_windows` is the graph (an export serves it); `qa_features` runs it over
SQuAD examples in batches and labels each window with the answer's first and
last piece, `[CLS]` (position 0) where the window does not hold the whole
answer, as transformers' `run_qa.py` does.
"""

import weakref

import numpy as np
import tensorflow as tf

from bert_keras._checks import check_int

# Keys of `qa_windows`' dict: the packed inputs, then where every piece came from.
INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")
WINDOW_KEYS = INPUT_KEYS + ("example_index", "char_starts", "char_ends", "word_ids", "context_mask", "word_starts",
                            "word_ends")
SPECIAL_TOKENS = 3  # [CLS] question [SEP] context [SEP]
ROBERTA_SPECIAL_TOKENS = 4  # <s> question </s></s> context </s>
_BATCH = 256  # examples per call of the traced windowing in `qa_features`
_traced = weakref.WeakKeyDictionary()  # tokenizer -> {(seq_length, doc_stride, max_question_length): tf.function}


def special_tokens(tokenizer):
    """The special tokens of a window of `tokenizer`'s packing: 3 (BERT's), or 4 (RoBERTa's `</s></s>` between)."""
    return ROBERTA_SPECIAL_TOKENS if getattr(tokenizer, "packing", "bert") == "roberta" else SPECIAL_TOKENS


def check_window_arguments(seq_length, doc_stride, max_question_length, num_special=SPECIAL_TOKENS):
    """Checks the three lengths; the context's part of a window must be longer than the stride.

    `num_special` is the window's special tokens (`special_tokens(tokenizer)`).

    Raises:
        ValueError: naming the argument, e.g. a `doc_stride` that leaves no
            new context piece in a window after a question of
            `max_question_length` pieces.
    """
    check_int("seq_length", seq_length, minimum=num_special + 1)
    check_int("doc_stride", doc_stride, minimum=0)
    check_int("max_question_length", max_question_length, minimum=1)
    room = seq_length - num_special - max_question_length  # context pieces beside the longest question
    if doc_stride >= room:
        raise ValueError(
            f"Received an invalid value for argument `doc_stride`, expected fewer than the {room} context pieces "
            f"that fit beside a question of max_question_length={max_question_length} in seq_length={seq_length} "
            f"(seq_length - max_question_length - {num_special}), so that each window moves on. "
            f"Received: doc_stride={doc_stride}"
        )


def _pieces(tokenizer, texts):
    """Flat per piece: `(row_starts, lengths, ids, starts, ends, word, word_first, word_last)` of a batch of texts.

    `word` numbers the piece's word within its text; `word_first` and
    `word_last` are the flat indices of the word's first and last piece.
    """
    ids, starts, ends = tokenizer.tokenize_with_char_offsets(texts)
    if ids.ragged_rank == 2:  # (batch, words, pieces)
        global_word = ids.values.value_rowids()  # (pieces,): the word's index in the whole batch
        word = global_word - tf.gather(ids.row_starts(), tf.gather(ids.value_rowids(), global_word))
        word_first = tf.gather(ids.values.row_starts(), global_word)
        word_last = tf.gather(ids.values.row_limits(), global_word) - 1
        ids, starts, ends = (x.merge_dims(1, 2) for x in (ids, starts, ends))
    else:  # a tokenizer without words: each piece is one
        word_first = word_last = tf.range(tf.size(ids.flat_values, out_type=tf.int64), dtype=tf.int64)
        word = word_first - tf.gather(ids.row_starts(), ids.value_rowids())
    return {"row_starts": ids.row_starts(), "lengths": ids.row_lengths(), "ids": ids.flat_values,
            "starts": starts.flat_values, "ends": ends.flat_values, "word": word, "word_first": word_first,
            "word_last": word_last}


def _gather(values, index, valid, default):
    """`values[index]` where `valid`, else `default`; `index` may point anywhere where not valid."""
    values = tf.concat([values, tf.zeros([1], values.dtype)], 0)  # one more entry: an index for the invalid places
    index = tf.where(valid, index, tf.size(values, out_type=tf.int64) - 1)
    return tf.where(valid, tf.gather(values, index), tf.cast(default, values.dtype))


@tf.autograph.experimental.do_not_convert
def qa_windows(tokenizer, questions, contexts, seq_length=384, doc_stride=128, max_question_length=64):
    """Windows of `[CLS] question [SEP] context [SEP]`, as transformers' `only_second` truncation with a stride.

    A question is cut to its first `max_question_length` pieces (transformers
    keeps it whole; within that length both agree). Its window holds
    `budget = seq_length - 3 - question pieces` context pieces (4 and
    `<s> question </s></s> context </s>`, type ids 0, for a tokenizer that
    packs RoBERTa's way); windows start
    every `budget - doc_stride` pieces until one reaches the context's end.
    An empty context gives one window with no context piece. Every position
    is computed by index arithmetic on the flat pieces (dense tensors, no
    ragged concatenation: a few hundred ops to trace, not thousands).

    Args:
        tokenizer: a `WordPieceTokenizer`, `SentencePieceTokenizer` or
            `BytePairTokenizer` (a tokenizer with `tokenize_with_char_offsets`,
            `cls_id`, `sep_id`, `pad_id`, and optionally `packing`).
        questions, contexts: string tensors `(batch,)`.
        seq_length, doc_stride, max_question_length: ints; see
            `check_window_arguments`.

    Returns:
        A dict of tensors, one row per window, windows of an example in
        order: `input_word_ids`, `input_mask`, `input_type_ids` int32
        `(windows, seq_length)`; `example_index` int64 `(windows,)`;
        `char_starts`, `char_ends` int64 `(windows, seq_length)` (code
        points into the question for its pieces, into the context for its
        pieces, 0 for special tokens and padding: transformers'
        `offset_mapping`); `word_ids` int64 (the piece's word within its
        string, -1 for special tokens and padding); `context_mask` bool (the
        context's pieces); `word_starts`, `word_ends` int64 (for a context
        piece, the span of the pieces of its word inside this window, what
        transformers' `word_to_chars` gives; else the piece's own offsets).
    """
    num_special = special_tokens(tokenizer)
    roberta = num_special == ROBERTA_SPECIAL_TOKENS
    check_window_arguments(seq_length, doc_stride, max_question_length, num_special)
    question, context = _pieces(tokenizer, questions), _pieces(tokenizer, contexts)
    # One window per `step` context pieces after the first, until a window reaches the end (tokenizers' `truncate`).
    question_length = tf.minimum(question["lengths"], max_question_length)
    budget = seq_length - num_special - question_length  # (batch,) context pieces per window
    step = budget - doc_stride
    length = context["lengths"]
    count = tf.where(length <= budget, tf.ones_like(length), 1 + (length - budget + step - 1) // step)
    example = tf.repeat(tf.range(tf.size(count, out_type=tf.int64), dtype=tf.int64), count)  # (windows,)
    first = tf.ragged.range(count).flat_values * tf.gather(step, example)  # (windows,): first context piece
    last = tf.minimum(first + tf.gather(budget, example), tf.gather(length, example))  # after the last one
    # Positions: [CLS] 0, question 1..q, [SEP] q + 1 (RoBERTa: </s></s> q + 1, q + 2), context from
    # o = q + 2 (RoBERTa: q + 3) to o + c - 1, [SEP] o + c, padding after.
    position = tf.range(seq_length, dtype=tf.int64)[None, :]  # (1, seq_length)
    q = tf.gather(question_length, example)[:, None]  # (windows, 1)
    c = (last - first)[:, None]
    o = q + num_special - 1  # the context's first position
    is_question = (position >= 1) & (position <= q)  # (windows, seq_length)
    is_context = (position >= o) & (position < o + c)
    is_separator = ((position > q) & (position < o)) | (position == o + c)
    is_real = position <= o + c
    question_index = tf.gather(question["row_starts"], example)[:, None] + position - 1
    context_start = (tf.gather(context["row_starts"], example) + first)[:, None]  # flat index of the first piece
    context_index = context_start + position - o

    def piece(key, default):
        return tf.where(is_question, _gather(question[key], question_index, is_question, default),
                        _gather(context[key], context_index, is_context, default))

    ids = tf.where(position == 0, tf.cast(tokenizer.cls_id, tf.int64),
                   tf.where(is_separator, tf.cast(tokenizer.sep_id, tf.int64),
                            tf.cast(piece("ids", tokenizer.pad_id), tf.int64)))
    # A word cut by the window's edge spans its pieces inside the window, as the window's own encoding has it.
    context_end = context_start + c - 1
    word_first = tf.maximum(_gather(context["word_first"], context_index, is_context, 0), context_start)
    word_last = tf.minimum(_gather(context["word_last"], context_index, is_context, 0), context_end)
    starts, ends = piece("starts", 0), piece("ends", 0)
    return {
        "input_word_ids": tf.cast(ids, tf.int32),
        "input_mask": tf.cast(is_real, tf.int32),
        "input_type_ids": (tf.zeros_like(is_real, tf.int32) if roberta
                           else tf.cast(is_context | (is_separator & (position > q + 1)), tf.int32)),
        "example_index": example,
        "char_starts": starts,
        "char_ends": ends,
        "word_ids": piece("word", -1),
        "context_mask": is_context,
        "word_starts": tf.where(is_context, _gather(context["starts"], word_first, is_context, 0), starts),
        "word_ends": tf.where(is_context, _gather(context["ends"], word_last, is_context, 0), ends),
    }


def _traced_windows(tokenizer, seq_length, doc_stride, max_question_length):
    """`qa_windows` as one `tf.function` per tokenizer and lengths, traced once."""
    functions = _traced.setdefault(tokenizer, {})
    key = (seq_length, doc_stride, max_question_length)
    if key not in functions:
        def windows(questions, contexts):
            return qa_windows(tokenizer, questions, contexts, seq_length, doc_stride, max_question_length)

        spec = tf.TensorSpec([None], tf.string)
        functions[key] = tf.function(windows, input_signature=[spec, spec], autograph=False)
    return functions[key]


def answer_positions(windows, answer_starts, answer_ends):
    """The answer's first and last piece in each window; 0 (`[CLS]`) where the window does not hold all of it.

    As transformers' `run_qa.py`: the start is the context piece whose span
    begins at or before the answer's first character (the last such piece),
    the end the first context piece whose span ends at or after the answer's
    end. (`run_qa.py` runs past the context when the answer begins in a
    window's last piece; here that piece is the start.)

    Args:
        windows: `qa_windows`' dict as numpy arrays.
        answer_starts, answer_ends: int arrays `(examples,)`, the answer's
            character span in each context; -1 for no answer.

    Returns:
        `(start_positions, end_positions)`, int32 arrays `(windows,)`.
    """
    example = np.asarray(windows["example_index"])
    start = np.asarray(answer_starts, dtype="int64")[example][:, None]  # (windows, 1)
    end = np.asarray(answer_ends, dtype="int64")[example][:, None]
    in_context = np.asarray(windows["context_mask"], dtype=bool)
    starts, ends = np.asarray(windows["char_starts"]), np.asarray(windows["char_ends"])
    rows = np.arange(len(example))
    width = in_context.shape[1]
    first_piece = np.argmax(in_context, axis=1)
    last_piece = width - 1 - np.argmax(in_context[:, ::-1], axis=1)
    holds = (in_context.any(axis=1) & (start[:, 0] >= 0) & (starts[rows, first_piece] <= start[:, 0])
             & (ends[rows, last_piece] >= end[:, 0]))
    begins = width - 1 - np.argmax((in_context & (starts <= start))[:, ::-1], axis=1)
    finishes = np.argmax(in_context & (ends >= end), axis=1)
    return np.where(holds, begins, 0).astype("int32"), np.where(holds, finishes, 0).astype("int32")


def qa_features(tokenizer, examples, seq_length=384, doc_stride=128, max_question_length=64):
    """Training and evaluation windows of SQuAD examples, labelled with the answer's pieces.

    Args:
        tokenizer: the tokenizer of a `BertPreprocessor` (`.tokenizer`):
            WordPiece, SentencePiece or byte-level BPE.
        examples: `bert_keras.squad.SquadExamples` (or any object with
            `questions`, `contexts` and `answers` lists); the first answer of
            each is the label, none for an unanswerable question.
        seq_length: int. Pieces per window. Defaults to `384`.
        doc_stride: int. Context pieces shared by consecutive windows (as
            transformers' `stride=`). Defaults to `128`.
        max_question_length: int. Longer questions keep their first pieces.
            Defaults to `64`.

    Returns:
        A dict of numpy arrays, one row per window: `qa_windows`' keys plus
        `start_positions` and `end_positions` (int32).
    """
    check_window_arguments(seq_length, doc_stride, max_question_length, special_tokens(tokenizer))
    windows = _traced_windows(tokenizer, seq_length, doc_stride, max_question_length)
    parts = []
    for begin in range(0, len(examples.questions), _BATCH):
        outputs = windows(tf.constant(examples.questions[begin : begin + _BATCH], tf.string),
                          tf.constant(examples.contexts[begin : begin + _BATCH], tf.string))
        outputs = {key: value.numpy() for key, value in outputs.items()}
        outputs["example_index"] += begin
        parts.append(outputs)
    if not parts:
        raise ValueError("Received no examples: expected at least one question and its context.")
    features = {key: np.concatenate([part[key] for part in parts]) for key in WINDOW_KEYS}
    first = [answers[0] if answers else None for answers in examples.answers]
    starts = np.array([-1 if a is None else a["answer_start"] for a in first], dtype="int64")
    ends = np.array([-1 if a is None else a["answer_start"] + len(a["text"]) for a in first], dtype="int64")
    features["start_positions"], features["end_positions"] = answer_positions(features, starts, ends)
    return features
