"""The graphs `export_litert` converts: WordPiece in tensorflow-text's LiteRT kernels, packing and windows in builtin
ops, around an export's own `serve_ids` (see `bert_keras.export.litert`)."""

import logging

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.export._litert_table import normalizer_model
from bert_keras.export._writer import IDS_SIGNATURE, PADDED_IDS_ENDPOINT
from bert_keras.export.litert_windows import reader_settings, window_reads
from bert_keras.export.manifest import READER, TAGGER, ExportError
from bert_keras.text.tokenizer import wordpiece_vocabulary

logger = logging.getLogger(__name__)

# What `serve` and `serve_ids` return of the export's `serve_ids`, per kind.
OUTPUTS = {"classifier": ("probabilities",), "sentence_encoder": ("embeddings",), TAGGER: ("scores",),
           READER: ("start_logits", "end_logits")}
# The signatures of a file, in the converter's order (`version`: a second one beside `serve_ids`, which alone would
# be converted without its name). A tagger's `windows` lets its caller run `serve_ids` a few windows at a time, so
# that one long text holds one chunk's activations (files converted before it run every window in one call).
# `record`: the canonical JSON of what the file's record says it serves (`litert_record.carried_values`), which the
# loader compares with the record beside the file, so that an edited record is refused.
IDS_SIGNATURES = ("serve_ids", "version", "record")
STRING_SIGNATURES = ("serve", "serve_ids", "preprocess", "record")
TAGGER_SIGNATURES = STRING_SIGNATURES + ("windows",)
# A reader's file tokenizes (`pieces`: a batch of texts -> their flat pieces, offsets and word starts) and runs the
# model on packed windows (`serve_ids`); its caller cuts the windows between the two (`litert_windows`).
READER_SIGNATURES = ("pieces", "serve_ids", "record")


def litert_module(saved, manifest, vocabulary, carried):
    """The `tf.Module` converted: `serve_ids` (the export's), `record` (the str `carried`: what the file's record
    says it serves), and with a vocabulary `serve` and `preprocess`.

    The model runs in the padded layout where the export has it (`serve_ids_padded`): token packing's gathers and
    branches cost LiteRT more than the padding's multiply-adds, and its int8 graph is one that XNNPACK takes (the
    packed one it refuses). An export written before that endpoint converts its packed `serve_ids`.
    """
    kind, tokenizer = manifest["kind"], manifest["tokenizer"]
    text_spec = [tf.TensorSpec([1] if kind == TAGGER else [None], tf.string, name="text")]
    if not hasattr(saved, "serve_ids"):
        raise ExportError("The export has no serve_ids endpoint (written by an earlier version of bert_keras): export "
                          "the model again with this version to convert it to LiteRT.")
    run_ids = getattr(saved, PADDED_IDS_ENDPOINT, None) or saved.serve_ids

    class IdsModule(tf.Module):
        signature_names = IDS_SIGNATURES  # what the file holds (a class attribute: no state of the module)

        def __init__(self):
            super().__init__()
            # Its variables, frozen into the file; not the export's other resources (a byte-level BPE's tables),
            # which the converter, saving this module first, would carry as ops no LiteRT runtime has.
            self.weights = list(saved.variables)

        @tf.function(input_signature=IDS_SIGNATURE, autograph=False)
        def serve_ids(self, input_word_ids, input_mask, input_type_ids):
            outputs = run_ids(input_word_ids=input_word_ids, input_mask=input_mask, input_type_ids=input_type_ids)
            return {name: outputs[name] for name in OUTPUTS[kind]}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="unused")], autograph=False)
        def version(self, unused):  # a second signature: one function alone is converted without its name
            return {"version": tf.constant(1) + 0 * tf.reduce_sum(unused)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="unused")], autograph=False)
        def record(self, unused):  # a constant: what the record says, carried by the file its SHA-256 covers
            return {"record": tf.constant(carried)}

    class StringsModule(IdsModule):
        signature_names = STRING_SIGNATURES

        def __init__(self):
            super().__init__()
            self.saved = saved  # its variables are frozen into the file
            self.pieces = _Pieces(tokenizer, vocabulary, offsets=kind == TAGGER)

        @tf.function(input_signature=text_spec, autograph=False)
        def preprocess(self, text):
            return self.pieces.packed(text)

        @tf.function(input_signature=text_spec, autograph=False)
        def serve(self, text):
            if kind == TAGGER:
                return _tag_one_text(self.pieces, run_ids, text, tokenizer["seq_length"],
                                     manifest["stride"])
            outputs = run_ids(**self.pieces.packed(text))
            return {name: outputs[name] for name in OUTPUTS[kind]}

    class TaggerModule(StringsModule):
        signature_names = TAGGER_SIGNATURES

        @tf.function(input_signature=text_spec, autograph=False)
        def windows(self, text):  # `serve` without its model, which the caller runs a few windows at a time
            return _windows_of_one_text(self.pieces, text, tokenizer["seq_length"], manifest["stride"])

    class ReaderModule(IdsModule):
        signature_names = READER_SIGNATURES

        def __init__(self):
            super().__init__()
            self.pieces_of = _Pieces(tokenizer, vocabulary, offsets=True)

        @tf.function(input_signature=text_spec, autograph=False)
        def pieces(self, text):  # questions or contexts -> their pieces, which the caller cuts into windows
            return self.pieces_of.flat_pieces(text)

    if vocabulary is None:
        return IdsModule()
    return {TAGGER: TaggerModule, READER: ReaderModule}.get(kind, StringsModule)()


