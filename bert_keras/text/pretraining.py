"""BERT pre-training data (masked LM + next sentence) from a plain-text corpus, as `tf.data`.

The corpus format is the original BERT one (google-research/bert,
`create_pretraining_data.py`): one sentence per line, a blank line between
documents. The steps:

1. `read_documents`: the corpus files to documents (lists of lines).
2. `tokenize_documents`: every line to WordPiece ids grouped by word, with
   `WordPieceTokenizer`. A line longer than `seq_length - 3` tokens is cut,
   at word boundaries, into consecutive parts that fit; each part counts as a
   sentence of the same document (nothing is dropped).
3. `create_instances`: sentence pairs, as the original does: segment A is
   one or more whole sentences; with probability `random_next_prob` segment B
   comes from a random other document (label 1), otherwise B is the text that
   follows A (label 0; a chunk of a single sentence is split at a random word
   boundary). With probability `short_seq_prob` an instance targets a shorter
   random length. Pairs are trimmed to `seq_length - 3` tokens by dropping
   tokens from the front or back of the longer segment at random. Seeded
   NumPy randomness.
4. `mask_and_pack` (per batch, in the graph): `[CLS] A [SEP] B [SEP]`, then
   tensorflow-text's `mask_language_model` with a `MaskValuesChooser` (80%
   `[MASK]`, 10% a random id, 10% unchanged) and `BertItemSelector`, which
   selects `round(masked_lm_prob * candidates)` tokens (at least 1, at most
   `max_predictions_per_seq`) among everything but `[CLS]`/`[SEP]`/`[PAD]`,
   or whole words with `whole_word_masking`. Masks come from a seeded
   random stream: with `repeat=True` every pass over the instances is masked
   anew; iterating a non-repeated dataset again gives the same masks.

`pretraining_dataset` chains them and yields `(features, labels,
sample_weights)` ready for `BertPretrainer.fit`.
"""

import logging
import os
import weakref

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras._checks import check_float, check_int
from bert_keras._contract import INPUT_KEYS
from bert_keras.text.tokenizer import WordPieceTokenizer

logger = logging.getLogger(__name__)

FEATURE_KEYS = INPUT_KEYS + ("masked_lm_positions",)
NEXT = 0  # B is the text that follows A
RANDOM_NEXT = 1  # B comes from another document


# ---------------------------------------------------------------------------
# 1. Corpus -> documents
# ---------------------------------------------------------------------------
def read_documents(corpus):
    """Reads corpus files in BERT's format: one sentence per line, blank lines between documents.

    Args:
        corpus: str or path-like, or a list of them. Text files (UTF-8;
            invalid bytes are replaced). A document does not continue from one
            file into the next.

    Returns:
        A list of documents, each a non-empty list of stripped, non-empty lines.

    Raises:
        FileNotFoundError: a file does not exist.
        ValueError: the corpus holds no text.
    """
    paths = [corpus] if isinstance(corpus, (str, os.PathLike)) else list(corpus)
    if not paths:
        raise ValueError("Received an invalid value for argument `corpus`, expected a file or a list of files. Received: corpus=[]")
    documents = []
    for path in paths:
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Corpus file {path!r} does not exist.")
        current = []
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line:
                    current.append(line)
                elif current:
                    documents.append(current)
                    current = []
        if current:
            documents.append(current)
    if not documents:
        raise ValueError(
            f"The corpus {[os.fspath(p) for p in paths]} holds no text. Expected one sentence per "
            "line and a blank line between documents."
        )
    return documents


# ---------------------------------------------------------------------------
# 2. Documents -> word-piece ids grouped by word
# ---------------------------------------------------------------------------
def _split_long(words, max_tokens):
    """Cuts a sentence (a list of words, each a list of ids) into parts of at most `max_tokens` ids."""
    parts, current, length = [], [], 0
    for word in words:
        while len(word) > max_tokens:  # a single word longer than the budget
            if current:
                parts.append(current)
                current, length = [], 0
            parts.append([word[:max_tokens]])
            word = word[max_tokens:]
        if length + len(word) > max_tokens:
            parts.append(current)
            current, length = [], 0
        current.append(word)
        length += len(word)
    if current:
        parts.append(current)
    return parts


