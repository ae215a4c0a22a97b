"""The one tokenizer base (`bert_keras.text.base.Tokenizer`) and the one registry (`bert_keras.text.kinds`): what each
kind says of itself, asked instead of branched on, and `.keras` files saved before the base still loading."""

import io
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras.text import (
    TOKENIZER_KINDS,
    BertPreprocessor,
    BytePairTokenizer,
    SentencePieceTokenizer,
    Tokenizer,
    WordPieceTokenizer,
    tokenizer_class,
)
from bert_keras.text.folders import read_folder, tokenizer_from_folder
from bert_keras.text.kinds import kind_of_assets, kind_of_pieces
from bert_keras.text.modernbert_tokenizer import ModernBertTokenizer
from bert_keras.text.unigram_tokenizer import UnigramTokenizer
from bert_keras.text.deberta_tokenizer import DebertaV3Tokenizer
from bert_keras.text.packer import pack_inputs

SAVED_BEFORE = os.path.join(os.path.dirname(__file__), "data", "saved_before_one_base")
WORDPIECE = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "##s", "a", "dog", "!"]
BPE_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "a", "b", "c", "\u0120", "\u0120a", "ab", "\u0120ab"]
BPE_MERGES = ["a b", "\u0120 a", "\u0120a b"]


@pytest.fixture(scope="module")
def proto():
    spm = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    corpus = ["the cat sat on the mat", "a dog ran far away", "the mat and the cat", "far away dogs sat"] * 20
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=model, vocab_size=40, model_type="unigram", pad_id=0, unk_id=1,
        bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"], hard_vocab_limit=False, minloglevel=2,
        num_threads=1, normalization_rule_name="identity",
    )
    return model.getvalue()


@pytest.fixture(scope="module")
def tokenizers(proto):
    return {"wordpiece": WordPieceTokenizer(WORDPIECE), "sentencepiece": SentencePieceTokenizer(proto),
            "byte_bpe": BytePairTokenizer(BPE_TOKENS, BPE_MERGES)}


def test_the_registry_maps_each_kind_to_its_class_and_refuses_others():
    assert TOKENIZER_KINDS == ("wordpiece", "sentencepiece", "byte_bpe", "unigram", "modernbert_bpe",
                               "deberta_unigram")
    classes = [tokenizer_class(kind) for kind in TOKENIZER_KINDS]
    assert classes == [WordPieceTokenizer, SentencePieceTokenizer, BytePairTokenizer, UnigramTokenizer,
                       ModernBertTokenizer, DebertaV3Tokenizer]
    assert [cls.kind for cls in classes] == list(TOKENIZER_KINDS)
    assert all(issubclass(cls, Tokenizer) for cls in classes)
    with pytest.raises(ValueError, match=r"argument `kind`, expected one of \['wordpiece', 'sentencepiece', "
                                         r"'byte_bpe', 'unigram', 'modernbert_bpe', 'deberta_unigram'\]. "
                                         r"Received: kind='bpe'"):
        tokenizer_class("bpe")


@pytest.mark.parametrize("kind, one, two", [("wordpiece", 2, 3), ("sentencepiece", 2, 3), ("byte_bpe", 2, 4)])
def test_num_special_tokens_is_what_the_packing_adds(tokenizers, kind, one, two):
    tokenizer = tokenizers[kind]
    assert (tokenizer.num_special_tokens(1), tokenizer.num_special_tokens(2)) == (one, two)
    assert tokenizer_class(kind).num_special_tokens(2) == two  # the class says it without a vocabulary
    # What pack_inputs really adds: the real tokens of two empty segments.
    empty = tf.ragged.constant([[]], dtype=tf.int32, ragged_rank=1)
    packed = pack_inputs([empty, empty], seq_length=8, start_of_sequence_id=tokenizer.cls_id,
                         end_of_segment_id=tokenizer.sep_id, packing=tokenizer.packing)
    assert int(tf.reduce_sum(packed["input_mask"])) == two


