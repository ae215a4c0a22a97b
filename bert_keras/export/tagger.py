"""The tagger export: a SavedModel from raw strings to per-piece tags with character offsets, and its loader.

`export_tagger` traces the model's own serving computation (a
`BertTokenClassifier`'s `serving_outputs`) on windows of each text's word
pieces, cut in the graph, so that a text longer than the packed length loses
no piece. `load_tagger` reads what it writes and turns the pieces into
entities as transformers' token-classification pipeline does
(`bert_keras.export.entity_groups`), with offsets from the graph: Python
never tokenizes again.
"""

import logging
import os

import tensorflow as tf

from bert_keras._checks import check_int
from bert_keras.dtypes import check_compute_dtype, compute_dtype
from bert_keras.export import warmup
from bert_keras.export._serving import WINDOWS_PER_CALL, XLA_LENGTHS, bucket, in_chunks, pad_to, trim_padding
from bert_keras.export.entity_groups import AGGREGATIONS, check_aggregation
# OUTPUTS: what `serving_default` returns; a directory whose signature lacks one of these is not a tagger export.
from bert_keras.export.kinds.tagger import OUTPUTS, TaggerAnswers, piece_rows
from bert_keras.export.loaded import LoadedExport
from bert_keras.export.manifest import TAGGER
# The kinds of tokenizer whose pieces the loader makes words of (those of text.kinds.TOKENIZER_KINDS), in plain Python.
from bert_keras.text.decoding import DECODINGS

logger = logging.getLogger(__name__)

# The writer's graph (windows, packing, the writer: tensorflow-text and Keras) is imported in the functions that build
# it, where an export is written or a model scored: loading an export imports none of it
# (tests/export/test_loader_imports.py).

# The endpoint that returns how the pieces make words: the tokenizer's kind, its unknown token and (WordPiece) the
# prefix of continuing pieces. An export written before it records them only in assets.extra/labels.json.
DECODING_ENDPOINT = "tokenizer_info"
DECODING_FIELDS = ("tokenizer", "unknown_token", "suffix_indicator")
# Read by an export without the endpoint to check what labels.json says: a word of rare symbols (no vocabulary holds
# all its pieces: the unknown token), a word, and a long one (WordPiece: continuing pieces).
_PROBE_UNKNOWN = "\u2603\U0001f9ff\u2603"
_PROBE = f"{_PROBE_UNKNOWN} a aaaaaaaaaaaaaaaa"


def _check_tagger(model):
    """The model's tokenizer (offsets come from it); a `ValueError` for a model export_tagger cannot serve."""
    from bert_keras.export._writer import tokenizer_kind  # the writer's: see above


    preprocessor = getattr(model, "preprocessor", None)
    tokenizer = getattr(preprocessor, "tokenizer", None)
    outputs = getattr(model, "outputs", None) or [None]
    if not callable(getattr(model, "serving_outputs", None)) or len(getattr(outputs[0], "shape", ())) != 3:
        raise ValueError(f"Received a model of type {type(model).__name__}; export_tagger exports a "
                         "BertTokenClassifier. Build it with BertTokenClassifier(...) or "
                         "BertTokenClassifier.from_checkpoint(...).")
    if getattr(model, "text_pairs", False):
        raise ValueError("Received a tagger of text pairs; export_tagger serves single texts (build the "
                         "BertTokenClassifier with text_pairs=False).")
    if not callable(getattr(tokenizer, "tokenize_with_char_offsets", None)) or not isinstance(
            getattr(preprocessor, "seq_length", None), int):
        raise ValueError(
            f"Received a tagger whose preprocessor is {type(preprocessor).__name__}; export_tagger needs a "
            "BertPreprocessor (its tokenizer, WordPiece, SentencePiece or byte-level BPE, gives each piece's "
            "characters in the raw text, which a Hub preprocess module does not). Build the tagger with "
            "BertTokenClassifier.from_checkpoint(...) or preprocessor=BertPreprocessor(vocab_file)."
        )
    max_length = getattr(getattr(model, "encoder", None), "max_sequence_length", None)
    if isinstance(max_length, int) and preprocessor.seq_length > max_length:
        raise ValueError(
            f"Received an invalid value for argument `model`: its preprocessor packs windows of "
            f"seq_length={preprocessor.seq_length} pieces, expected at most the encoder's "
            f"max_sequence_length={max_length} (its positions: a longer window cannot be served). Build the tagger "
            f"with BertPreprocessor(..., seq_length={max_length}) or less. Received: seq_length={preprocessor.seq_length}"
        )
    tokenizer_kind(tokenizer)
    return tokenizer