_TOKENIZE_FUNCTIONS = weakref.WeakKeyDictionary()


def _tokenize_function(tokenizer):
    """`tokenizer.tokenize` as a `tf.function` over string vectors, traced once per tokenizer."""
    if tokenizer not in _TOKENIZE_FUNCTIONS:
        _TOKENIZE_FUNCTIONS[tokenizer] = tf.function(
            tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)]
        )
    return _TOKENIZE_FUNCTIONS[tokenizer]


def _to_lists(ids):
    """Ragged `(lines, words, pieces)` to nested Python lists (faster than `to_list()`)."""
    values = ids.flat_values.numpy().tolist()
    pieces = np.cumsum(ids.values.row_lengths().numpy()).tolist()
    words = np.cumsum(ids.row_lengths().numpy()).tolist()
    word_lists, start = [], 0
    for end in pieces:
        word_lists.append(values[start:end])
        start = end
    lines, start = [], 0
    for end in words:
        lines.append(word_lists[start:end])
        start = end
    return lines


def tokenize_documents(documents, tokenizer, max_sentence_tokens=None, batch_size=4096):
    """Tokenizes every line of every document, keeping word boundaries.

    Args:
        documents: list of documents, each a list of str (see `read_documents`).
        tokenizer: `WordPieceTokenizer`.
        max_sentence_tokens: optional int. Sentences with more word pieces are
            cut at word boundaries into consecutive parts of at most this many
            (a single longer word is cut too). Defaults to no limit.
        batch_size: int. Lines tokenized per call. Defaults to `4096`.

    Returns:
        A list of documents; each a list of sentences; each a list of words;
        each a list of int ids. Lines without any token are dropped, and so
        are documents left empty.
    """
    lines = [line for document in documents for line in document]
    tokenize = _tokenize_function(tokenizer)
    tokenized = []
    for start in range(0, len(lines), batch_size):
        ids = tokenize(tf.constant(lines[start : start + batch_size]))  # (lines, words, pieces)
        tokenized.extend(_to_lists(ids))
    result, index = [], 0
    for document in documents:
        sentences = []
        for words in tokenized[index : index + len(document)]:
            if not words:
                continue
            if max_sentence_tokens is not None and sum(len(w) for w in words) > max_sentence_tokens:
                sentences.extend(_split_long(words, max_sentence_tokens))
            else:
                sentences.append(words)
        index += len(document)
        if sentences:
            result.append(sentences)
    return result


# ---------------------------------------------------------------------------
# 3. Documents -> sentence-pair instances
# ---------------------------------------------------------------------------
def _num_tokens(words):
    return sum(len(word) for word in words)


def _truncate_pair(a, b, max_tokens, rng):
    """Drops tokens from the front or back (at random) of the longer segment, as the original."""
    a, b = [list(w) for w in a], [list(w) for w in b]
    length_a, length_b = _num_tokens(a), _num_tokens(b)
    while length_a + length_b > max_tokens:
        if length_a > length_b:
            longer, length_a = a, length_a - 1
        else:
            longer, length_b = b, length_b - 1
        index = 0 if rng.random() < 0.5 else -1
        word = longer[index]
        word.pop(0 if index == 0 else -1)
        if not word:
            longer.pop(index)
    return a, b


def _random_segment(documents, document_index, target_length, rng):
    """Sentences from a random point of a random other document, up to `target_length` tokens."""
    other = int(rng.integers(len(documents) - 1))
    other += other >= document_index  # any document but this one
    sentences = documents[other]
    start = int(rng.integers(len(sentences)))
    segment = []
    for sentence in sentences[start:]:
        segment.extend(sentence)
        if _num_tokens(segment) >= target_length:
            break
    return segment