def test_each_kind_names_its_files_and_options():
    assert WordPieceTokenizer.files == {"vocab_file": "vocab.txt"}
    assert SentencePieceTokenizer.files == {"sp_model_file": "spiece.model"}
    assert BytePairTokenizer.files == {"vocab_file": "vocab.json", "merges_file": "merges.txt"}
    assert [tokenizer_class(kind).lower_cases() for kind in TOKENIZER_KINDS] == [True, True, False, False, False, False]
    # A Hub module's asset attributes name the kind: the one with the most attributes where several fit.
    assert [kind_of_assets(names) for names in (["vocab_file"], ["sp_model_file", "do_lower_case"],
                                                ["vocab_file", "merges_file"], ["merges_file"])] == \
        ["wordpiece", "sentencepiece", "byte_bpe", None]


def test_tokenizer_config_gives_back_the_options_it_was_built_with(proto):
    assert WordPieceTokenizer(WORDPIECE, lower_case=False).tokenizer_config() == {"do_lower_case": False,
                                                                             "tokenize_chinese_chars": True}
    assert SentencePieceTokenizer(proto, keep_accents=True).tokenizer_config() == \
        {"do_lower_case": True, "keep_accents": True}
    assert BytePairTokenizer(BPE_TOKENS, BPE_MERGES, add_prefix_space=True).tokenizer_config() == \
        {"add_prefix_space": True}


@pytest.mark.parametrize("kind, tokens, text", [
    ("wordpiece", ["new", "york", "##er", ",", "hi"], "new yorker, hi"),
    ("wordpiece", ["i", "do", "n't", "."], "i don't."),  # the clean-up, token by token
    ("sentencepiece", ["\u2581new", "\u2581york", "er"], "new yorker"),
    ("sentencepiece", ["new", "\u2581york"], "new york"),
    ("byte_bpe", ["\u0120New", "\u0120York"], " New York"),
    ("byte_bpe", ["\u0120caf", "\u00c3\u00a9"], " caf\u00e9"),  # é's two bytes, two characters of the byte table
    ("byte_bpe", ["\u00c3"], "\ufffd"),  # half a character
    ("byte_bpe", ["<s>"], "<s>"),  # no byte of the table: its own text
])
def test_tokens_to_string_joins_pieces_as_the_kinds_decoder(kind, tokens, text):
    assert tokenizer_class(kind).tokens_to_string(tokens) == text


def test_tokens_to_string_of_wordpiece_takes_its_suffix_indicator():
    assert WordPieceTokenizer.tokens_to_string(["play", "@@ing"], suffix_indicator="@@") == "playing"


@pytest.mark.parametrize("kind, token, text, start, end, starts", [
    ("wordpiece", "play", "playing", 0, 4, True),
    ("wordpiece", "##ing", "playing", 4, 7, False),  # the token is longer than its text: a continuing piece
    ("wordpiece", "[UNK]", "x \u2603", 2, 3, False),
    ("sentencepiece", "\u2581play", "we playing", 3, 7, True),  # a space just before
    ("sentencepiece", "ing", "we playing", 7, 10, False),
    ("byte_bpe", "\u0120play", "we playing", 3, 7, True),
    ("byte_bpe", "ing", "we playing", 7, 10, False),
    ("byte_bpe", "we", "we playing", 0, 2, True),  # the text's start
])
def test_piece_starts_word_is_the_pipelines_rule(kind, token, text, start, end, starts):
    assert tokenizer_class(kind).piece_starts_word(token, text, start, end) is starts


@pytest.mark.parametrize("tokens, kind", [
    (["the", "##s"], "wordpiece"), (["the", "\u2581cat"], "sentencepiece"), (["<s>", "\u0120cat"], "byte_bpe"),
    ([], "wordpiece"),
])
def test_the_kind_of_pieces_is_read_from_their_marks(tokens, kind):
    assert kind_of_pieces(tokens) == kind