class _Pieces:
    """WordPiece in tensorflow-text's LiteRT kernels, as the package's `WordPieceTokenizer` tokenizes (every code
    point, the 100-character word rule, offsets in code points of the raw text), and packing in builtin ops."""

    def __init__(self, tokenizer, vocabulary, offsets):
        buffer, unmatched = normalizer_model(vocabulary, bool(tokenizer.get("lower_case", True)))
        if unmatched:
            logger.warning("The vocabulary holds %d code points that LiteRT's WordPiece splits off as punctuation "
                           "(e.g. U+%04X); words holding them may get other pieces than the export's.",
                           len(unmatched), unmatched[0])
        self.max_chars = int(tokenizer.get("max_chars_per_word") or 100)
        self.unknown = tokenizer.get("unknown_token", "[UNK]")
        suffix = tokenizer.get("suffix_indicator", "##")
        self.normalizer = tf_text.FastBertNormalizer(model_buffer=buffer)
        matched = wordpiece_vocabulary(vocabulary)  # a token holding a space never matches, as in the export
        self.wordpiece = tf_text.FastWordpieceTokenizer(
            matched, suffix_indicator=suffix, max_bytes_per_word=4 * self.max_chars, token_out_type=tf.int32,
            unknown_token=matched[vocabulary.index(self.unknown)])
        self.bytes = tf_text.ByteSplitter()
        self.unknown_id = vocabulary.index(self.unknown)
        self.word_start = tf.constant([not token.startswith(suffix) for token in vocabulary])
        self.vocabulary = tf.constant(vocabulary)
        self.seq_length, self.cls_id = tokenizer["seq_length"], tokenizer["cls_id"]
        self.sep_id, self.pad_id = tokenizer["sep_id"], tokenizer["pad_id"]
        self.offsets = offsets

    def tokenize(self, text):
        """`(ids, starts, ends)`, ragged `(batch, (pieces))`: ids int32, character spans int32 (code points of the
        raw text; None without offsets)."""
        if not self.offsets:
            normalized = self.normalizer.normalize(text)
            ids, starts, ends = self.wordpiece.tokenize_with_offsets(normalized)
            ids, _, _ = self._long_words_unknown(ids, starts, ends, normalized)
            return ids, None, None
        normalized, byte_map = self.normalizer.normalize_with_offsets(text)  # (batch, (normalised bytes + 1))
        ids, starts, ends = self.wordpiece.tokenize_with_offsets(normalized)
        ids, starts, ends = self._long_words_unknown(ids, starts, ends, normalized)
        row = tf.cast(ids.value_rowids(), tf.int32)
        base = tf.gather(tf.cast(byte_map.row_splits, tf.int32), row)
        raw_map = tf.cast(byte_map.flat_values, tf.int32)
        # A piece spans from the raw character of its first byte to after the raw character of its last byte.
        raw_first = tf.gather(raw_map, base + tf.cast(starts.flat_values, tf.int32))
        raw_last = tf.gather(raw_map, base + tf.cast(ends.flat_values, tf.int32) - 1)
        raw = self.bytes.split(text)
        count, raw_base = _code_point_counts(raw), tf.gather(tf.cast(raw.row_splits, tf.int32), row)
        char_starts = tf.gather(count, raw_base + raw_first) - tf.gather(count, raw_base)
        char_ends = tf.gather(count, raw_base + raw_last + 1) - tf.gather(count, raw_base)
        return ids, ids.with_flat_values(char_starts), ids.with_flat_values(char_ends)

    def flat_pieces(self, text):
        """A batch's pieces, flat: `ids`, `char_starts`, `char_ends`, `word_start` (1 where a piece starts its word:
        no suffix indicator), int32 `(pieces,)` each, and `lengths` int32 `(batch,)`: the pieces per text."""
        ids, starts, ends = self.tokenize(text)
        splits = tf.cast(ids.row_splits, tf.int32)
        return {"ids": ids.flat_values, "char_starts": starts.flat_values, "char_ends": ends.flat_values,
                "word_start": tf.cast(tf.gather(self.word_start, ids.flat_values), tf.int32),
                "lengths": splits[1:] - splits[:-1]}

    def _long_words_unknown(self, ids, starts, ends, normalized):
        """Hugging Face's rule: a word of more than `max_chars` characters is one unknown token spanning it
        (FastWordpiece counts bytes, not characters)."""
        flat = ids.flat_values
        total = tf.shape(flat)[0]
        row = tf.cast(ids.value_rowids(), tf.int32)
        first = tf.gather(self.word_start, flat)  # (pieces,): a word's first piece
        word = tf.cumsum(tf.cast(first, tf.int32)) - 1
        first_piece = tf.reshape(tf.cast(tf.where(first), tf.int32), [-1])  # (words,)
        last_piece = tf.concat([first_piece[1:] - 1, tf.reshape(total - 1, [1])], 0)[: tf.shape(first_piece)[0]]
        raw = self.bytes.split(normalized)
        count = _code_point_counts(raw)
        base = tf.gather(tf.cast(raw.row_splits, tf.int32), tf.gather(row, first_piece))
        word_start = tf.cast(tf.gather(starts.flat_values, first_piece), tf.int32)
        word_end = tf.cast(tf.gather(ends.flat_values, last_piece), tf.int32)
        chars = tf.gather(count, base + word_end) - tf.gather(count, base + word_start)  # (words,)
        long_piece = tf.gather(chars > self.max_chars, word)  # (pieces,)
        keep = tf.logical_or(tf.logical_not(long_piece), first)
        kept = tf.reshape(tf.cast(tf.where(keep), tf.int32), [-1])
        new_ids = tf.gather(tf.where(long_piece, self.unknown_id, flat), kept)
        new_starts = tf.gather(starts.flat_values, kept)
        word_ends = tf.gather(tf.gather(ends.flat_values, last_piece), word)
        new_ends = tf.gather(tf.where(long_piece, word_ends, ends.flat_values), kept)
        before = tf.concat([tf.zeros([1], tf.int32), tf.cumsum(tf.cast(keep, tf.int32))], 0)
        splits = tf.gather(before, tf.cast(ids.row_splits, tf.int32))

        def ragged(values):
            return tf.RaggedTensor.from_row_splits(values, splits, validate=False)

        return ragged(new_ids), ragged(new_starts), ragged(new_ends)

    def packed(self, text):
        """`[CLS] pieces [SEP]` padded to the batch's longest row (at most `seq_length`), builtin ops only."""
        ids = self.tokenize(text)[0]
        values = tf.concat([ids.flat_values, tf.zeros([1], tf.int32)], 0)  # a spare entry: no gather from []
        splits = tf.cast(ids.row_splits, tf.int32)
        starts = tf.expand_dims(splits[:-1], 1)  # (batch, 1)
        lengths = tf.expand_dims(tf.minimum(splits[1:] - splits[:-1], self.seq_length - 2), 1)
        return _packed_rows(values, starts, lengths, tf.reduce_max(lengths) + 2, self.cls_id, self.sep_id,
                            self.pad_id)


