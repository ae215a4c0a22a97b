"""SentencePieceTokenizer (ALBERT, in the graph) against ALBERT's own definition.

The reference is ALBERT's preprocessing in Python (`albert_reference_text`, as google-research/albert's
`preprocess_text`) and the `sentencepiece` library's `encode`: transformers 5 cannot read a `spiece.model` in the
test environment (its protobuf is older than the model reader needs). A tiny ALBERT-style unigram model (`<pad>`,
`<unk>`, `[CLS]`, `[SEP]`, `[MASK]` as ids 0-4) is trained on 10,000 tweets here.
"""

import io
import json
import os
import random
import struct
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from bert_keras.text import BertPreprocessor, SentencePieceTokenizer
from bert_keras.text.sentencepiece import _ends_with
from bert_keras.text.unigram import UnigramSegmenter, _varint, read_pieces
from tests.helpers import ids_per_row

spm = pytest.importorskip("sentencepiece")

# Accents (composed and combining), emoji, CJK, control characters, whitespace runs, tabs and newlines, the empty
# string, over-long text, zero-width characters, ALBERT's quotes, case-dependent letters, NFKD expansions.
EDGE_CASES = [
    "", " ", "\t\n ", "a", "  Héllo\t ``World''  ", "```x''''y'", "héllo café naïve É", "e\u0301te\u0300 \u0301x",
    "😀 👨\u200d👩\u200d👧 🇫🇷", "中文字符 日本語 한국어", "x\x00y\x01z\x7f\x9f", "zero\u200bwidth\u200c\u200d\ufeff",
    "nbsp\u00a0x\u3000y\u2009z\u202f\x1c", "ﬁne Ｆｕｌｌ ½ x² ㎏", "ΟΔΟΣ İstanbul ǅ", "1,000,000 ok 5,",
    "x" * 3000, "word " * 600, "\ufffd invalid", "a\r\nb\x0bc\x0cd", "[MASK] [CLS] <pad>",
]


def albert_reference_text(text, lower_case=True, keep_accents=False):
    """ALBERT's `preprocess_text` (google-research/albert, transformers' AlbertTokenizer)."""
    text = " ".join(text.strip().split()).replace("``", '"').replace("''", '"')
    if not keep_accents:
        text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return text.lower() if lower_case else text


@pytest.fixture(scope="module")
def proto(tweets):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([albert_reference_text(t) for t in tweets[:10_000] if t.strip()]),
        model_writer=model, vocab_size=2000, model_type="unigram", pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], user_defined_symbols=["(", ")", '"', "-", ".", "–", "£", "€"],
        character_coverage=0.9995, minloglevel=2, num_threads=1,
    )
    return model.getvalue()


@pytest.fixture(scope="module")
def reference(proto):
    return spm.SentencePieceProcessor(model_proto=proto)


@pytest.fixture(scope="module")
def tokenizer(proto):
    return SentencePieceTokenizer(proto)


def _ids(tokenizer, texts):
    return ids_per_row(tokenizer.tokenize(tf.constant(texts)))


def _differences(tokenizer, reference, texts, **options):
    """The texts whose ids differ from the reference's."""
    ours = _ids(tokenizer, texts)
    expected = [reference.encode(albert_reference_text(t, **options), out_type=int) for t in texts]
    return [text for text, a, b in zip(texts, ours, expected) if a != b]


def test_ids_equal_albert_on_tweets_and_edge_cases(tokenizer, reference, tweets):
    assert _differences(tokenizer, reference, EDGE_CASES) == []
    assert _differences(tokenizer, reference, tweets[-300:]) == []


def test_ties_broken_as_the_sentencepiece_library_does(tokenizer, reference):
    """Paths equal up to float rounding: tensorflow-text's bundled encoder gives "00" "0" for "000" where the
    library (0.2.3) gives "0" "00", and the order depends on the score of the text before (`unigram.py`)."""
    texts = ["300,000 miles", "1,000,000 ok 5,", "so far 300,000 m", "yes.  sorrrrrry.  rt", "@zzzach_scott: see"]
    assert _differences(tokenizer, reference, texts) == []
    pieces = [reference.id_to_piece(i) for i in _ids(tokenizer, ["300,000 miles"])[0]]
    assert pieces[-3:-1] == ["0", "00"]


def _scaled_scores(proto, factor):
    """`proto` with every piece's score multiplied by `factor` (its float32 fields rewritten in place)."""
    out = bytearray(proto)
    for number, wire, start, end in _field_spans(proto, 0, len(proto)):
        if (number, wire) == (1, 2):  # a SentencePiece
            for field, kind, at, _ in _field_spans(proto, start, end):
                if (field, kind) == (2, 5):  # its score
                    out[at : at + 4] = struct.pack("<f", struct.unpack("<f", proto[at : at + 4])[0] * factor)
    return bytes(out)


