"""Word labels onto word pieces for tagging (named entities), each piece keeping its span in the raw text.

Users label words (CoNLL tokens); BERT sees word pieces. The work is split:

- at dataset build time, in Python: `join_words` makes the raw text of a
  sentence (its words joined by single spaces) and each word's character
  span, and `window_sentences` cuts sentences with more pieces than fit into
  windows at word boundaries, recording where each window came from;
- in the graph (a `tf.data` map, an export): `align_word_labels` tokenizes
  the raw texts, finds each piece's word by its character offsets, gives the
  first piece of each word the word's label and every other position
  `IGNORE_LABEL`, and packs `[CLS] pieces [SEP] [PAD]...` with the pieces'
  character spans alongside;
- after the model, in Python: `merge_windows` puts the windows' per-word
  predictions back into whole sentences.

Character offsets count Unicode code points (Python `str` indices), as
`WordPieceTokenizer.tokenize_with_char_offsets` does.
"""

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras._checks import check_int
from bert_keras.text.packer import pack_inputs

# The label of positions that the loss skips (pieces after a word's first, [CLS], [SEP], padding): Keras'
# and PyTorch's conventional ignore index.
IGNORE_LABEL = -100
_TOKENIZE_CHUNK = 4096  # words per tokenizer call when counting pieces


def join_words(words):
    """A sentence's raw text (its words joined by single spaces) and each word's character span in it.

    Args:
        words: list (or 1-D numpy array) of str, the sentence's words.

    Returns:
        A tuple `(text, starts, ends)`: the str, and two lists of int with
        `text[starts[i]:ends[i]] == words[i]`.

    Example:
    >>> join_words(["Paris", "is", "nice"])
    ('Paris is nice', [0, 6, 9], [5, 8, 13])
    """
    words = _as_words(words, "words")
    starts, ends, position = [], [], 0
    for word in words:
        starts.append(position)
        ends.append(position + len(word))
        position += len(word) + 1
    return " ".join(words), starts, ends


def _as_words(words, argument):
    if isinstance(words, np.ndarray):
        words = words.tolist()
    if not isinstance(words, (list, tuple)) or not all(isinstance(word, str) for word in words):
        raise TypeError(
            f"Received an invalid value for argument `{argument}`, expected a list of str (one sentence's "
            f"words). Received: {argument}={words!r:.80}"
        )
    return list(words)


def _piece_counts(tokenizer, words):
    """The number of word pieces of each word, tokenized alone (as in a text, where spaces separate words)."""
    counts = []
    for begin in range(0, len(words), _TOKENIZE_CHUNK):
        ids = tokenizer.tokenize(tf.constant(words[begin : begin + _TOKENIZE_CHUNK], tf.string))
        counts.extend(ids.merge_dims(1, 2).row_lengths().numpy().tolist())
    return counts


def window_sentences(tokenizer, sentences, seq_length, labels=None):
    """Sentences of words -> examples that fit `seq_length`, split at word boundaries, none dropped.

    A sentence whose pieces fit `seq_length - 2` (room for `[CLS]` and
    `[SEP]`) is one example; a longer one becomes consecutive windows, each
    as many whole words as fit (a word is never split across windows; a
    single word with more pieces than fit is a window of its own and is
    truncated when packed). An empty sentence is one empty example.

    Args:
        tokenizer: the tokenizer `align_word_labels` uses (WordPiece,
            SentencePiece or byte-level BPE).
        sentences: list of sentences, each a list (or numpy array) of str.
        seq_length: int. The packed length, at least 3.
        labels: optional list of the sentences' word label ids, each a list
            (or numpy array) of int as long as its sentence.

    Returns:
        A dict of lists, one entry per example: `text` (str, the window's
        words joined by single spaces), `word_starts` and `word_ends` (lists
        of int, the words' character spans in `text`), `labels` (when
        given), and where the example came from: `sentence` (index into
        `sentences`), `window` (0, 1, ... within the sentence), `first_word`
        (index in the sentence of the window's first word) and `num_words`.

    Example:
    >>> from bert_keras.text import WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])
    >>> windows = window_sentences(tokenizer, [["a", "b", "a"], []], seq_length=4)
    >>> windows["text"], windows["sentence"], windows["first_word"]
    (['a b', 'a', ''], [0, 0, 1], [0, 2, 0])
    """
    seq_length = check_int("seq_length", seq_length, minimum=3)
    if isinstance(sentences, np.ndarray):
        sentences = list(sentences)
    if not isinstance(sentences, (list, tuple)):
        raise TypeError(
            "Received an invalid value for argument `sentences`, expected a list of sentences, each a list of "
            f"str. Received: sentences of type {type(sentences).__name__}"
        )
    sentences = [_as_words(words, f"sentences[{index}]") for index, words in enumerate(sentences)]
    if labels is not None:
        labels = [np.asarray(row, dtype=np.int64).tolist() for row in labels]
        for index, (words, row) in enumerate(zip(sentences, labels)):
            if len(words) != len(row):
                raise ValueError(
                    f"Received an invalid value for argument `labels`: sentence {index} has {len(words)} words "
                    f"and {len(row)} labels. Each word needs one label."
                )
        if len(labels) != len(sentences):
            raise ValueError(
                f"Received an invalid value for argument `labels`, expected one list per sentence "
                f"({len(sentences)}). Received: {len(labels)} lists"
            )
    every_word = [word for words in sentences for word in words]
    # A word's pieces at the start of a window, and after a space: they differ where the space belongs to the
    # word's first piece (byte-level BPE's "Ġword"); WordPiece and SentencePiece give the same both ways.
    alone_counts = iter(_piece_counts(tokenizer, every_word))
    spaced_counts = iter(_piece_counts(tokenizer, [" " + word for word in every_word]))
    windows = {key: [] for key in ("text", "word_starts", "word_ends", "sentence", "window", "first_word", "num_words")}
    if labels is not None:
        windows["labels"] = []
    for index, words in enumerate(sentences):
        bounds, pieces = [0], 0
        for position in range(len(words)):
            alone, spaced = next(alone_counts), next(spaced_counts)
            count = alone if position == bounds[-1] else spaced
            if pieces + count > seq_length - 2 and position > bounds[-1]:
                bounds.append(position)
                pieces, count = 0, alone
            pieces += count
        bounds.append(len(words))
        for window, (first, last) in enumerate(zip(bounds[:-1], bounds[1:])):
            text, starts, ends = join_words(words[first:last])
            for key, value in (("text", text), ("word_starts", starts), ("word_ends", ends), ("sentence", index),
                               ("window", window), ("first_word", first), ("num_words", last - first)):
                windows[key].append(value)
            if labels is not None:
                windows["labels"].append(labels[index][first:last])
    return windows