def _document_instances(documents, document_index, max_tokens, short_seq_prob, random_next_prob, rng):
    document = documents[document_index]
    target_length = max_tokens
    if rng.random() < short_seq_prob:
        target_length = int(rng.integers(2, max_tokens + 1))
    instances, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += _num_tokens(document[i])
        if i == len(document) - 1 or length >= target_length:
            a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
            a = [word for sentence in chunk[:a_end] for word in sentence]
            is_random_next = rng.random() < random_next_prob
            if not is_random_next:
                if len(chunk) >= 2:
                    b = [word for sentence in chunk[a_end:] for word in sentence]
                elif len(a) >= 2:  # one sentence: B is the rest of it
                    cut = int(rng.integers(1, len(a)))
                    a, b = a[:cut], a[cut:]
                else:  # a one-word chunk cannot be split: B comes from elsewhere
                    is_random_next = True
            if is_random_next:
                b = _random_segment(documents, document_index, max(1, target_length - _num_tokens(a)), rng)
                i -= len(chunk) - a_end  # the unused sentences start the next chunk
            a, b = _truncate_pair(a, b, max_tokens, rng)
            instances.append((a, b, RANDOM_NEXT if is_random_next else NEXT))
            chunk, length = [], 0
        i += 1
    return instances


def create_instances(
    documents,
    seq_length,
    short_seq_prob=0.1,
    random_next_prob=0.5,
    dupe_factor=1,
    seed=0,
):
    """Sentence-pair instances for next-sentence prediction, as BERT's `create_pretraining_data.py`.

    Args:
        documents: tokenized documents (see `tokenize_documents`); at least
            two, since random next sentences come from another document.
        seq_length: int. Length of the packed sequence; pairs hold at most
            `seq_length - 3` tokens (room for `[CLS]` and two `[SEP]`).
        short_seq_prob: float. Probability of a shorter random target length
            (2 to `seq_length - 3`), so the model also sees short inputs.
            Defaults to `0.1`.
        random_next_prob: float. Probability that B is a random segment of
            another document (label 1). Defaults to `0.5`.
        dupe_factor: int. Passes over the corpus, each cutting the documents
            differently. Defaults to `1`.
        seed: int. Seed of the NumPy random generator. Defaults to `0`.

    Returns:
        A list of `(segment_a, segment_b, next_sentence_label)` in shuffled
        order; segments are lists of words, each a list of int ids; the label
        is 0 when B follows A and 1 when B is random.
    """
    seq_length = check_int("seq_length", seq_length, minimum=5)
    short_seq_prob = check_float("short_seq_prob", short_seq_prob, 0, 1)
    random_next_prob = check_float("random_next_prob", random_next_prob, 0, 1)
    dupe_factor = check_int("dupe_factor", dupe_factor, minimum=1)
    if not documents:
        raise ValueError("The corpus holds no text: there are no documents to make instances from.")
    if len(documents) < 2:
        raise ValueError(
            "The corpus holds a single document, but next-sentence prediction draws its random "
            "next sentences from other documents. Separate documents with a blank line; a corpus "
            f"needs at least 2. Received: {len(documents)} document"
        )
    rng = np.random.default_rng(seed)
    instances = []
    for _ in range(dupe_factor):
        for index in range(len(documents)):
            instances.extend(
                _document_instances(documents, index, seq_length - 3, short_seq_prob, random_next_prob, rng)
            )
    order = rng.permutation(len(instances))
    return [instances[i] for i in order]


def instances_dataset(instances):
    """A `tf.data.Dataset` of instances: `(segment_a, segment_b, next_sentence_label)`.

    Segments are int32 ragged `(words, word_pieces)`; the label is an int32 scalar.
    """
    if not instances:
        raise ValueError("There are no instances to make a dataset of: the corpus is empty.")

    def ragged(segments):
        words = [len(segment) for segment in segments]
        pieces = [len(word) for segment in segments for word in segment]
        values = [i for segment in segments for word in segment for i in word]
        return tf.RaggedTensor.from_nested_row_lengths(
            np.asarray(values, np.int32), [np.asarray(words, np.int64), np.asarray(pieces, np.int64)]
        )

    a = ragged([instance[0] for instance in instances])
    b = ragged([instance[1] for instance in instances])
    labels = np.asarray([instance[2] for instance in instances], np.int32)
    return tf.data.Dataset.from_tensor_slices((a, b, labels))