def _field_spans(data, at, end):
    """(number, wire type, value start, value end) of each field of the message in `data[at:end]`."""
    while at < end:
        key, at = _varint(data, at)
        wire = key & 7
        if wire == 0:
            start, at = at, _varint(data, at)[1]
        elif wire == 2:
            size, start = _varint(data, at)
            at = start + size
        else:
            start, at = at, at + (4 if wire == 5 else 8)
        yield key >> 3, wire, start, at


@pytest.mark.slow
def test_score_reset_of_long_texts(proto, tweets):
    """The library subtracts the best score from the positions it has reached once it passes +-100,000 (about
    10,000 pieces of a real model). With scores 300 times larger it happens every 30 pieces or so; segmenting
    these tweets without it gives other ids for 2 of them (checked with a Python transcription of the library)."""
    scaled = _scaled_scores(proto, 300.0)
    reference = spm.SentencePieceProcessor(model_proto=scaled)
    assert reference.get_score(100) == pytest.approx(300 * spm.SentencePieceProcessor(model_proto=proto).get_score(100))
    assert _differences(SentencePieceTokenizer(scaled), reference, tweets[-3000:] + EDGE_CASES) == []
    with pytest.raises(ValueError, match=r"`proto`.*has the score -7016\.97: scores this large are not supported"):
        SentencePieceTokenizer(_scaled_scores(proto, 3000.0))


def test_reads_the_model_as_the_library_does(proto, reference):
    pieces = read_pieces(proto)
    assert [piece for piece, _, _ in pieces] == [reference.id_to_piece(i) for i in range(reference.get_piece_size())]
    assert [float(score) for _, score, _ in pieces] == [reference.get_score(i) for i in range(len(pieces))]
    assert [i for i, (_, _, kind) in enumerate(pieces) if kind == 2] == [reference.unk_id()]
    assert [i for i, (_, _, kind) in enumerate(pieces) if kind == 3] == [
        i for i in range(len(pieces)) if reference.is_control(i)
    ]


def test_byte_fallback_models_are_refused(tweets):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(tweets[:2000]), model_writer=model, vocab_size=400, model_type="unigram",
        byte_fallback=True, minloglevel=2, num_threads=1,
    )
    with pytest.raises(ValueError, match="`proto`.*byte-fallback models are not supported"):
        SentencePieceTokenizer(model.getvalue())


@pytest.mark.slow  # 7 s in the full run of 450d6b9
def test_options_of_tokenizer_config(proto, reference, tmp_path):
    (tmp_path / "spiece.model").write_bytes(proto)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "keep_accents": True}))
    cased = SentencePieceTokenizer.from_folder(tmp_path)
    assert (cased.lower_case, cased.keep_accents) == (False, True)
    texts = ["Héllo CAFÉ e\u0301", "ΟΔΟΣ İstanbul"] + [text for text in EDGE_CASES if not text.startswith("1,000")]
    assert _differences(cased, reference, texts, lower_case=False, keep_accents=True) == []
    assert _ids(cased, ["Café"]) != _ids(SentencePieceTokenizer(proto), ["Café"])
    with pytest.raises(ValueError, match=r"`path`.*has no spiece.model"):
        SentencePieceTokenizer.from_folder(tmp_path / "missing")


def test_char_offsets(tokenizer, reference, tweets):
    text = "  Héllo\t ``World''  ﬁne"
    ids, starts, ends = (x.merge_dims(1, 2).to_list()[0] for x in tokenizer.tokenize_with_char_offsets([text]))
    spans = [(reference.id_to_piece(i), text[s:e]) for i, s, e in zip(ids, starts, ends)]
    # The accent, the collapsed whitespace, the quote pairs and the ligature map back to the raw text.
    assert spans == [("▁hello", "Héllo"), ("▁", ""), ('"', "``"), ("world", "World"), ('"', "''"), ("▁fine", "ﬁne")]
    # On tweets: every piece's span, preprocessed, holds the piece (without its "▁").
    texts = tweets[-300:] + EDGE_CASES
    ids, starts, ends = (ids_per_row(x) for x in tokenizer.tokenize_with_char_offsets(texts))
    checked = 0
    for text, row_ids, row_starts, row_ends in zip(texts, ids, starts, ends):
        for i, s, e in zip(row_ids, row_starts, row_ends):
            piece = reference.id_to_piece(i).lstrip("▁")
            if i == reference.unk_id() or not piece:
                continue
            assert piece in reference.normalize(albert_reference_text(text[s:e])), (text, piece, text[s:e])
            checked += 1
    assert checked > 5000


