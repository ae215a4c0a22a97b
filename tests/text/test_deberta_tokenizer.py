"""DeBERTa-v3's tokenizer.json (transformers 5's `DebertaV2Tokenizer`, converted from a SentencePiece model trained here
on tweets and texts with accents and emoji) read as `DebertaV3Tokenizer`: ids equal to transformers' tokenizer's on
the same folder, literal special tokens read as text (`encode_special_tokens`)."""

import copy
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_keras.text import DebertaV3Tokenizer
from bert_keras.text.base import TokenizerFileError
from bert_keras.text.deberta_tokenizer import deberta_unigram_arguments, preprocess_deberta_text
from bert_keras.text.folders import read_folder
from tests.helpers import ids_per_row
from tests.test_family_workflows import ACCENTED, tweets  # noqa: F401 (a fixture)
from tests.text.deberta_tokenizers import write_deberta_tokenizer

transformers = pytest.importorskip("transformers")

# Whitespace of every kind (the charsmap makes a vertical tab nothing, U+0085 stays but is stripped at the end),
# control characters, NUL, U+FFFD with a mark (mojibake), literal special tokens, "▁" in the text, compatibility forms.
EDGE_CASES = ACCENTED + [
    "", " ", "  Héllo\t ``World''  ", "x\x01y \u200b z\u3000w", "word " * 40, "a\x0bb", "a\x85", "a\x85b", " \x85a",
    "a\x00b", "[MASK] [CLS] x[SEP]", "a\u2581b \u2581 c", "a \x85\t", "\n\nhi\n", "\ufb01 \u00bd \u2122 \u2460",
    "_\ufffd\u05b1_\ufffd\u058d_\ufffd\u05b1\ufffd\u05b1 x", "\ufffd\u064f\u0734 \ufffd\u0301\u200d",
]


def reference(folder):
    """transformers' DebertaV2Tokenizer of the folder (its `tokenizers` model, built from the tokenizer.json that Python
    reads: `bert_keras.text.tokenizer_json.unigram_scores`), literal special tokens read as text (as ours)."""
    found = transformers.DebertaV2Tokenizer.from_pretrained(folder).backend_tokenizer
    found.encode_special_tokens = True
    return found


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tweets):  # noqa: F811
    path = tmp_path_factory.mktemp("deberta_tokenizer")
    write_deberta_tokenizer(path, tweets[:3000] + ACCENTED * 20)
    return str(path)


def differences(folder, texts, batch=1000):
    ours = read_folder(folder, "deberta_unigram").build()
    ids = []
    for start in range(0, len(texts), batch):
        ids += ids_per_row(ours.tokenize(tf.constant(texts[start:start + batch])))
    expected = [e.ids for e in reference(folder).encode_batch(texts, add_special_tokens=False)]
    return [text for text, a, b in zip(texts, ids, expected) if a != b]


def test_the_file_is_deberta_v3_s_as_transformers_writes_it(folder):
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        spec = json.load(f)
    assert [step["type"] for step in spec["normalizer"]["normalizers"]] == ["Precompiled", "Strip", "Replace"]
    assert spec["pre_tokenizer"]["pretokenizers"][0]["prepend_scheme"] == "always"
    assert [entry["content"] for entry in spec["added_tokens"]][-1] == "[MASK]"
    assert spec["added_tokens"][-1]["id"] == len(spec["model"]["vocab"])  # past the model's pieces


def test_ids_layout_and_packing_are_deberta_v3_s(folder):
    tokenizer = read_folder(folder, "deberta_unigram").build()
    assert isinstance(tokenizer, DebertaV3Tokenizer) and tokenizer.vocabulary_size() == 601
    assert (tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.unknown_id, tokenizer.mask_id) == (
        0, 1, 2, 3, 600)
    assert tokenizer.packing == "bert" and tokenizer.num_special_tokens(2) == 3
    assert differences(folder, EDGE_CASES) == []


def test_ids_equal_transformers_tokenizer_on_tweets(folder, tweets):  # noqa: F811
    assert differences(folder, tweets[-500:]) == []


@pytest.mark.slow
def test_ids_equal_transformers_tokenizer_on_20000_tweets(folder, tweets):  # noqa: F811
    bad = differences(folder, tweets[-20_000:])
    assert bad == [], bad[:3]


def test_a_mark_after_u_fffd_is_dropped_as_the_reference_s_graphemes_do():
    texts = ["a\ufffd\u05b1b", "a\ufffd\u05b1\u05b1b", "\ufffd\u05b1\ufffd\u05b1", "a\ufffd\u0301\u200d"]
    out = [t.decode() for t in preprocess_deberta_text(tf.constant(texts)).numpy()]
    # One mark of two bytes: the grapheme is under 6 bytes; two marks, or a ZWJ after, make it longer.
    assert out == ["a\ufffdb", "a\ufffd\u05b1\u05b1b", "\ufffd\ufffd", "a\ufffd\u0301\u200d"]