def _as_ragged(values, argument, dtype=tf.int64):
    """A ragged `(batch, (n))` tensor from a ragged or dense tensor, numpy arrays or lists of lists."""
    if isinstance(values, tf.RaggedTensor):
        return tf.cast(values, dtype)
    if isinstance(values, tf.Tensor) or (isinstance(values, np.ndarray) and values.dtype != object):
        return tf.RaggedTensor.from_tensor(tf.cast(values, dtype))
    try:
        rows = [np.asarray(row, dtype=np.int64).tolist() for row in values]
        return tf.ragged.constant(rows, dtype=dtype, ragged_rank=1, inner_shape=())
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"Received an invalid value for argument `{argument}`, expected one list of int per text. "
            f"Received: {argument}={values!r:.80}"
        ) from error


def _pack(values, seq_length, fill):
    """`(batch, (pieces))` -> `(batch, seq_length)`: trimmed, combined and padded as `pack_inputs` does the ids."""
    trimmed = tf_text.RoundRobinTrimmer(max_seq_length=seq_length - 2).trim([values])
    fill = tf.constant(fill, values.dtype)
    combined, _ = tf_text.combine_segments(trimmed, start_of_sequence_id=fill, end_of_segment_id=fill)
    packed, _ = tf_text.pad_model_inputs(combined, max_seq_length=seq_length, pad_value=fill)
    return packed


@tf.autograph.experimental.do_not_convert
def align_word_labels(tokenizer, texts, word_starts, word_ends, labels=None, seq_length=128,
                      ignore_label=IGNORE_LABEL):
    """Raw texts with labelled word spans -> packed BERT inputs with per-piece labels and character spans.

    Runs in the graph (a `tf.data` map over batches, a serving function). A
    piece belongs to the word whose span holds its first character; the first
    piece of each word carries the word's label, the others `ignore_label`.
    Pieces outside every word span (text that was not labelled) have word
    index -1 and `ignore_label`. A word without pieces (empty, or only
    characters that normalisation drops, as a zero-width space) has no label
    in the example. Pieces beyond `seq_length - 2` are cut, as `pack_inputs`
    cuts; `window_sentences` makes examples that fit.

    Args:
        tokenizer: a `WordPieceTokenizer`, `SentencePieceTokenizer` or
            `BytePairTokenizer`.
        texts: string tensor `(batch,)`, or a list / numpy array of str.
        word_starts, word_ends: int `(batch, (words))`: ragged tensors, or
            lists / numpy arrays of one list per text; each word's character
            span in its text, in increasing order, not overlapping.
        labels: optional int `(batch, (words))` like `word_starts`: the
            words' label ids.
        seq_length: int. The packed length, at least 3. Defaults to `128`.
        ignore_label: int. The label of positions the loss skips. Defaults
            to `IGNORE_LABEL` (-100).

    Returns:
        A dict of `(batch, seq_length)` tensors: `input_word_ids`,
        `input_mask`, `input_type_ids` (int32, as `pack_inputs`), `labels`
        (int32, when `labels` is given), `word_index` (int32, the piece's
        word, -1 for `[CLS]`, `[SEP]`, padding and unlabelled text),
        `char_starts` and `char_ends` (int64 code point offsets into the
        text, -1 for `[CLS]`, `[SEP]` and padding).

    Example:
    >>> from bert_keras.text import WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "new", "york", "##er"])
    >>> packed = align_word_labels(tokenizer, ["New Yorker"], [[0, 4]], [[3, 10]], labels=[[1, 2]], seq_length=6)
    >>> packed["labels"].numpy().tolist(), packed["char_starts"].numpy().tolist()
    ([[-100, 1, 2, -100, -100, -100]], [[-1, 0, 4, 8, -1, -1]])
    """
    seq_length = check_int("seq_length", seq_length, minimum=3)
    ids, starts, ends = tokenizer.tokenize_with_char_offsets(texts)
    # ids, starts, ends: (batch, words, pieces) -> (batch, pieces); words here are the tokenizer's, not the user's.
    ids, starts, ends = (x.merge_dims(1, 2) for x in (ids, starts, ends))
    word_starts, word_ends = _as_ragged(word_starts, "word_starts"), _as_ragged(word_ends, "word_ends")
    word_index, first = _word_of_pieces(starts, word_starts, word_ends)
    packed = pack_inputs(ids, seq_length, tokenizer.cls_id, tokenizer.sep_id, padding_id=tokenizer.pad_id)
    packed["word_index"] = tf.cast(_pack(starts.with_flat_values(word_index), seq_length, -1), tf.int32)
    packed["char_starts"] = _pack(starts, seq_length, -1)
    packed["char_ends"] = _pack(ends, seq_length, -1)
    if labels is not None:
        labels = _as_ragged(labels, "labels")
        global_word = tf.gather(word_starts.row_starts(), starts.value_rowids()) + word_index
        piece_labels = tf.where(first, tf.gather(labels.flat_values, tf.maximum(global_word, 0)), ignore_label)
        packed["labels"] = tf.cast(_pack(starts.with_flat_values(piece_labels), seq_length, ignore_label), tf.int32)
    return packed