def _tag_pieces(model, tokenizer, vocabulary, texts, stride, xla, windows_per_call=WINDOWS_PER_CALL):
    """`serving_default`'s computation: texts -> the dict of `OUTPUTS`, `(batch, entries)` each (see export_tagger)."""
    from bert_keras.text.packer import pieces_of_words  # the writer's graph: see above
    from bert_keras.text.windows import max_context, piece_windows


    window = model.preprocessor.seq_length - 2
    ids, starts, ends = (pieces_of_words(x) for x in tokenizer.tokenize_with_char_offsets(texts))  # (batch, (pieces))
    text, index, first, last = piece_windows(ids.row_lengths(), window, window - stride)
    positions = tf.ragged.range(first, last)  # (windows, (pieces)): the piece's index within its text
    entry_window = positions.value_rowids()  # (entries,)
    entry_text = tf.gather(text, entry_window)
    entry_piece = positions.flat_values + tf.gather(ids.row_starts(), entry_text)  # index into the flat pieces
    entry_ids = tf.gather(ids.flat_values, entry_piece)
    entry_scores = _entry_scores(model, tokenizer, positions.with_flat_values(entry_ids), window + 2, xla,
                                 windows_per_call)
    values = {
        "tag_ids": (tf.argmax(entry_scores, axis=-1, output_type=tf.int32), -1),
        "scores": (entry_scores, 0.0),
        "char_starts": (tf.gather(starts.flat_values, entry_piece), -1),
        "char_ends": (tf.gather(ends.flat_values, entry_piece), -1),
        "tokens": (tf.gather(vocabulary, entry_ids), ""),
        "token_ids": (entry_ids, -1),
        "window": (tf.cast(tf.gather(index, entry_window), tf.int32), -1),
        "piece_index": (tf.cast(positions.flat_values, tf.int32), -1),
        "primary": (max_context(entry_piece, positions.flat_values, entry_window, first, last,
                                tf.size(ids.flat_values)), False),
    }
    batch = tf.shape(texts, out_type=tf.int64)[0]
    # `entry_text` is sorted and below `batch` by construction (windows text after text): unchecked, each output
    # carries no assertions, whose conditionals were 64 of the 156 functions a load made into graphs.
    outputs = {name: tf.RaggedTensor.from_value_rowids(value, entry_text, nrows=batch, validate=False).to_tensor(default)
               for name, (value, default) in values.items()}
    outputs["lengths"] = tf.cast(tf.math.bincount(tf.cast(entry_text, tf.int32), minlength=tf.cast(batch, tf.int32)),
                                 tf.int32)
    return outputs