def test_words_and_albert_packing(tokenizer, reference):
    words = tokenizer.tokenize(tf.constant(["hello world"])).to_list()[0]
    assert ["".join(reference.id_to_piece(i) for i in word) for word in words] == ["▁hello", "▁world"]
    assert tokenizer.get_special_tokens_dict() == {
        "vocab_size": 2000, "start_of_sequence_id": 2, "end_of_segment_id": 3, "padding_id": 0, "mask_id": 4,
    }
    preprocessor = BertPreprocessor(tokenizer=tokenizer, seq_length=12)
    out = preprocessor([tf.constant(["hello world"]), tf.constant(["ok"])])
    a, b = (reference.encode(t) for t in ("hello world", "ok"))
    assert out["input_word_ids"].numpy().tolist() == [[2, *a, 3, *b, 3] + [0] * (12 - len(a) - len(b) - 3)]
    assert out["input_type_ids"].numpy().tolist() == [[0] * (len(a) + 2) + [1] * (len(b) + 1) + [0] * (9 - len(a) - len(b))]


@pytest.mark.slow  # 6 s in the full run of 450d6b9
def test_config_round_trip_and_bad_proto(tokenizer):
    restored = SentencePieceTokenizer.from_config(tokenizer.get_config())
    texts = tf.constant(["Round trip, café 😀"])
    assert restored.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()
    with pytest.raises(ValueError, match="`proto`.*not a SentencePiece model"):
        SentencePieceTokenizer(b"not a model")
    with pytest.raises(ValueError, match=r"`cls_token`.*<s>.*lacks"):
        SentencePieceTokenizer(tokenizer.proto, cls_token="<s>")


@pytest.mark.slow
def test_ids_equal_albert_on_20000_tweets(tokenizer, reference, tweets):
    """Every id equal, ties included (before `unigram.py`: 124 of these 20,000 differed, all ties)."""
    assert _differences(tokenizer, reference, tweets[-20_000:]) == []


@pytest.mark.slow  # 4 s in the full run of 450d6b9
def test_keeps_working_after_the_eager_kernel_cache_is_cleared(proto):
    """tensorflow-text's model is a resource owned by its op's kernel; `set_random_seed` clears the eager kernels.
    Made eagerly at construction, it was gone: "Resource ... SentencepieceOp ... does not exist"."""
    tokenizer = SentencePieceTokenizer(proto)
    before = tokenizer.tokenize(tf.constant(["hello world"])).to_list()
    tf.random.set_seed(7)
    assert tokenizer.tokenize(tf.constant(["hello world"])).to_list() == before


