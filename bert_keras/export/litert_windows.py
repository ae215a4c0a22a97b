"""A reader's windows for the LiteRT engine, in numpy: question + context pieces -> packed windows and their offsets.

The SavedModel reader cuts its windows in its graph (`text.windows.qa_layout`
and `pack_qa_windows`, TensorFlow ops). A LiteRT reader's file tokenizes
(its `pieces` signature: tensorflow-text's WordPiece kernels, with character
offsets) and runs the model on packed ids (`serve_ids`); the windows between
the two are cut here, without TensorFlow, by the same arithmetic as
`text.windows` (transformers' `only_second` truncation with a document
stride: `piece_windows`, `pack_windows`; tests hold the two equal). The
arithmetic is written twice, once per array library: the export's graph
must stay TensorFlow ops, and a LiteRT process imports no TensorFlow.

`window_reads` yields the dicts a reader's `windows` signature gives
(`export.reader.WINDOW_OUTPUTS`), a few windows at a time, which
`kinds.reader.ReaderAnswers` decodes as it decodes the SavedModel's.
"""

import numpy as np

from bert_keras._checks import check_int

# [CLS] question [SEP] context [SEP]: the packing of a WordPiece model, the one a LiteRT file tokenizes for.
NUM_SPECIAL = 3
IDS_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")


def check_reader_settings(seq_length, doc_stride, max_question_length):
    """The reader's window settings `(seq_length, doc_stride, max_question_length)`, checked as
    `text.windows.check_window_arguments` checks them: a `ValueError` naming the argument otherwise."""
    seq_length = check_int("seq_length", seq_length, minimum=NUM_SPECIAL + 2)
    max_question_length = check_int("max_question_length", max_question_length, minimum=1,
                                    maximum=seq_length - NUM_SPECIAL - 1)
    room = seq_length - NUM_SPECIAL - max_question_length  # context pieces beside the longest question
    doc_stride = check_int("doc_stride", doc_stride, minimum=0, maximum=room - 1)
    return seq_length, doc_stride, max_question_length


def piece_windows(lengths, window, step):
    """`text.windows.piece_windows` in numpy: `(row, index, first, last)`, int64 `(windows,)` each.

    A row of at most `window` pieces is one window (an empty row too); a
    longer one windows of `window` pieces every `step`, the last reaching its
    end.

    Example:
    >>> [a.tolist() for a in piece_windows([3, 0, 7], 4, 2)]
    [[0, 1, 2, 2, 2], [0, 0, 0, 1, 2], [0, 0, 0, 2, 4], [3, 0, 4, 6, 7]]
    """
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    window = np.broadcast_to(np.asarray(window, np.int64), lengths.shape)
    step = np.broadcast_to(np.asarray(step, np.int64), lengths.shape)
    counts = 1 + np.maximum(lengths - window + step - 1, 0) // step  # (rows,)
    row = np.repeat(np.arange(len(lengths), dtype=np.int64), counts)  # (windows,)
    row_first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    index = np.arange(len(row), dtype=np.int64) - row_first[row]
    first = index * step[row]
    return row, index, first, np.minimum(first + window[row], lengths[row])


def text_pieces(outputs):
    """The flat pieces of a batch of texts from a file's `pieces` outputs (`ids`, `char_starts`, `char_ends`,
    `word_start`, `lengths`): a dict as `text.windows._pieces` gives, numpy int64."""
    lengths = np.asarray(outputs["lengths"], np.int64).reshape(-1)
    word_start = np.asarray(outputs["word_start"]).reshape(-1).astype(bool)
    row_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    count = int(lengths.sum())
    word_start[row_starts[lengths > 0]] = True  # a text's first piece starts its first word
    first_of_word = np.flatnonzero(word_start[:count]).astype(np.int64)  # (words,)
    word = np.cumsum(word_start[:count]) - 1  # (pieces,): the word's index in the batch
    last_of_word = np.concatenate([first_of_word[1:] - 1, [count - 1]]).astype(np.int64)
    return {"row_starts": row_starts, "lengths": lengths,
            **{key: np.asarray(outputs[key], np.int64).reshape(-1)[:count]
               for key in ("ids", "char_starts", "char_ends")},
            "word_first": first_of_word[word], "word_last": last_of_word[word]}


def qa_layout(question, context, seq_length, doc_stride, max_question_length):
    """`text.windows.qa_layout` of the pieces of questions and contexts (`text_pieces`): where the windows fall."""
    question_length = np.minimum(question["lengths"], max_question_length)
    budget = seq_length - NUM_SPECIAL - question_length  # (batch,) context pieces per window
    example, _, first, last = piece_windows(context["lengths"], budget, budget - doc_stride)
    return {"question": question, "context": context, "question_length": question_length, "example": example,
            "first": first, "last": last}


def _gather(values, index, valid, default):
    """`values[index]` where `valid`, else `default`."""
    safe = np.where(valid, index, 0)
    taken = values[safe] if len(values) else np.zeros(np.shape(index), values.dtype)
    return np.where(valid, taken, default)