def _entry_scores(model, tokenizer, window_ids, length, xla, windows_per_call):
    """Every entry's tag probabilities, float32 `(entries, num_classes)`, the model run on a few windows at a time.

    `window_ids` `(windows, (pieces))` holds each window's piece ids, its
    entries in order. The model runs on `windows_per_call` windows per call,
    one call after another (a `tf.while_loop`): the activations held at once
    are one call's, however long the text, and each call keeps only its
    entries' probabilities.
    """
    from bert_keras.text.packer import pack_inputs  # the writer's graph: see above


    count = window_ids.nrows()  # int64
    single = tf.equal(count, 1)

    def run(begin, end):
        rows = window_ids[begin:end]  # (chunk, (pieces))
        packed = trim_padding(pack_inputs([rows], length, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id))
        logits = tf.cast(_run_model(model, packed, xla, single), tf.float32)  # (chunk, length, num_classes)
        row = rows.value_rowids()  # (chunk entries,)
        column = tf.range(tf.size(row, out_type=tf.int64)) - tf.gather(rows.row_starts(), row)
        # Each entry's row of its window's outputs: after [CLS], at its place in the window.
        return {"scores": tf.nn.softmax(tf.gather_nd(logits, tf.stack([row, column + 1], axis=1)), axis=-1)}

    specs = {"scores": (tf.float32, [None, model.num_classes])}
    return in_chunks(run, count, specs, windows_per_call)["scores"]  # (entries, num_classes), window after window


def _run_model(model, packed, xla, single):
    """The model's float32 logits on the packed windows; with `xla`, a text's only window of a few pieces compiled."""
    if xla is None:
        return model.serving_outputs(packed)
    shape = tf.shape(packed["input_mask"])  # (windows, length)
    small = tf.logical_and(single, shape[1] <= XLA_LENGTHS[-1])
    return tf.cond(small, lambda: xla(pad_to(packed, bucket(shape[1])))[:, : shape[1]],
                   lambda: model.serving_outputs(packed))