@pytest.mark.slow  # 7 s in the full run of 450d6b9
def test_saved_model_serves_the_same_ids(tokenizer, tmp_path):
    preprocessor = BertPreprocessor(tokenizer=tokenizer, seq_length=12)
    texts = tf.constant(["Hello there, café 😀", "x\x00y"])
    expected = {key: value.numpy().tolist() for key, value in preprocessor(texts).items()}
    module = tf.Module()
    module.preprocessor = preprocessor
    module.serve = tf.function(lambda x: preprocessor(x), input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    assert {key: value.numpy().tolist() for key, value in loaded.serve(texts).items()} == expected


def test_the_byte_comparison_of_piece_ends_is_substr(tmp_path):
    """`_ends_with` (a flat array of bytes) answers what `tf.strings.substr` of a copy of the text per piece did."""
    rng = random.Random(0)
    texts = ["", "héllo wörld", "a" * 40, "▁x ▁y", "日本語 ok"]
    rows, ends, bodies = [], [], []
    for _ in range(400):
        row = rng.randrange(len(texts))
        data = texts[row].encode("utf-8")
        end = rng.randint(0, len(data))
        start = rng.randint(max(0, end - 6), end)
        body = data[start:end] if rng.random() < 0.6 else bytes(rng.choice(b"ahlo\xc3\xa9") for _ in range(end - start))
        rows.append(row), ends.append(end), bodies.append(body if rng.random() < 0.9 else body + b"x")
    text, body = tf.constant(texts), tf.constant(bodies)
    rows, ends = tf.constant(rows, tf.int64), tf.constant(ends, tf.int64)
    body_bytes = tf.cast(tf.strings.length(body), tf.int64)
    expected = tf.strings.substr(tf.gather(text, rows), tf.maximum(ends - body_bytes, 0), body_bytes) == body
    fits = ends >= body_bytes  # where the piece is shorter than its end (the only case `same` reads)
    ours = _ends_with(text, rows, ends, body, body_bytes)
    assert (ours & fits).numpy().tolist() == (expected & fits).numpy().tolist()
    assert 100 < int(tf.reduce_sum(tf.cast(ours & fits, tf.int32))) < 400


# Tokenizes one line of `sys.argv[2]` characters with the model in file `sys.argv[1]`; prints how much the peak
# resident memory grew (MB) and how many pieces came out.
_LONG_LINE = """
import resource, sys
import tensorflow as tf
from bert_keras.text import SentencePieceTokenizer
tokenizer = SentencePieceTokenizer(open(sys.argv[1], "rb").read())
tokenizer.tokenize(tf.constant(["the cat sat on the mat"]))  # traced before the measure
text = ("the cat sat on a mat " * 10_000)[: int(sys.argv[2])]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
pieces = tokenizer.tokenize(tf.constant([text])).flat_values.shape[0]
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024, pieces)
"""


@pytest.mark.slow
def test_memory_of_a_long_text_does_not_grow_with_its_square(proto, tmp_path):
    """A copy of the text per piece made a line of 30,000 characters take ~460 MB (62,500: 4.3 GB)."""
    model = tmp_path / "spiece.model"
    model.write_bytes(proto)
    done = subprocess.run([sys.executable, "-c", _LONG_LINE, str(model), "30000"], capture_output=True, text=True,
                          timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr[-2000:]
    grown_mb, pieces = map(int, done.stdout.split()[-2:])
    assert pieces > 5_000 and grown_mb < 100, (grown_mb, pieces)


# --- The search word by word (`UnigramSegmenter.resegment`) against the whole-text search ---------------------------
# `resegment` keeps tensorflow-text's pieces of a word unless two candidates at one of its positions come within the
# float32 rounding of its text's scores, and searches those words alone from the score the text has at their start;
# texts too long for that are searched whole (`segment`). Both must give the same pieces and character spans.

WORD_TEXTS = [
    "", "a", "300,000 miles", "1,000,000 ok 5,", "so far 300,000 m", "yes.  sorrrrrry.  rt", "@zzzach_scott: see",
    "中文字符 日本語 한국어 ab", "hello world, hello again", "000 0000 00000 000000",
]


def _train_small(lines, **options):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=300, model_type="unigram", pad_id=0,
        unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2, num_threads=1,
        **options,
    )
    return model.getvalue()


def _tf_text_pieces(proto, texts):
    tokenizer = SentencePieceTokenizer(proto)
    return tf_text.SentencepieceTokenizer(model=proto, out_type=tf.string).tokenize(tokenizer.preprocess(texts))


@pytest.mark.slow  # the whole text's search on thousands of tweets (36 s)
def test_word_by_word_equals_the_whole_text_search(proto, tweets):
    segmenter = UnigramSegmenter(proto)
    assert segmenter._by_words
    texts = tf.constant(WORD_TEXTS + tweets[-200:] + ["x" * 3000])  # the last one is searched whole (a reset may come)
    pieces = _tf_text_pieces(proto, texts)
    *by_words, chars = segmenter.resegment(pieces)
    whole = segmenter.segment(tf.strings.unicode_split(tf.strings.reduce_join(pieces, axis=-1), "UTF-8"))
    assert chars.to_list() == tf.strings.unicode_split(tf.strings.reduce_join(pieces, axis=-1), "UTF-8").to_list()
    for ours, expected in zip(by_words, whole):
        assert ours.to_list() == expected.to_list()


def test_the_words_searched_again_are_the_close_ones(proto):
    """A tie ("000": "0" "00" or "00" "0") has a margin of 0; a word of one clear path a margin far above the
    rounding; `resegment` searches again only words under the rounding of their text."""
    segmenter = UnigramSegmenter(proto)
    gap, magnitude = segmenter._gaps(tf.strings.unicode_split(["\u2581000", "\u2581hello", ""], "UTF-8"))
    assert gap.numpy()[0] == 0.0
    assert gap.numpy()[1] > 1e-3
    assert gap.numpy()[2] > 1e300 and magnitude.numpy()[2] == 0.0  # no position: no competitor
    assert magnitude.numpy()[1] > 0


@pytest.mark.slow  # 4 s in the full run of 450d6b9
def test_models_whose_words_cannot_be_searched_apart_are_searched_whole(tweets):
    """A piece holding "▁" after its first character can span two words: every text is searched whole, and the
    ids stay the library's."""
    lines = [t.lower() for t in tweets[:2000] if t.strip()]
    joined = _train_small(lines, user_defined_symbols=["a\u2581b"], split_by_whitespace=False)
    assert not UnigramSegmenter(joined)._by_words
    assert not UnigramSegmenter(_train_small(lines), float64=True)._by_words
    tokenizer, reference = SentencePieceTokenizer(joined), spm.SentencePieceProcessor(model_proto=joined)
    texts = ["a b", "ta bat", "300,000 miles"] + lines[-50:]
    ours = ids_per_row(tokenizer.tokenize(tf.constant(texts)))
    assert ours == [reference.encode(" ".join(t.split())) for t in texts]