def _code_point_counts(raw):
    """`count[k]`: the UTF-8 lead bytes among the first `k` bytes of `raw.flat_values` (int32, one more entry)."""
    byte = tf.cast(raw.flat_values, tf.int32)
    lead = tf.cast((byte < 0x80) | (byte >= 0xC0), tf.int32)  # not 10xxxxxx (bitwise ops are no builtins)
    return tf.concat([tf.zeros([1], tf.int32), tf.cumsum(lead)], 0)


def _packed_rows(values, starts, lengths, width, cls_id, sep_id, pad_id):
    """Rows `[CLS] values[start : start + length] [SEP]` padded to `width`: the three int32 inputs."""
    position = tf.expand_dims(tf.range(width, dtype=tf.int32), 0)  # (1, width)
    piece = position - 1
    inside = (piece >= 0) & (piece < lengths)
    index = tf.minimum(starts + tf.maximum(piece, 0), tf.shape(values)[0] - 1)
    word_ids = tf.where(inside, tf.gather(values, index), pad_id)
    word_ids = tf.where(position == 0, cls_id, word_ids)
    word_ids = tf.where(position == lengths + 1, sep_id, word_ids)
    mask = tf.cast(position < lengths + 2, tf.int32)
    return {"input_word_ids": word_ids, "input_mask": mask, "input_type_ids": tf.zeros_like(word_ids)}


