"""BytePairTokenizer (RoBERTa's byte-level BPE, in the graph) against transformers' RobertaTokenizerFast.

A tiny byte-level BPE is trained on 10,000 tweets here (the `tokenizers` package), written as `vocab.json` and
`merges.txt`, and read by both tokenizers.
"""


import numpy as np
import pytest
import tensorflow as tf

from bert_keras.text import BertPreprocessor, BytePairTokenizer
from bert_keras.text import _family_tables as tables
from bert_keras.text.byte_bpe import bytes_to_unicode
from bert_keras.text.packer import pack_inputs
from tests.helpers import ids_per_row

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

# Accents (composed and combining), emoji (ZWJ sequences), CJK, control characters, whitespace runs, tabs and
# newlines, the empty string, over-long text, zero-width characters, contractions and other GPT-2 splits.
EDGE_CASES = [
    "", " ", "   ", "\t", "\n\n", "a", "Hello  world", "a  b", " hi\t\tyo \n", "\t\ta  \tb", "a   ",
    "don't 's we'll 'LL ''s it'sa I'm they've you're 're", "x'd'd 'll'", "héllo café naïve", "e\u0301te\u0300",
    "😀 👨\u200d👩\u200d👧 🇫🇷", "中文字符 日本語 한국어", "x\x00y\x01z\x7f\x9f", "zero\u200bwidth\u200c\u200d\ufeff",
    "nbsp\u00a0x\u3000y\u2009z\u202f", "1,000.5 ٣٤ ½ x²", "!!!???...", "   leading and trailing   ",
    "x" * 3000, "word " * 600, "\ufffd invalid", "a\r\nb", "\u0301 starts with a mark", "<s> <mask> </s>",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tweets):
    path = tmp_path_factory.mktemp("roberta_tokenizer")
    trainer = tokenizers.ByteLevelBPETokenizer()
    trainer.train_from_iterator(
        tweets[:10_000], vocab_size=2000, min_frequency=2,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False,
    )
    trainer.save_model(str(path))
    return path


@pytest.fixture(scope="module")
def tokenizer(folder):
    return BytePairTokenizer.from_folder(folder)


@pytest.fixture(scope="module")
def reference(folder):
    return transformers.RobertaTokenizerFast.from_pretrained(str(folder))


def _flat(tokenizer, texts):
    ids, starts, ends = tokenizer.tokenize_with_char_offsets(tf.constant(texts))
    ids, starts, ends = (ids_per_row(x) for x in (ids, starts, ends))
    return ids, [list(zip(s, e)) for s, e in zip(starts, ends)]


def _compare(tokenizer, reference, texts):
    """Texts whose ids, then whose offsets, differ from the reference's (split_special_tokens: literal
    "<s>" in a text is text for both)."""
    ids, offsets = _flat(tokenizer, texts)
    expected = reference(texts, add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=True)
    bad_ids = [t for t, a, b in zip(texts, ids, expected["input_ids"]) if a != b]
    bad_offsets = [
        t for t, a, b in zip(texts, offsets, expected["offset_mapping"]) if a != [tuple(o) for o in b]
    ]
    return bad_ids, bad_offsets


def test_ids_and_offsets_equal_the_reference_on_tweets_and_edge_cases(tokenizer, reference, tweets):
    texts = tweets[-300:] + EDGE_CASES
    assert _compare(tokenizer, reference, texts) == ([], [])
    # Worked by hand: GPT-2 leaves the last space of a run to the next word, and trims it from the offsets.
    ids, offsets = _flat(tokenizer, ["a  b"])
    assert [tokenizer.id_to_token(i) for i in ids[0]] == ["a", "Ġ", "Ġb"] and offsets[0] == [(0, 1), (2, 2), (3, 4)]


def test_offsets_hold_the_pieces_text(tokenizer, tweets):
    """`text[start:end]` is the piece's decoded bytes (less the spaces trimmed) wherever it holds whole characters."""
    byte_of = {char: byte for byte, char in bytes_to_unicode().items()}
    texts = tweets[-300:] + EDGE_CASES
    ids, offsets = _flat(tokenizer, texts)
    checked = 0
    for text, row_ids, row_offsets in zip(texts, ids, offsets):
        for piece, (start, end) in zip(row_ids, row_offsets):
            raw = bytes(byte_of[c] for c in tokenizer.id_to_token(piece))
            try:
                decoded = raw.decode("utf-8")
            except UnicodeDecodeError:  # part of a character: it shares that character's span
                assert end - start == 1
                continue
            assert text[start:end] == decoded.strip(" "), (text, piece)
            checked += 1
    assert checked > 5000


def test_words_are_gpt2_chunks(tokenizer):
    tokens = tokenizer.tokenize(tf.constant(["it's  done!!"])).to_list()[0]
    words = ["".join(tokenizer.id_to_token(i) for i in word) for word in tokens]
    assert words == ["it", "'s", "Ġ", "Ġdone", "!!"]