# ---------------------------------------------------------------------------
# 4. Masking and packing, in the graph
# ---------------------------------------------------------------------------
class BertItemSelector(tf_text.RandomItemSelector):
    """tensorflow-text item selector with the original BERT's count of selected tokens.

    `RandomItemSelector` selects `ceil(rate * n)` items per row, which
    overshoots 15% on short rows; the original selects
    `min(max_predictions_per_seq, max(1, round(rate * n)))` tokens, `n`
    counting the selectable tokens. Items (tokens, or words when selecting on
    ragged `(batch, words, word_pieces)`) are taken in a random order as long
    as the total number of tokens stays within that budget.

    Args:
        max_selections_per_batch: int. Most tokens selected per row
            (`max_predictions_per_seq`).
        selection_rate: float. Fraction of the selectable tokens selected.
        unselectable_ids: list of int. Ids never selected (`[CLS]`, `[SEP]`, `[PAD]`).
    """

    def get_selection_mask(self, input_ids, axis=1):
        if axis != 1:
            raise ValueError(f"BertItemSelector selects along axis 1. Received: axis={axis}")
        selectable = self.get_selectable(input_ids, axis)  # (batch, (items)) bool
        if input_ids.ragged_rank >= 2:
            sizes = tf.cast(input_ids.row_lengths(axis=2), tf.int32)  # (batch, (words)): pieces per word
        else:
            sizes = tf.ones_like(selectable, dtype=tf.int32)
        sizes = tf.ragged.map_flat_values(tf.where, selectable, sizes, tf.zeros_like(sizes))
        candidates = tf.cast(tf.reduce_sum(sizes, axis=1), tf.float32)  # (batch,)
        budget = tf.math.round(candidates * self.selection_rate)
        budget = tf.minimum(tf.maximum(budget, 1.0), float(self.max_selections_per_batch))
        budget = tf.cast(budget, tf.int32)[:, None]  # (batch, 1)
        # A random order of the items, selectable ones first.
        scores = tf.random.uniform(tf.shape(selectable.flat_values))
        scores = selectable.with_flat_values(tf.where(selectable.flat_values, scores, 2.0))
        dense_scores = scores.to_tensor(default_value=3.0)  # (batch, items)
        order = tf.argsort(dense_scores, axis=1)  # (batch, items)
        sorted_sizes = tf.gather(sizes.to_tensor(), order, batch_dims=1)  # (batch, items)
        sorted_selectable = tf.gather(selectable.to_tensor(), order, batch_dims=1)
        chosen = sorted_selectable & (tf.cumsum(sorted_sizes, axis=1) <= budget)  # (batch, items), sorted
        chosen = tf.gather(chosen, tf.argsort(order, axis=1), batch_dims=1)  # (batch, items), original order
        return tf.RaggedTensor.from_tensor(chosen, lengths=selectable.row_lengths())


def _special_word(batch, token_id):
    # (batch, 1 word, 1 piece)
    return tf.RaggedTensor.from_tensor(tf.fill([batch, 1, 1], tf.constant(token_id, tf.int32)), ragged_rank=2)