def pack_windows(layout, begin, end, cls_id, sep_id, pad_id):
    """Windows `[begin, end)` of `layout`, packed as `text.windows.pack_qa_windows` packs them, cut to the longest
    of them: the three int32 inputs and each position's offsets, `context_mask` and `example_index`."""
    question, context = layout["question"], layout["context"]
    example, first, last = (layout[key][begin:end] for key in ("example", "first", "last"))
    q = layout["question_length"][example][:, None]  # (windows, 1)
    c = (last - first)[:, None]
    width = int(max(np.max(q + c, initial=0) + NUM_SPECIAL, 1))
    position = np.arange(width, dtype=np.int64)[None, :]  # (1, width)
    o = q + NUM_SPECIAL - 1  # the context's first position
    is_question = (position >= 1) & (position <= q)
    is_context = (position >= o) & (position < o + c)
    is_separator = ((position > q) & (position < o)) | (position == o + c)
    is_real = position <= o + c
    question_index = question["row_starts"][example][:, None] + position - 1
    context_start = (context["row_starts"][example] + first)[:, None]  # flat index of the window's first piece
    context_index = context_start + position - o

    def piece(key, default):
        return np.where(is_question, _gather(question[key], question_index, is_question, default),
                        _gather(context[key], context_index, is_context, default))

    ids = np.where(position == 0, cls_id, np.where(is_separator, sep_id, piece("ids", pad_id)))
    # A word cut by the window's edge spans its pieces inside the window, as the window's own encoding has it.
    word_first = np.maximum(_gather(context["word_first"], context_index, is_context, 0), context_start)
    word_last = np.minimum(_gather(context["word_last"], context_index, is_context, 0), context_start + c - 1)
    starts, ends = piece("char_starts", 0), piece("char_ends", 0)
    return {
        "input_word_ids": ids.astype(np.int32),
        "input_mask": is_real.astype(np.int32),
        "input_type_ids": (is_context | (is_separator & (position > q + 1))).astype(np.int32),
        "example_index": example,
        "char_starts": starts,
        "char_ends": ends,
        "context_mask": is_context,
        "word_starts": np.where(is_context, _gather(context["char_starts"], word_first, is_context, 0), starts),
        "word_ends": np.where(is_context, _gather(context["char_ends"], word_last, is_context, 0), ends),
    }


def _softmax(logits, allowed):
    """A softmax per row over the `allowed` positions (float32), as the reader export's graph computes it."""
    logits = np.where(allowed, np.asarray(logits, np.float32), np.float32(-1e9))
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (exp / exp.sum(axis=-1, keepdims=True)).astype(np.float32)


def window_reads(pieces, serve_ids, questions, contexts, settings, windows_per_call):
    """The windows of a batch with their probabilities, `windows_per_call` at a time: the reader's `windows` dicts.

    Args:
        pieces: callable, a list of str -> the file's `pieces` outputs.
        serve_ids: callable, the three packed inputs -> `start_logits`,
            `end_logits` `(windows, width)`.
        questions, contexts: lists of str, as many of each.
        settings: dict with `seq_length`, `doc_stride`, `max_question_length`,
            `cls_id`, `sep_id`, `pad_id`.
        windows_per_call: int. Windows packed and run per call of the model.

    Yields:
        Dicts of numpy arrays: `example_index`, `start_probabilities`,
        `end_probabilities`, `context_mask`, `char_starts`, `char_ends`,
        `word_starts`, `word_ends`, one row per window.
    """
    layout = qa_layout(text_pieces(pieces(questions)), text_pieces(pieces(contexts)), settings["seq_length"],
                       settings["doc_stride"], settings["max_question_length"])
    count = len(layout["example"])
    for begin in range(0, count, windows_per_call):
        windows = pack_windows(layout, begin, min(begin + windows_per_call, count), settings["cls_id"],
                               settings["sep_id"], settings["pad_id"])
        logits = serve_ids(**{key: windows.pop(key) for key in IDS_INPUTS})
        # [CLS] and the context's pieces only, as the export's graph (transformers' `p_mask`).
        allowed = windows["context_mask"] | (np.arange(windows["context_mask"].shape[1]) == 0)[None, :]
        for name in ("start", "end"):
            windows[f"{name}_probabilities"] = _softmax(logits[f"{name}_logits"], allowed)
        yield windows


def reader_settings(values):
    """What `window_reads` needs from a reader's manifest or LiteRT record (`values`), checked: a `ValueError`
    naming the value otherwise."""
    tokenizer = values.get("tokenizer") if isinstance(values.get("tokenizer"), dict) else {}
    seq_length, doc_stride, max_question_length = check_reader_settings(
        values.get("seq_length"), values.get("doc_stride"), values.get("max_question_length"))
    return {"seq_length": seq_length, "doc_stride": doc_stride, "max_question_length": max_question_length,
            **{name: check_int(f"tokenizer.{name}", tokenizer.get(name), minimum=0)
               for name in ("cls_id", "sep_id", "pad_id")}}
