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

`qa_windows` is the graph (an export serves it, a few windows at a time:
`qa_layout` and `pack_qa_windows`); `qa_features` runs it over
SQuAD examples in batches and labels each window with the answer's first and
last piece, `[CLS]` (position 0) where the window does not hold the whole
answer, as transformers' `run_qa.py` does.
"""

import weakref

import numpy as np
import tensorflow as tf

from bert_keras._checks import check_int
from bert_keras.text.alignment import IGNORE_LABEL, as_ragged, pack_values, word_of_pieces
from bert_keras.text.packer import pack_inputs, pieces_of_words

# Keys of `qa_windows`' dict: the packed inputs, then where every piece came from.
INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")
WINDOW_KEYS = INPUT_KEYS + ("example_index", "char_starts", "char_ends", "word_ids", "context_mask", "word_starts",
                            "word_ends")
_BATCH = 256  # examples per call of the traced windowing in `qa_features`
_traced = weakref.WeakKeyDictionary()  # tokenizer -> {(seq_length, doc_stride, max_question_length): tf.function}


def check_window_arguments(seq_length, doc_stride, max_question_length, num_special=3):
    """Checks the three lengths; the context's part of a window must be longer than the stride.

    `num_special` is the window's special tokens (`tokenizer.num_special_tokens(2)`: BERT's `[CLS] question [SEP]
    context [SEP]` 3, RoBERTa's `<s> question </s></s> context </s>` 4).

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


def piece_windows(lengths, window, step):
    """The windows of rows of `lengths` pieces, as transformers' tokenizers cut overflowing tokens: the one cut.

    A row of at most `window` pieces is one window (an empty row too); a
    longer one is windows of `window` pieces starting every `step` pieces
    (`window - step` pieces shared by consecutive windows: transformers'
    `stride`), the last one reaching the row's end, shorter or not. The
    tagger's windows (`tagging_windows`, the tagger export) and the reader's
    (`qa_windows`: the context's pieces beside the question) are cut here.

    Args:
        lengths: int `(rows,)` tensor, pieces per row.
        window: int, or int `(rows,)` tensor: pieces per window (a reader's
            shrinks as its question grows).
        step: int, or int `(rows,)` tensor, at least 1: pieces between
            the starts of consecutive windows.

    Returns:
        `(row, index, first, last)`, int64 `(windows,)` each: the window's
        row, its index within the row (0, 1, ...) and its pieces
        `[first, last)`.

    Example:
    >>> [t.numpy().tolist() for t in piece_windows(tf.constant([3, 0, 7]), 4, 2)]
    [[0, 1, 2, 2, 2], [0, 0, 0, 1, 2], [0, 0, 0, 2, 4], [3, 0, 4, 6, 7]]
    """
    lengths = tf.cast(lengths, tf.int64)
    window = tf.broadcast_to(tf.cast(window, tf.int64), tf.shape(lengths))  # (rows,)
    step = tf.broadcast_to(tf.cast(step, tf.int64), tf.shape(lengths))
    counts = 1 + tf.maximum(lengths - window + step - 1, 0) // step  # (rows,)
    row = tf.repeat(tf.range(tf.size(lengths, out_type=tf.int64)), counts)  # (windows,)
    index = tf.ragged.range(counts).flat_values  # (windows,)
    first = index * tf.gather(step, row)
    return row, index, first, tf.minimum(first + tf.gather(window, row), tf.gather(lengths, row))


def max_context(entry_piece, entry_position, entry_window, first, last, num_pieces):
    """Which copy of each piece to read when windows overlap: the one with the most context. BERT's rule.

    A piece's context in a window is the fewer of the pieces left and right
    of it there; the copy with the most wins, the earlier window on a tie
    (run_squad.py's `_check_is_max_context`).

    Args:
        entry_piece: int64 `(entries,)`, each entry's piece: an index into
            the flat pieces of all rows (the copies of a piece share it).
        entry_position: int64 `(entries,)`, each entry's piece within its row,
            as `first` and `last` count.
        entry_window: int64 `(entries,)`, each entry's window.
        first, last: int64 `(windows,)`, the windows' pieces `[first, last)`
            within their row (`piece_windows`).
        num_pieces: the number of pieces (flat).

    Returns:
        bool `(entries,)`: whether each entry is its piece's chosen copy.
    """
    left = entry_position - tf.gather(first, entry_window)
    context = tf.minimum(left, tf.gather(last, entry_window) - 1 - entry_position)
    windows = tf.size(first, out_type=tf.int64) + 1
    key = context * windows + (windows - 1 - entry_window)  # more context first, then the earlier window
    best = tf.math.unsorted_segment_max(key, entry_piece, num_pieces)
    return tf.equal(key, tf.gather(best, entry_piece))