def test_offsets_hold_the_pieces_text(folder):
    tokenizer = read_folder(folder, "deberta_unigram").build()
    texts = ["Héllo wörld 😀", "  ça   va\ttrès bien \x85 ", "x_\ufffd\u05b1_y"]
    ids, starts, ends = tokenizer.tokenize_with_char_offsets(tf.constant(texts))
    spans = []
    for text, row, first, end in zip(texts, ids.to_list(), starts.to_list(), ends.to_list()):
        spans.append([text[a:b] for a, b in zip(sum(first, []), sum(end, []))])
        for piece_id, a, b in zip(sum(row, []), sum(first, []), sum(end, [])):
            # A word's piece starts at the space before it, as the reference's; a "▁" alone first spans the first
            # character.
            if piece_id != tokenizer.unknown_id and tokenizer.vocabulary[piece_id] != "\u2581":
                assert text[a:b].lstrip(" \t\x85\ufffd\u05b1") == tokenizer.piece_text(tokenizer.vocabulary[piece_id])
    assert spans[0][-1] == "😀" and spans[2][-1] == "y"


def test_offsets_equal_transformers_tokenizer_s(folder, tweets):  # noqa: F811
    tokenizer = read_folder(folder, "deberta_unigram").build()
    texts = tweets[-200:] + ["a   b", "a\t b", " b", "Héllo wörld 😀"]
    _, starts, ends = tokenizer.tokenize_with_char_offsets(tf.constant(texts))
    ours = [list(zip(first, end)) for first, end in zip(ids_per_row(starts), ids_per_row(ends))]
    expected = [e.offsets for e in reference(folder).encode_batch(texts, add_special_tokens=False)]
    assert [text for text, a, b in zip(texts, ours, expected) if a != b] == []


def test_a_folder_of_spm_model_alone_gives_the_same_ids(tmp_path, folder, tweets):  # noqa: F811
    """The real checkpoints as downloaded: `spm.model`, no tokenizer.json; `[MASK]` added after its pieces."""
    write_deberta_tokenizer(tmp_path, tweets[:3000] + ACCENTED * 20, spm_model=True)
    assert sorted(os.listdir(tmp_path)) == ["spm.model"]
    found = read_folder(str(tmp_path), "deberta_unigram")
    assert found.file.endswith("spm.model") and found.tokens()[-1] == "[MASK]"
    tokenizer = found.build()
    assert (tokenizer.vocabulary_size(), tokenizer.mask_id, tokenizer.cls_id) == (601, 600, 1)
    texts = tweets[-300:] + [text for text in EDGE_CASES if "[" not in text]
    ids = ids_per_row(tokenizer.tokenize(tf.constant(texts)))
    expected = [e.ids for e in reference(folder).encode_batch(texts, add_special_tokens=False)]
    assert [text for text, a, b in zip(texts, ids, expected) if a != b] == []


def test_the_tokenizer_round_trips_through_its_config(folder):
    tokenizer = read_folder(folder, "deberta_unigram").build()
    again = DebertaV3Tokenizer.from_config(tokenizer.get_config())
    texts = tf.constant(ACCENTED)
    assert again.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()
    np.testing.assert_array_equal(again.vocabulary, tokenizer.vocabulary)


@pytest.mark.parametrize("change,part", [
    (lambda s: s["normalizer"]["normalizers"].insert(0, {"type": "Lowercase"}), "normalizer.normalizers"),
    (lambda s: s["normalizer"]["normalizers"][1].update(strip_left=True), r"normalizer.normalizers\[1\]"),
    (lambda s: s["pre_tokenizer"]["pretokenizers"].insert(0, {"type": "Punctuation", "behavior": "Isolated"}),
     "pre_tokenizer.pretokenizers"),
    (lambda s: s["pre_tokenizer"]["pretokenizers"][0].update(prepend_scheme="first"),
     r"pre_tokenizer.pretokenizers\[0\]"),
    (lambda s: s["added_tokens"][-1].update(id=len(s["model"]["vocab"]) + 5), "added_tokens"),
])
def test_what_the_graph_cannot_reproduce_is_refused_by_part(folder, change, part):
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        spec = json.load(f)
    spec = copy.deepcopy(spec)
    change(spec)
    with pytest.raises(TokenizerFileError, match=part):
        deberta_unigram_arguments(spec, "tokenizer.json")