def one_text_windows(num_pieces, window, step):
    """`text.windows.piece_windows` for one text, in dense builtin ops: `(index, first, last)` int32 `(windows,)`.

    The same arithmetic (tests hold the two equal on many lengths): a text
    of at most `window` pieces is one window; a longer one windows of
    `window` pieces every `step`, the last reaching its end.
    """
    count = 1 + tf.maximum(num_pieces - window + step - 1, 0) // step
    index = tf.range(count, dtype=tf.int32)
    first = index * step
    return index, first, tf.minimum(first + window, num_pieces)


def one_text_max_context(entry_piece, entry_window, first, last, num_pieces):
    """`text.windows.max_context` in int32 builtin ops: whether each entry is its piece's copy with most context."""
    # `max_context`'s arithmetic term for term, one text (its pieces' positions are its flat indices); a test holds
    # the two equal.
    context = tf.minimum(entry_piece - tf.gather(first, entry_window), tf.gather(last, entry_window) - 1 - entry_piece)
    windows = tf.size(first) + 1
    key = context * windows + (windows - 1 - entry_window)  # more context first, then the earlier window
    best = tf.math.unsorted_segment_max(key, entry_piece, num_pieces)
    return tf.equal(key, tf.gather(best, entry_piece))


def _windows_and_entries(pieces, text, seq_length, stride):
    """One text's (`(1,)` strings) windows in dense builtin ops: the packed inputs of its windows and its entries.

    Returns:
        `(packed, fields)`: `packed`, the three int32 inputs `(windows, width)`
        (`width`: the longest window's pieces + 2); `fields`, per entry (a
        piece in a window, window after window), `(entries,)` each: where
        its score is (`window`, `column` in the window's row) and what it is
        (`char_starts`, `char_ends`, `tokens`, `token_ids`, `piece_index`,
        `primary`).
    """
    ids, starts, ends = pieces.tokenize(text)
    values = ids.flat_values
    num_pieces = tf.shape(values)[0]
    window = seq_length - 2
    index, first, last = one_text_windows(num_pieces, window, window - stride)
    lengths = tf.expand_dims(last - first, 1)  # (windows, 1)
    spare = tf.concat([values, tf.zeros([1], tf.int32)], 0)
    packed = _packed_rows(spare, tf.expand_dims(first, 1), lengths, tf.minimum(num_pieces, window) + 2,
                          pieces.cls_id, pieces.sep_id, pieces.pad_id)
    column = tf.expand_dims(tf.range(tf.minimum(num_pieces, window), dtype=tf.int32), 0)
    entries = tf.cast(tf.where(column < lengths), tf.int32)  # (entries, 2): window, place in it; window after window
    entry_window, place = entries[:, 0], entries[:, 1]
    entry_piece = tf.gather(first, entry_window) + place
    entry_ids = tf.gather(values, entry_piece)
    fields = {
        "char_starts": tf.cast(tf.gather(starts.flat_values, entry_piece), tf.int64),
        "char_ends": tf.cast(tf.gather(ends.flat_values, entry_piece), tf.int64),
        "tokens": tf.gather(pieces.vocabulary, entry_ids),
        "token_ids": entry_ids,
        "window": tf.gather(index, entry_window),
        "column": place + 1,  # after [CLS]
        "piece_index": entry_piece,
        "primary": one_text_max_context(entry_piece, entry_window, first, last, num_pieces),
    }
    return packed, fields


def _one_row(outputs):
    """Per-entry outputs as one text's row `(1, entries, ...)`, with `lengths` `(1,)`: the entries."""
    lengths = tf.reshape(tf.shape(outputs["token_ids"])[0], [1])
    return {**{name: tf.expand_dims(value, 0) for name, value in outputs.items()}, "lengths": lengths}