def mask_and_pack(
    segment_a,
    segment_b,
    next_sentence_labels,
    *,
    seq_length,
    special_tokens,
    max_predictions_per_seq=20,
    masked_lm_prob=0.15,
    mask_token_rate=0.8,
    random_token_rate=0.1,
    whole_word_masking=False,
):
    """Packs a batch of sentence pairs and applies BERT's masking (tensorflow-text).

    Args:
        segment_a: int32 ragged `(batch, words, word_pieces)`.
        segment_b: int32 ragged `(batch, words, word_pieces)`; together with
            A at most `seq_length - 3` tokens per row.
        next_sentence_labels: int32 `(batch,)`.
        seq_length: int. Length of the packed inputs.
        special_tokens: dict with `vocab_size`, `start_of_sequence_id`,
            `end_of_segment_id`, `padding_id` and `mask_id` (as
            `WordPieceTokenizer.get_special_tokens_dict()` returns).
        max_predictions_per_seq: int. Most masked positions per row. Defaults to `20`.
        masked_lm_prob: float. Fraction of the tokens (other than `[CLS]`
            and `[SEP]`) selected. Defaults to `0.15`.
        mask_token_rate: float. Of the selected, replaced by `[MASK]`. Defaults to `0.8`.
        random_token_rate: float. Of the selected, replaced by a random id
            (uniform over the vocabulary). Defaults to `0.1`; the rest stays.
        whole_word_masking: bool. Select whole words (all their word pieces).
            Defaults to `False`.

    Returns:
        `(features, labels, sample_weights)`: features `input_word_ids`,
        `input_mask`, `input_type_ids` `(batch, seq_length)` and
        `masked_lm_positions` `(batch, max_predictions_per_seq)`; labels
        `mlm_logits` (the original ids at those positions, `masked_lm_ids`)
        and `nsp_logits` (the next-sentence labels); sample weights
        `mlm_logits` (`masked_lm_weights`: 1.0 for real predictions, 0.0 for
        padding) and `nsp_logits` (ones).
    """
    cls_id = int(special_tokens["start_of_sequence_id"])
    sep_id = int(special_tokens["end_of_segment_id"])
    pad_id = int(special_tokens["padding_id"])
    batch = segment_a.nrows(out_type=tf.int32)
    cls, sep = _special_word(batch, cls_id), _special_word(batch, sep_id)
    # words, types: (batch, (words), (pieces))
    words = tf.concat([cls, segment_a, sep, segment_b, sep], axis=1)
    types = tf.concat(
        [tf.zeros_like(cls), tf.zeros_like(segment_a), tf.zeros_like(sep), tf.ones_like(segment_b), tf.ones_like(sep)],
        axis=1,
    )
    selector = BertItemSelector(
        max_selections_per_batch=max_predictions_per_seq,
        selection_rate=masked_lm_prob,
        unselectable_ids=[cls_id, sep_id, pad_id],
    )
    chooser = tf_text.MaskValuesChooser(
        int(special_tokens["vocab_size"]),
        int(special_tokens["mask_id"]),
        mask_token_rate=mask_token_rate,
        random_token_rate=random_token_rate,
    )
    items = words if whole_word_masking else words.merge_dims(1, 2)
    # masked: (batch, (tokens)); positions, masked_ids: (batch, (predictions))
    masked, positions, masked_ids = tf_text.mask_language_model(items, selector, chooser, axis=1)
    # word_ids, mask, type_ids: (batch, seq_length)
    word_ids, mask = tf_text.pad_model_inputs(masked, max_seq_length=seq_length, pad_value=pad_id)
    type_ids, _ = tf_text.pad_model_inputs(types.merge_dims(1, 2), max_seq_length=seq_length, pad_value=0)
    # masked_lm_*: (batch, max_predictions_per_seq)
    lm_positions, lm_weights = tf_text.pad_model_inputs(
        tf.cast(positions, tf.int32), max_seq_length=max_predictions_per_seq, pad_value=0
    )
    lm_ids, _ = tf_text.pad_model_inputs(tf.cast(masked_ids, tf.int32), max_seq_length=max_predictions_per_seq)
    features = {
        "input_word_ids": tf.cast(word_ids, tf.int32),
        "input_mask": tf.cast(mask, tf.int32),
        "input_type_ids": tf.cast(type_ids, tf.int32),
        "masked_lm_positions": lm_positions,
    }
    labels = {"mlm_logits": lm_ids, "nsp_logits": tf.cast(next_sentence_labels, tf.int32)}
    weights = {
        "mlm_logits": tf.cast(lm_weights, tf.float32),
        "nsp_logits": tf.ones_like(next_sentence_labels, dtype=tf.float32),
    }
    return features, labels, weights