def export_tagger(model, export_dir, tag_names=None, overwrite=False, extra_assets=None, dtype="float32",
                  stride=None, xla=False, aggregation="first"):
    """Exports a tagger (named entities) as a SavedModel from raw strings to per-piece tags and character offsets.

    The `serving_default` signature takes a `(batch,)` string tensor `text`
    and returns, per text, one entry per word piece of each window (below),
    padded to the batch's longest row:

    - `tag_ids` int32 `(batch, entries)`: the most probable tag (-1: padding);
    - `scores` float32 `(batch, entries, num_tags)`: every tag's probability
      (a softmax of the model's logits);
    - `char_starts`, `char_ends` int64: the piece's code point span in the
      text as given (`text[start:end]` in Python; -1: padding);
    - `tokens` (string) and `token_ids` (int32): the piece;
    - `window` int32: the window the entry comes from (0, 1, ...; -1: padding);
    - `piece_index` int32: the piece's place among the text's pieces;
    - `primary` bool: the one copy of each piece to read (below);
    - `lengths` int32 `(batch,)`: the entries of each text.

    A text of at most `seq_length - 2` pieces (the preprocessor's length
    less `[CLS]` and `[SEP]`) is one window: its entries are its pieces, in
    order, all primary. A longer one is not truncated: it is cut into windows
    of `seq_length - 2` pieces starting every `seq_length - 2 - stride`
    pieces (the last reaching the end), as transformers' tokenizers cut
    overflowing tokens with `stride` (the token-classification pipeline's
    `stride=`), each run through the model as a text of its own; the entries
    list window after window, so a piece in `stride` pieces of overlap
    appears once per window. Its `primary` copy is the one with the most
    pieces around it in its window (the fewer of those to its left and to
    its right; ties: the earlier window), BERT's "max context" rule: keep
    the entries where `primary` is true for one prediction per piece.
    `load_tagger` aggregates each window and merges overlapping entities,
    as the pipeline does. The model runs on `WINDOWS_PER_CALL` (64) windows
    at a time, one call after another: however long a text, the model's
    activations held at once are those of 64 windows (what grows with the
    text is its pieces and their outputs). `tag_names()` returns the tags,
    and `tokenizer_info()` how the pieces make words (`tokenizer`: its kind;
    `unknown_token`; `suffix_indicator`: WordPiece's prefix of continuing
    pieces, else empty), which `load_tagger` reads from the graph, never
    from the editable copy in the manifest (`assets.extra/export.json`).

    Every batch runs op by op on its windows' longest row. With `xla` (float32
    only), a batch of one text that fits one window runs XLA-compiled instead,
    padded to its length bucket (8 to 64 pieces in steps of 8, compiled on
    first use; the warm-up file covers each). Measured on MiniLM-L6 it saved
    at most a few milliseconds per warm request (none in one of two runs)
    and cost ~4 s of compiling per bucket (`load_tagger`'s warm-up: 32-36 s
    instead of 3-8 s; docs/token_tasks.md), so it is off by default.

    Args:
        model: a `BertTokenClassifier` with a `BertPreprocessor`.
        export_dir: str. Written to a temporary sibling and moved into place.
        tag_names: list of str, in the order of the model's outputs. Defaults
            to the model's `label_names`; required when it has none.
        overwrite: bool. Replace an existing `export_dir` (a tagger written by
            bert_keras). Defaults to `False`.
        extra_assets: optional dict of file name -> JSON-serialisable value (or
            `bytes`), written to `assets.extra/`.
        dtype: str. `"float32"`, or `"bfloat16"` (Keras' `mixed_bfloat16`;
            float32 outputs). Defaults to `"float32"`.
        stride: optional int. Pieces shared by consecutive windows, from 0 to
            `seq_length - 3`. Defaults to a quarter of the window,
            `(seq_length - 2) // 4`.
        xla: bool. Compile the single-text path (float32 only), for a server
            that loads once and answers one text at a time. Defaults to `False`.
        aggregation: str. How the loader groups pieces into entities by
            default (`ExportedTagger.predict`), recorded in the manifest:
            the strategy the tagger was trained for. `"first"` (each word
            tagged by its first piece) for a tagger trained on first pieces,
            as `finetune_tagger` and transformers' token-classification
            examples train; `"simple"` tags pieces one by one and can cut an
            entity inside a word (`Bi` + `##eber`). Defaults to `"first"`.

    Returns:
        `export_dir`.
    """
    from bert_keras.export._writer import output_names  # the writer's: see above
    from bert_keras.text.windows import check_stride


    export_dir = os.fspath(export_dir)
    check_compute_dtype(dtype)
    check_aggregation(aggregation)
    tokenizer = _check_tagger(model)
    stride = check_stride(stride, model.preprocessor.seq_length)
    tag_names = output_names(model, tag_names, "tag_names", "the tags",
                             "export_tagger(model, export_dir, ['O', 'B-PER', 'I-PER'])")
    if len(tag_names) != model.num_classes or len(set(tag_names)) != len(tag_names):
        raise ValueError(f"Received an invalid value for argument `tag_names`, expected {model.num_classes} distinct "
                         f"names (the model's outputs). Received: tag_names={tag_names!r}")
    with compute_dtype(model, dtype):
        _write_export(model, tokenizer, export_dir, tag_names, overwrite, extra_assets, dtype, stride,
                      xla and dtype == "float32", aggregation)
    logger.info("Exported the tagger to %s", export_dir)
    return export_dir