@pytest.mark.slow  # 6 s in the full run of 450d6b9
@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece", "byte_bpe"])  # the kinds there were then
def test_keras_files_saved_before_the_one_base_load_and_give_the_same_ids(kind):
    with open(os.path.join(SAVED_BEFORE, "expected.json"), encoding="utf-8") as f:
        expected = json.load(f)
    model = keras.saving.load_model(os.path.join(SAVED_BEFORE, f"{kind}.keras"))
    tokenizer = model.get_layer("preprocessor").tokenizer
    assert (type(tokenizer), tokenizer.kind) == (tokenizer_class(kind), kind)
    outputs = model([tf.constant(expected["texts"]), tf.constant(expected["pairs"])])
    for key, value in outputs.items():
        np.testing.assert_array_equal(np.asarray(value), expected["outputs"][kind][key])
    # And round trip again through the config.
    again = type(tokenizer).from_config(tokenizer.get_config())
    assert again.get_config() == tokenizer.get_config()


def test_the_preprocessor_takes_any_tokenizer_and_refuses_other_layers(tokenizers):
    for tokenizer in tokenizers.values():
        assert BertPreprocessor(tokenizer=tokenizer).packer.packing == tokenizer.packing
    with pytest.raises(ValueError, match="argument `tokenizer`, expected a WordPieceTokenizer"):
        BertPreprocessor(tokenizer=keras.layers.Dense(2))


def test_from_folder_reads_each_kinds_files_and_names_the_missing_one(tmp_path, proto):
    albert = tmp_path / "albert"
    albert.mkdir()
    (albert / "30k-clean.model").write_bytes(proto)  # google-research/albert's name for spiece.model
    (albert / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "keep_accents": True}))
    tokenizer = SentencePieceTokenizer.from_folder(str(albert), name="albert")
    assert (tokenizer.lower_case, tokenizer.keep_accents, tokenizer.name) == (False, True, "albert")
    roberta = tmp_path / "roberta"
    roberta.mkdir()
    (roberta / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(BPE_TOKENS)}))
    with pytest.raises(ValueError, match=r"expected a folder holding vocab.json and merges.txt. Received: "
                                         r"path='.*roberta', which has no merges.txt"):
        BytePairTokenizer.from_folder(str(roberta))
    with pytest.raises(ValueError, match=r"The checkpoint at '.*roberta' has no merges.txt, which its byte_bpe "
                                         r"tokenizer is read from.*Put the model's vocab.json and merges.txt \(or its tokenizer.json\) next"):
        tokenizer_from_folder(str(roberta), "byte_bpe")


def _bert_tokenizer_json(vocabulary, lower_case):
    return {"normalizer": {"type": "BertNormalizer", "lowercase": lower_case, "strip_accents": None},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "model": {"type": "WordPiece", "continuing_subword_prefix": "##",
                      "vocab": {token: i for i, token in enumerate(vocabulary)}}}


def test_a_folder_with_only_tokenizer_json_gives_its_wordpiece_tokenizer(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps(_bert_tokenizer_json(WORDPIECE, lower_case=False)))
    found = read_folder(str(tmp_path), "wordpiece")
    assert (found.file, found.files, found.tokens()) == (str(tmp_path / "tokenizer.json"), None, WORDPIECE)
    tokenizer = tokenizer_from_folder(str(tmp_path), "wordpiece")
    assert (type(tokenizer), tokenizer.vocabulary, tokenizer.lower_case) == (WordPieceTokenizer, WORDPIECE, False)
    assert tokenizer(["The cats"]).to_list() == [[[1], [6, 10]]]  # cased: "The" is unknown
    # Another kind's tokenizer.json is refused, naming the part that differs.
    with pytest.raises(ValueError, match=r"tokenizer.json, field 'model.type': expected 'Unigram', found 'WordPiece'"):
        tokenizer_from_folder(str(tmp_path), "sentencepiece")
    os.remove(tmp_path / "tokenizer.json")
    with pytest.raises(ValueError, match=r"has no vocab.txt, which its wordpiece tokenizer is read from.*Put the "
                                         r"model's vocab.txt \(or its tokenizer.json\) next to its weights"):
        tokenizer_from_folder(str(tmp_path), "wordpiece")