# ---------------------------------------------------------------------------
# The whole pipeline
# ---------------------------------------------------------------------------
def pretraining_dataset(
    corpus,
    vocab_file,
    do_lower_case=True,
    seq_length=128,
    batch_size=32,
    max_predictions_per_seq=20,
    masked_lm_prob=0.15,
    short_seq_prob=0.1,
    random_next_prob=0.5,
    whole_word_masking=False,
    dupe_factor=1,
    repeat=False,
    drop_remainder=False,
    seed=0,
    documents=None,
):
    """BERT pre-training batches (masked LM + next sentence) from a corpus in BERT's format.

    Args:
        corpus: str or list of str. Text files: one sentence per line, a
            blank line between documents (see the module docstring). At least
            two documents. Ignored when `documents` is given.
        vocab_file: str. The WordPiece `vocab.txt` (or a `WordPieceTokenizer`).
        do_lower_case: bool. Uncased tokenization. Defaults to `True`.
        seq_length: int. Defaults to `128`.
        batch_size: int. Defaults to `32`.
        max_predictions_per_seq: int. Defaults to `20`.
        masked_lm_prob: float. Defaults to `0.15`.
        short_seq_prob: float. Defaults to `0.1`.
        random_next_prob: float. Defaults to `0.5`.
        whole_word_masking: bool. Defaults to `False`.
        dupe_factor: int. Passes over the corpus, each paired differently.
            Defaults to `1`.
        repeat: bool. Repeat forever; masks differ on every pass. Defaults
            to `False`.
        drop_remainder: bool. Drop a last, smaller batch. Defaults to `False`.
        seed: int. The same seed gives the same batches. Defaults to `0`.
        documents: optional list of documents (lists of str lines), instead
            of reading `corpus`.

    Returns:
        A `tf.data.Dataset` of `(features, labels, sample_weights)` as
        `mask_and_pack` describes; `dataset.num_instances` holds the number
        of instances per pass.

    Raises:
        ValueError: an empty corpus, a corpus of one document, or bad arguments.

    Example:
    >>> ds = pretraining_dataset("corpus.txt", "vocab.txt", seq_length=64, batch_size=8)  # doctest: +SKIP
    >>> pretrainer.compile(optimizer="adam")  # doctest: +SKIP
    >>> pretrainer.fit(ds, epochs=1)  # doctest: +SKIP
    """
    seq_length = check_int("seq_length", seq_length, minimum=5)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    max_predictions_per_seq = check_int("max_predictions_per_seq", max_predictions_per_seq, minimum=1)
    masked_lm_prob = check_float("masked_lm_prob", masked_lm_prob, 0, 1)
    if isinstance(vocab_file, WordPieceTokenizer):
        tokenizer = vocab_file
    else:
        tokenizer = WordPieceTokenizer(vocab_file, lower_case=bool(do_lower_case))
    if documents is None:
        documents = read_documents(corpus)
    tokenized = tokenize_documents(documents, tokenizer, max_sentence_tokens=seq_length - 3)
    if not tokenized:
        raise ValueError("The corpus holds no text that the vocabulary can tokenize.")
    instances = create_instances(
        tokenized,
        seq_length,
        short_seq_prob=short_seq_prob,
        random_next_prob=random_next_prob,
        dupe_factor=dupe_factor,
        seed=seed,
    )
    logger.info(
        "Pre-training data: %d documents, %d instances of up to %d tokens.",
        len(tokenized),
        len(instances),
        seq_length,
    )
    special_tokens = tokenizer.get_special_tokens_dict()
    graph_seed = int(seed)

    def mask(a, b, labels):
        # Seeds the random ops of this function's graph only (tensorflow-text's
        # masking uses stateful random ops): the same seed, the same masks.
        tf.compat.v1.get_default_graph().seed = graph_seed
        return mask_and_pack(
            a,
            b,
            labels,
            seq_length=seq_length,
            special_tokens=special_tokens,
            max_predictions_per_seq=max_predictions_per_seq,
            masked_lm_prob=masked_lm_prob,
            whole_word_masking=whole_word_masking,
        )

    dataset = instances_dataset(instances)
    if repeat:
        # Repeat before masking: one random stream, new masks on every pass.
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    # Sequential map: stateful random ops draw in a fixed order.
    dataset = dataset.map(mask)
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    dataset.num_instances = len(instances)
    return dataset