def _write_export(model, tokenizer, export_dir, tag_names, overwrite, extra_assets, dtype, stride, xla, aggregation):
    from bert_keras.export._writer import ids_endpoints, tokenizer_kind, write_export  # the writer's: see above

    names, vocabulary = tf.constant(tag_names), tf.constant(list(tokenizer.vocabulary))
    compiled = tf.function(model.serving_outputs, jit_compile=True, reduce_retracing=True) if xla else None
    signature = [tf.TensorSpec([None], tf.string, name="text")]
    kind = tokenizer_kind(tokenizer)
    decoding = {"tokenizer": kind, "unknown_token": tokenizer.unknown_token,
                "suffix_indicator": getattr(tokenizer, "suffix_indicator", "")}
    # How the loader makes words of the pieces, kept in the graph: the manifest is an editable copy.
    constants = {name: tf.constant(value) for name, value in decoding.items()}

    def scores(packed, padded=False):  # (batch, seq, num_classes)
        return {"scores": tf.nn.softmax(model.serving_outputs(packed, padded=padded), axis=-1)}

    requests = warmup.warmup_requests(model.preprocessor, ["text"], XLA_LENGTHS)
    # One text of three windows: the windowed path (and a cut at a window's end) warmed up too.
    requests.append({"text": [" ".join(["a"] * (2 * model.preprocessor.seq_length))]})
    write_export(
        model, export_dir, kind=TAGGER, overwrite=overwrite, extra_assets=extra_assets, warmup_requests=requests,
        endpoints=[("serve", lambda texts: _tag_pieces(model, tokenizer, vocabulary, texts, stride, compiled), signature),
                   ("tag_names", lambda: names, []), (DECODING_ENDPOINT, lambda: constants, []),
                   *ids_endpoints(scores, lambda packed: scores(packed, padded=True))],
        preprocessor=model.preprocessor,
        settings={"tag_names": tag_names, "inputs": ["text"], "dtype": dtype, "stride": stride,
                  "seq_length": model.preprocessor.seq_length, "aggregation": aggregation},  # `tokenizer`: the writer's, from the preprocessor
    )


def pieces_in_batches(serve, texts, batch_size=32):
    """`serve` (strings -> the padded dict of `OUTPUTS`) over `texts` in batches: one dict per text, padding cut."""
    batch_size = check_int("batch_size", batch_size, minimum=1)
    rows = []
    for begin in range(0, len(texts), batch_size):
        outputs = serve(tf.constant(texts[begin : begin + batch_size], tf.string))
        rows.extend(piece_rows({name: value.numpy() for name, value in outputs.items()}))
    return rows