def _tag_one_text(pieces, serve_ids, text, seq_length, stride):
    """The tagger export's `serving_default` outputs for one text (`(1,)` strings), every window in one call."""
    packed, fields = _windows_and_entries(pieces, text, seq_length, stride)
    scores = serve_ids(**packed)["scores"]  # (windows, width, tags)
    column = fields.pop("column")
    entry_scores = tf.gather_nd(scores, tf.stack([fields["window"], column], axis=1))
    return _one_row({"tag_ids": tf.argmax(entry_scores, axis=-1, output_type=tf.int32), "scores": entry_scores,
                     **fields})


def _windows_of_one_text(pieces, text, seq_length, stride):
    """`windows`: one text's packed windows `(windows, width)` and its entries without their scores, which the
    caller gets from `serve_ids` a few windows at a time (`scores[window, column]`, window after window)."""
    packed, fields = _windows_and_entries(pieces, text, seq_length, stride)
    return {**packed, **_one_row(fields)}


# How far the file's graph may answer from the export's on a probe text: the padded and packed layouts differ by float
# rounding (~1e-6); another tokenization (an edited length, special id or case rule) by far more.
PROBE_TOLERANCE = 1e-3


def probe_texts(vocabulary, tokenizer):
    """Texts that tell how a model tokenizes: one of whole-word tokens longer than `seq_length` (its cut, its
    special ids), the same upper-cased (its case rule), and a short one."""
    suffix = tokenizer.get("suffix_indicator", "##")
    words = [token for token in vocabulary if token.isalpha() and not token.startswith(suffix)][:64] or ["a"]
    long = " ".join(words[i % len(words)] for i in range(tokenizer["seq_length"] + 8))
    return [long, long.upper(), " ".join(words[:3])]


def _reader_pairs(module, loaded, manifest, texts):
    """A reader's probe: the windows of questions and contexts (long ones: several windows each) through the file's
    `pieces` and `serve_ids` and the caller's windowing (`litert_windows`), against the export's `windows`."""
    questions, contexts = [texts[2], texts[1], texts[2]], [texts[0], texts[0], texts[1]]

    def pieces(batch):
        return {name: value.numpy() for name, value in module.pieces(tf.constant(batch)).items()}

    def serve_ids(**packed):
        return {name: value.numpy() for name, value in module.serve_ids(**packed).items()}

    [ours] = window_reads(pieces, serve_ids, questions, contexts, reader_settings(manifest), 1 << 30)
    theirs = loaded.all_windows(questions, contexts)
    same = all(np.array_equal(ours[name], theirs[name][:, : ours[name].shape[1]] if np.ndim(ours[name]) == 2 else
                              theirs[name]) for name in ("example_index", "char_starts", "word_ends", "context_mask"))
    return [(same, ours[name], theirs[name][:, : ours[name].shape[1]]) for name in
            ("start_probabilities", "end_probabilities")]


def check_tokenizes_as_export(module, loaded, manifest, vocabulary):
    """Refuses (an `ExportError`) a file graph that answers probe texts otherwise than the export's own graph.

    The file tokenizes with the manifest's settings (`tokenizer`: length, special
    ids, case, vocabulary); the export with the preprocessor it was written
    with. A manifest edited after the export was written makes them differ.
    """
    kind, texts = manifest["kind"], probe_texts(vocabulary, manifest["tokenizer"])
    try:
        if kind == READER:
            pairs = _reader_pairs(module, loaded, manifest, texts)
        elif kind == TAGGER:
            expected = loaded.tag_pieces(texts)
            got = [{name: value.numpy()[0] for name, value in module.serve(tf.constant([text])).items()}
                   for text in texts]
            pairs = [(np.asarray(b["token_ids"]).tolist() == a["token_ids"][: int(a["lengths"])].tolist(),
                      a["scores"][: int(a["lengths"])], b["scores"]) for a, b in zip(got, expected)]
        else:
            name = OUTPUTS[kind][0]
            theirs = loaded.predict_proba(texts) if name == "probabilities" else loaded.encode(texts)
            ours = module.serve(tf.constant(texts))[name].numpy()
            pairs = [(True, a, b) for a, b in zip(ours, theirs)]
        differ = [not same or np.shape(a) != np.shape(b) or float(np.max(np.abs(a - b), initial=0)) > PROBE_TOLERANCE
                  for same, a, b in pairs]
    except (tf.errors.OpError, ValueError) as error:
        differ, reason = [True], str(error).splitlines()[0][:200]
    else:
        reason = "its answers to probe texts differ from the export's"
    if any(differ):
        raise ExportError(f"The export's manifest (assets.extra/export.json) does not describe how its model "
                          f"tokenizes ({reason}): its `tokenizer` settings were edited after the export was written. "
                          "Restore the file, or export the model again.")