def _word_of_pieces(starts, word_starts, word_ends):
    """Each piece's word (index within its text, -1 for none) and whether it is its word's first piece.

    Args:
        starts: int64 ragged `(batch, (pieces))`, the pieces' first characters.
        word_starts, word_ends: int64 ragged `(batch, (words))`.

    Returns:
        Two flat tensors over the pieces: int64 word indices and bool.
    """
    # Keys row * width + offset sort every text's words and pieces into one line, so that one 1-D search finds,
    # for each piece, the last word starting at or before it.
    width = tf.reduce_max(tf.concat([[0], word_ends.flat_values, starts.flat_values], 0)) + 1
    piece_row = starts.value_rowids()
    word_keys = word_starts.value_rowids() * width + word_starts.flat_values
    found = tf.searchsorted(word_keys, piece_row * width + starts.flat_values, side="right", out_type=tf.int64) - 1
    row_first_word = tf.gather(word_starts.row_starts(), piece_row)
    clipped = tf.maximum(found, 0)
    inside = (found >= row_first_word) & (starts.flat_values < tf.gather(word_ends.flat_values, clipped))
    global_word = tf.where(inside, found, -1)
    # A piece is its word's first unless the piece before it, in the same text, has the same word.
    previous = tf.concat([[-1], global_word[:-1]], 0)
    same_row = tf.concat([[False], piece_row[1:] == piece_row[:-1]], 0)
    first = inside & ~(same_row & (previous == global_word))
    return tf.where(inside, found - row_first_word, -1), first


def merge_windows(windows, word_index, predictions):
    """The windows' per-piece predictions -> one prediction per word of each whole sentence.

    Each word takes the prediction at its first piece, as it was trained.

    Args:
        windows: the dict from `window_sentences` (its `sentence`,
            `first_word` and `num_words` are read).
        word_index: int array `(examples, seq_length)`, from `align_word_labels`.
        predictions: array `(examples, seq_length, ...)`: per-piece label
            ids, scores or logits.

    Returns:
        A list over the sentences of lists over their words: the word's
        prediction (`predictions[example, position]`), or `None` for a word
        without pieces (or cut off by truncation).

    Example:
    >>> windows = {"sentence": [0, 0], "first_word": [0, 1], "num_words": [1, 2]}
    >>> merge_windows(windows, [[-1, 0, 0, -1], [-1, 0, 1, -1]], [[9, 5, 6, 9], [9, 7, 8, 9]])
    [[5, 7, 8]]
    """
    word_index, predictions = np.asarray(word_index), np.asarray(predictions)
    sizes = {}
    for sentence, first, count in zip(windows["sentence"], windows["first_word"], windows["num_words"]):
        sizes[sentence] = max(sizes.get(sentence, 0), first + count)
    merged = [[None] * sizes.get(sentence, 0) for sentence in range(max(sizes, default=-1) + 1)]
    for example, (sentence, first) in enumerate(zip(windows["sentence"], windows["first_word"])):
        for position in range(word_index.shape[1] - 1, -1, -1):  # backwards: the first piece of a word wins
            word = int(word_index[example, position])
            if word >= 0:
                merged[sentence][first + word] = predictions[example, position].tolist()
    return merged