def serving_pieces(model, stride=None):
    """The export's computation on a model in memory: `tag_pieces(texts, batch_size)` as `ExportedTagger`'s.

    What a fine-tune scores its tagger with, so that the F1 it reports is the
    F1 of the path its export serves (the same windows, the same reading of
    each piece's primary copy).
    """
    from bert_keras.text.windows import check_stride  # the writer's graph: see above


    tokenizer = _check_tagger(model)
    stride = check_stride(stride, model.preprocessor.seq_length)
    vocabulary = tf.constant(list(tokenizer.vocabulary))
    serve = tf.function(lambda texts: _tag_pieces(model, tokenizer, vocabulary, texts, stride, None),
                        input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    return lambda texts, batch_size=32: pieces_in_batches(serve, texts, batch_size)


def word_tags(pieces, word_starts, tag_names):
    """Each word's tag: the tag of its first piece (as a tagger is trained); `O` for a word without pieces.

    `pieces` is one text's `tag_pieces` (of an over-long text, each piece's
    `primary` copy is read); a word's first piece is the one that starts at
    the word's first character (words are joined by single spaces, so a
    word's pieces start inside it).
    """
    first = {}
    for start, tag, primary in zip(pieces["char_starts"], pieces["tag_ids"], pieces["primary"]):
        if primary:
            first.setdefault(int(start), tag_names[int(tag)])
    return [first.get(start, "O") for start in word_starts]


def sentence_tags(tag_pieces, sentences, tag_names, batch_size=32):
    """Each word's tag for sentences of words: the words joined by single spaces, tagged, read by `word_tags`.

    `tag_pieces` is an export's (`ExportedTagger.tag_pieces`) or a model's
    (`serving_pieces`): a fine-tune's test score and `bert-keras evaluate`
    read the tags one way.
    """
    from bert_keras.text.alignment import join_words  # tensorflow-text: see above (reports, not answers)


    joined = [join_words(words) for words in sentences]
    pieces = tag_pieces([text for text, _, _ in joined], batch_size=batch_size)
    return [word_tags(piece, starts, tag_names) for piece, (_, starts, _) in zip(pieces, joined)]


class ExportedTagger(TaggerAnswers, LoadedExport):
    """A loaded tagger export: raw strings in; per text its entities, with their exact characters, out.

    Reads a directory written by `export_tagger`; another kind of export is
    refused with the loader that serves it, anything else with a `ValueError`
    saying what was found, and so is a manifest edited to say that the
    pieces make words otherwise than the export's graph does.

    Args:
        export_dir: str. The SavedModel directory.
        warm_up: `"background"`, `True` or `False`: the export's TF Serving
            warm-up requests replayed in a thread, before returning, or not at
            all (see `LoadedExport`). Defaults to `"background"`.

    Example (`tagger` is a `BertTokenClassifier` with tags `O`, `B-PER`, `I-PER`):

    ```python
    export_tagger(tagger, "ner")
    load_tagger("ner").predict("Ada Lovelace wrote")
    # [{'entity_group': 'PER', 'score': 0.98, 'word': 'ada lovelace', 'start': 0, 'end': 12}]
    ```
    """

    kind = TAGGER
    expected = f"a `serving_default` signature from a string tensor `text` to per-piece {', '.join(OUTPUTS)}"

    def _check_signatures(self):
        self._signature = self.serving_signature()
        outputs = self._signature.structured_outputs
        _, inputs = self._signature.structured_input_signature
        missing = [name for name in OUTPUTS if name not in outputs]
        if missing or list(inputs) != ["text"] or not hasattr(self._saved, "tag_names"):
            found = {name: f"{spec.dtype.name} {spec.shape}" for name, spec in outputs.items()}
            raise self._refuse(f"its inputs are {sorted(inputs)} and its outputs {found}")
        self.tag_names = [name.decode("utf-8") for name in self._saved.tag_names().numpy()]
        self.aggregation = self.setting("aggregation", "simple")  # exports before it recorded one served "simple"
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"The manifest of {self.export_dir} records aggregation={self.aggregation!r}; expected one "
                             f"of {', '.join(AGGREGATIONS)}. Restore the file, or export the tagger again.")
        self.num_tags = len(self.tag_names)
        decoding = self._decoding()
        self.tokenizer_kind = decoding["tokenizer"]
        self._unknown_token, self._suffix_indicator = decoding["unknown_token"], decoding["suffix_indicator"]

    def _decoding(self):
        """How the pieces make words: `{tokenizer, unknown_token, suffix_indicator}`, what the export was written with.

        An export of this version carries them in its graph (`tokenizer_info()`),
        which is the truth: the manifest is a copy for people and other tools,
        and a copy that disagrees means the export was edited after it was
        written (refused). One written before records them only in
        `labels.json`: read there, and checked against what its own graph does
        with a probe text (its kind, its unknown token, WordPiece's prefix).
        """
        where = f"The manifest of {self.export_dir}"
        recorded = self._recorded_decoding()
        kind = recorded["tokenizer"] or "wordpiece"  # written before the family: none recorded, WordPiece
        if kind not in DECODINGS:
            raise ValueError(f"{where} records a tokenizer of kind {kind!r}; this version of bert_keras reads "
                             f"{', '.join(DECODINGS)}. Export the tagger again with it.")
        if hasattr(self._saved, DECODING_ENDPOINT):
            decoding = {name: value.numpy().decode("utf-8")
                        for name, value in getattr(self._saved, DECODING_ENDPOINT)().items()}
            for name in DECODING_FIELDS:
                if recorded[name] is not None and recorded[name] != decoding[name]:
                    raise ValueError(
                        f"{where} records {name}={recorded[name]!r}, but the SavedModel was exported with "
                        f"{name}={decoding[name]!r} (its `{DECODING_ENDPOINT}()`: how its pieces make words): the "
                        "export was modified after it was written. Restore the file, or export the tagger again.")
            return decoding
        decoding = {"tokenizer": kind, "unknown_token": recorded["unknown_token"] or "[UNK]",
                    "suffix_indicator": "##" if recorded["suffix_indicator"] is None else recorded["suffix_indicator"]}
        for name, value in decoding.items():
            if not isinstance(value, str) or not value:
                raise ValueError(f"{where} records {name}={value!r}; expected a non-empty string. Restore the file, "
                                 "or export the tagger again.")
        found = self._probed_decoding()
        for name, value in found.items():
            if value != decoding[name]:
                said = (f"records {name}={decoding[name]!r}" if recorded[name] is not None else
                        f"records no {name} (read as {decoding[name]!r}, as an export written before the family)")
                raise ValueError(
                    f"{where} {said}, but the export's own tokenizer gives {name}={value!r} (its pieces of a "
                    "probe text): the file was modified after the export was written. Restore it, or export the "
                    "tagger again.")
        return decoding

    def _recorded_decoding(self):
        """What the manifest says of `DECODING_FIELDS` (None where it says nothing): its `tokenizer` entry, or an
        older export's `labels.json` fields."""
        tokenizer = self.setting("tokenizer")
        if isinstance(tokenizer, dict):  # this version's manifest: how the preprocessor tokenizes
            return {"tokenizer": tokenizer.get("kind"), "unknown_token": tokenizer.get("unknown_token"),
                    "suffix_indicator": tokenizer.get("suffix_indicator")}
        return {"tokenizer": tokenizer, "unknown_token": self.setting("unknown_token"),
                "suffix_indicator": self.setting("suffix_indicator")}

    def _probed_decoding(self):
        """What the graph's pieces of `_PROBE` show of the fields an older export records only in labels.json.

        SentencePiece marks a word's start with "▁", byte-level BPE with "Ġ"
        (a space's byte), WordPiece with neither. WordPiece's and
        SentencePiece's piece of the word of rare symbols is their unknown
        token; a WordPiece piece longer than its characters begins with the
        prefix of continuing pieces. A field the probe cannot show is left out.
        """
        from bert_keras.text.kinds import kind_of_pieces  # every tokenizer class (Keras): older exports only


        pieces = self.tag_pieces([_PROBE])[0]
        tokens = pieces["tokens"]
        spans = [_PROBE[start:end] for start, end in zip(pieces["char_starts"], pieces["char_ends"])]
        kind = kind_of_pieces(tokens)
        found = {"tokenizer": kind}
        if kind == "wordpiece" and tokens:
            if spans[0] == _PROBE_UNKNOWN and tokens[0] != spans[0]:
                found["unknown_token"] = tokens[0]
            prefixes = {token[: len(token) - len(span)] for token, span in zip(tokens[1:], spans[1:])
                        if len(token) > len(span) and token.endswith(span)}
            if len(prefixes) == 1:
                found["suffix_indicator"] = prefixes.pop()
        return found

    def _piece_batch(self, texts):
        return piece_rows(self.run("serving_default", text=texts))

    def _instantiate(self):
        self._signature(text=tf.constant(["a"]))

    def tag_words(self, sentences, batch_size=32):
        """Each word's tag (its first piece's, as the tagger is trained) for sentences of words: see `word_tags`."""
        return sentence_tags(self.tag_pieces, sentences, self.tag_names, batch_size)


# The name of earlier versions.
TextTagger = ExportedTagger


def load_tagger(export_dir, warm_up="background"):
    """Loads a tagger export (see `ExportedTagger`), registering tensorflow-text's ops first.

    Plain `tf.saved_model.load(export_dir)` needs `import tensorflow_text`
    first; its `signatures["serving_default"]` gives the per-piece outputs
    that `ExportedTagger.predict` aggregates.
    """
    return TextTagger(export_dir, warm_up=warm_up)


__all__ = ["AGGREGATIONS", "ExportedTagger", "TextTagger", "export_tagger", "load_tagger"]