def test_add_prefix_space_as_the_reference(folder, tweets):
    ours = BytePairTokenizer.from_folder(folder, add_prefix_space=True)
    reference = transformers.RobertaTokenizerFast.from_pretrained(str(folder), add_prefix_space=True)
    ids, _ = _flat(ours, tweets[:100] + EDGE_CASES)
    expected = reference(tweets[:100] + EDGE_CASES, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    assert ids == expected


def test_special_ids_and_roberta_packing(tokenizer, reference):
    assert tokenizer.get_special_tokens_dict() == {
        "vocab_size": 2000, "start_of_sequence_id": 0, "end_of_segment_id": 2, "padding_id": 1, "mask_id": 4,
    }
    preprocessor = BertPreprocessor(tokenizer=tokenizer, seq_length=16)
    out = preprocessor([tf.constant(["Hello there", "a"]), tf.constant(["General Kenobi!", ""])])
    expected = reference(["Hello there", "a"], ["General Kenobi!", ""], padding="max_length", max_length=16, truncation=True)
    assert out["input_word_ids"].numpy().tolist() == expected["input_ids"]
    assert out["input_mask"].numpy().tolist() == expected["attention_mask"]
    assert out["input_type_ids"].numpy().tolist() == [[0] * 16] * 2
    assert expected["input_ids"][1][:5] == [0, tokenizer.token_to_id("a"), 2, 2, 2]  # <s> a </s></s> </s>
    # Truncation keeps room for the four special tokens of a pair.
    long = preprocessor([tf.constant(["word " * 50]), tf.constant(["word " * 50])])["input_word_ids"].numpy()[0]
    assert long.tolist().count(2) == 3 and long[0] == 0 and long[-1] == 2


def test_config_round_trip_and_bad_files(tokenizer, tmp_path):
    restored = BytePairTokenizer.from_config(tokenizer.get_config())
    texts = tf.constant(["Round trip, café 😀"])
    assert restored.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()
    with pytest.raises(ValueError, match=r"`path`.*has no vocab.json"):
        BytePairTokenizer.from_folder(tmp_path)
    with pytest.raises(ValueError, match=r"`mask_token`.*\[MASK\].*lacks"):
        BytePairTokenizer(tokenizer.vocabulary, tokenizer.merges, mask_token="[MASK]")
    with pytest.raises(ValueError, match="`merges`"):
        BytePairTokenizer(tokenizer.vocabulary, ["a b c"])


@pytest.mark.slow
def test_ids_and_offsets_equal_the_reference_on_20000_tweets(tokenizer, reference, tweets):
    texts = tweets[-20_000:]
    bad_ids, bad_offsets = _compare(tokenizer, reference, texts)
    assert (len(bad_ids), len(bad_offsets)) == (0, 0), (bad_ids[:3], bad_offsets[:3])


@pytest.mark.slow
def test_character_classes_are_the_references():
    """The probe that made `_family_tables`' GPT-2 classes, repeated on every Unicode scalar value."""
    pre = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    codes = np.array([c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF])

    def of(ranges):
        return {c for first, last in ranges for c in range(first, last + 1)}

    letters, numbers, spaces = of(tables.GPT2_LETTER_RANGES), of(tables.GPT2_NUMBER_RANGES), of(tables.GPT2_WHITESPACE_RANGES)
    wrong = []
    for c in codes.tolist():
        char = chr(c)
        expected = (
            "L" if len(pre.pre_tokenize_str("a" + char)) == 1
            else "N" if len(pre.pre_tokenize_str("1" + char)) == 1
            else "O" if len(pre.pre_tokenize_str("!" + char)) == 1 else "W"
        )
        ours = "L" if c in letters else "N" if c in numbers else "W" if c in spaces else "O"
        if ours != expected:
            wrong.append(hex(c))
    assert wrong == [] and len(letters) > 130_000


@pytest.mark.slow  # 4 s in the full run of 450d6b9
def test_preprocessor_round_trip_and_saved_model(tokenizer, tmp_path):
    """The lookup tables travel with a SavedModel; the preprocessor's config rebuilds the same tokenizer."""
    preprocessor = BertPreprocessor(tokenizer=tokenizer, seq_length=12)
    texts = tf.constant(["Hello there, café 😀", "it's"])
    expected = {key: value.numpy().tolist() for key, value in preprocessor(texts).items()}
    restored = BertPreprocessor.from_config(preprocessor.get_config())
    assert {key: value.numpy().tolist() for key, value in restored(texts).items()} == expected
    module = tf.Module()
    module.preprocessor = preprocessor
    module.serve = tf.function(lambda x: preprocessor(x), input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    assert {key: value.numpy().tolist() for key, value in loaded.serve(texts).items()} == expected
    with pytest.raises(ValueError, match="`packing`"):
        pack_inputs([tf.ragged.constant([[5]])], seq_length=4, start_of_sequence_id=0, end_of_segment_id=2, packing="gpt")


def test_final_words_leave_the_merge_loop_with_the_same_pieces(tokenizer, tweets):
    """From `MIN_WORDS_TO_SHRINK` words, a word that merged nothing in a round leaves the loop
    (`_merges_shrinking`); its pieces and the words' order are those of the loop over every word."""
    from bert_keras.text import byte_bpe

    words = tf.constant(sorted({w.encode() for t in tweets[-300:] for w in t.split()})[:500] + [b"", b"x", b" the" * 20])
    raw = tf.strings.bytes_split(words)
    ids = tf.gather(tokenizer._byte_ids, tf.cast(tf.io.decode_raw(raw.flat_values, tf.uint8)[:, 0], tf.int32))
    symbols = tf.RaggedTensor.from_row_splits(ids, raw.row_splits)
    tables = (tokenizer._pair_table, tokenizer._merged_ids, tokenizer._size)
    shrinking = byte_bpe._merges_shrinking(symbols, *tables).to_list()
    assert shrinking == byte_bpe._merges_all(symbols, *tables).to_list()
    assert len(shrinking) == 503 and shrinking[-3] == [] and len(shrinking[-2]) == 1
    assert byte_bpe.apply_merges(symbols, *tables).to_list() == shrinking
    # One round: which words merged something (" the" repeated has pairs to merge; no symbol or one never does).
    step = byte_bpe._merge_step(symbols.flat_values, symbols.row_splits, *tables)
    merged = step[2].numpy().tolist()
    assert merged[-3:] == [False, False, True] and len(merged) == 503