def default_stride(seq_length):
    """Pieces shared by consecutive windows of a tagger of `seq_length`: a quarter of a window's pieces."""
    return (seq_length - 2) // 4


def check_stride(stride, seq_length):
    """`stride` (None: `default_stride`) if it leaves each window a new piece; else a `ValueError` naming it."""
    window = seq_length - 2
    stride = default_stride(seq_length) if stride is None else check_int("stride", stride, minimum=0)
    if stride >= window:
        raise ValueError(f"Received an invalid value for argument `stride`, expected fewer pieces than a window "
                         f"holds ({window}: seq_length {seq_length} less [CLS] and [SEP]). Received: stride={stride}")
    return stride


@tf.autograph.experimental.do_not_convert
def tagging_windows(tokenizer, texts, word_starts, word_ends, labels, seq_length=128, stride=None,
                    ignore_label=IGNORE_LABEL):
    """Raw texts with labelled words -> packed windows of their pieces, cut as the tagger export cuts them.

    Each text's pieces are cut by `piece_windows` (windows of `seq_length -
    2` pieces every `seq_length - 2 - stride`), as `export_tagger` serves
    them, so that a tagger is trained on the windows it answers from. The
    first piece of each word carries the word's label (in every window that
    holds it), every other position `ignore_label`.

    Args:
        tokenizer: a `WordPieceTokenizer`, `SentencePieceTokenizer` or
            `BytePairTokenizer`.
        texts: string tensor `(batch,)`, or a list / numpy array of str.
        word_starts, word_ends: int `(batch, (words))`, each word's
            character span in its text (`alignment.join_words`).
        labels: int `(batch, (words))`, the words' label ids.
        seq_length: int. The packed length, at least 3. Defaults to `128`.
        stride: optional int. Pieces shared by consecutive windows.
            Defaults to `default_stride(seq_length)`, the export's.
        ignore_label: int. Defaults to `IGNORE_LABEL` (-100).

    Returns:
        A dict: `input_word_ids`, `input_mask`, `input_type_ids`, `labels`
        (int32 `(windows, seq_length)`) and `text_index` (int64 `(windows,)`,
        each window's text).

    Example:
    >>> from bert_keras.text import WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "new", "york", "##er"])
    >>> windows = tagging_windows(tokenizer, ["New Yorker"], [[0, 4]], [[3, 10]], [[1, 2]], seq_length=4, stride=1)
    >>> windows["input_word_ids"].numpy().tolist(), windows["labels"].numpy().tolist()
    ([[2, 5, 6, 3], [2, 6, 7, 3]], [[-100, 1, 2, -100], [-100, 2, -100, -100]])
    """
    seq_length = check_int("seq_length", seq_length, minimum=3)
    window = seq_length - 2
    stride = check_stride(stride, seq_length)
    ids, starts, _ = (pieces_of_words(x) for x in tokenizer.tokenize_with_char_offsets(texts))  # (batch, (pieces))
    word_starts, word_ends = as_ragged(word_starts, "word_starts"), as_ragged(word_ends, "word_ends")
    labels = as_ragged(labels, "labels")
    word, first_piece = word_of_pieces(starts, word_starts, word_ends)
    global_word = tf.gather(word_starts.row_starts(), starts.value_rowids()) + word
    piece_labels = tf.where(first_piece, tf.gather(labels.flat_values, tf.maximum(global_word, 0)), ignore_label)
    row, _, first, last = piece_windows(ids.row_lengths(), window, window - stride)
    positions = tf.ragged.range(first, last)  # (windows, (pieces)): the piece's index within its text
    flat = positions.flat_values + tf.gather(ids.row_starts(), tf.gather(row, positions.value_rowids()))
    packed = pack_inputs([positions.with_flat_values(tf.gather(ids.flat_values, flat))], seq_length,
                         tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
    packed["labels"] = tf.cast(pack_values(positions.with_flat_values(tf.gather(piece_labels, flat)), seq_length,
                                           ignore_label), tf.int32)
    packed["text_index"] = row
    return packed


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
        ids, starts, ends = (pieces_of_words(x) for x in (ids, starts, ends))
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
    return pack_qa_windows(qa_layout(tokenizer, questions, contexts, seq_length, doc_stride, max_question_length))


@tf.autograph.experimental.do_not_convert
def qa_layout(tokenizer, questions, contexts, seq_length=384, doc_stride=128, max_question_length=64):
    """The batch's pieces and where its windows fall: `qa_windows` before any window is packed.

    What grows with the contexts is their flat pieces and a few numbers per
    window; `pack_qa_windows(layout, begin, end)` packs any range of the
    windows, so that a server can pack, run and reduce a few windows at a
    time (`export.reader`) and hold `(windows, seq_length)` tensors of
    those only.

    Returns:
        A dict: `question`, `context` (`_pieces` of each), `question_length`
        (int64 `(batch,)`), `example`, `first`, `last` (int64 `(windows,)`:
        each window's example and its context pieces `[first, last)`),
        `count` (int64 scalar: the windows), and the packing's constants.
    """
    num_special = tokenizer.num_special_tokens(2)
    check_window_arguments(seq_length, doc_stride, max_question_length, num_special)
    question, context = _pieces(tokenizer, questions), _pieces(tokenizer, contexts)
    # One window per `step` context pieces after the first, until a window reaches the end (tokenizers' `truncate`).
    question_length = tf.minimum(question["lengths"], max_question_length)
    budget = seq_length - num_special - question_length  # (batch,) context pieces per window
    example, _, first, last = piece_windows(context["lengths"], budget, budget - doc_stride)  # (windows,)
    return {"question": question, "context": context, "question_length": question_length, "example": example,
            "first": first, "last": last, "count": tf.size(example, out_type=tf.int64), "seq_length": seq_length,
            "num_special": num_special, "roberta": tokenizer.packing == "roberta", "cls_id": tokenizer.cls_id,
            "sep_id": tokenizer.sep_id, "pad_id": tokenizer.pad_id}


@tf.autograph.experimental.do_not_convert
def pack_qa_windows(layout, begin=None, end=None):
    """Windows `[begin, end)` of `qa_layout` (all by default), packed: `qa_windows`' dict for those rows."""
    question, context, seq_length = layout["question"], layout["context"], layout["seq_length"]
    example, first, last = layout["example"], layout["first"], layout["last"]
    if begin is not None:
        example, first, last = example[begin:end], first[begin:end], last[begin:end]
    # Positions: [CLS] 0, question 1..q, [SEP] q + 1 (RoBERTa: </s></s> q + 1, q + 2), context from
    # o = q + 2 (RoBERTa: q + 3) to o + c - 1, [SEP] o + c, padding after.
    position = tf.range(seq_length, dtype=tf.int64)[None, :]  # (1, seq_length)
    q = tf.gather(layout["question_length"], example)[:, None]  # (windows, 1)
    c = (last - first)[:, None]
    o = q + layout["num_special"] - 1  # the context's first position
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

    ids = tf.where(position == 0, tf.cast(layout["cls_id"], tf.int64),
                   tf.where(is_separator, tf.cast(layout["sep_id"], tf.int64),
                            tf.cast(piece("ids", layout["pad_id"]), tf.int64)))
    # A word cut by the window's edge spans its pieces inside the window, as the window's own encoding has it.
    context_end = context_start + c - 1
    word_first = tf.maximum(_gather(context["word_first"], context_index, is_context, 0), context_start)
    word_last = tf.minimum(_gather(context["word_last"], context_index, is_context, 0), context_end)
    starts, ends = piece("starts", 0), piece("ends", 0)
    return {
        "input_word_ids": tf.cast(ids, tf.int32),
        "input_mask": tf.cast(is_real, tf.int32),
        "input_type_ids": (tf.zeros_like(is_real, tf.int32) if layout["roberta"]
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
        examples: `bert_keras.data.squad.SquadExamples` (or any object with
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
    check_window_arguments(seq_length, doc_stride, max_question_length, tokenizer.num_special_tokens(2))
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
