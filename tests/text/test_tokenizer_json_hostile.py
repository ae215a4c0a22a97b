"""Hostile values of a `tokenizer.json` (issue 55, item 7): each is refused naming the file, the part and the token
(exit 2 on the command line), or read with every id exact; never an exit 1, a crash, a hang or shifted ids.

Tokens holding a line break ("\\n", "\\r") are refused: `convert` writes WordPiece's vocabulary to `vocab.txt` and
BPE's merges to `merges.txt`, one a line, and tensorflow-text's lookup (`TextFileInitializer`) ends a line at "\\n"
and drops a "\\r" before it (Python's text mode, so transformers' `load_vocab`, ends one at "\\r" too): no escape
keeps such a token. The other separators of `str.splitlines` are read back exactly by all of them, so they are kept.
"""

import base64
import json
import os
import re
import struct

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import cli
from bert_keras.text.base import TokenizerFileError
from bert_keras.text.folders import read_folder, write_tokenizer_files
from bert_keras.text.tokenizer import WordPieceTokenizer
from tests.test_family_workflows import tweets  # noqa: F401 (a fixture)

tokenizers = pytest.importorskip("tokenizers")

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
OTHER_SEPARATORS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def wordpiece_json(tokens):
    """BERT's tokenizer.json, as the `tokenizers` library writes it, of `tokens` in id order."""
    tokenizer = tokenizers.BertWordPieceTokenizer(vocab={token: i for i, token in enumerate(tokens)}, lowercase=True)
    tokenizer.add_special_tokens(SPECIALS)
    return json.loads(tokenizer._tokenizer.to_str())


def write_json(folder, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f)
    return str(folder)


def tokens_of(size):
    return SPECIALS + ["hello", "world"] + [f"w{i}" for i in range(size - len(SPECIALS) - 2)]


@pytest.mark.parametrize("separator", ["\n", "\r", "\r\n"])
def test_a_wordpiece_token_with_a_line_break_is_refused_naming_it_and_its_id(tmp_path, separator):
    tokens = tokens_of(12)
    tokens[9] = f"a{separator}b"
    folder = write_json(tmp_path, wordpiece_json(tokens))
    shown = repr(f"a{separator}b")
    with pytest.raises(TokenizerFileError, match=f"tokenizer.json, field 'model.vocab': the token of id 9, "
                       f"{shown.replace(chr(92), chr(92) * 2)}, holds a line break"):
        read_folder(folder, "wordpiece")


def test_convert_refuses_a_wordpiece_token_with_a_newline_with_exit_2(tmp_path, capsys):
    # It wrote the token into vocab.txt as two lines, every later id one off, and ended in exit 0.
    pytest.importorskip("transformers")
    from tests.checkpoints._models import TINY_HF, hf_pretraining_model

    folder = tmp_path / "bert"
    hf_pretraining_model().save_pretrained(str(folder))
    tokens = tokens_of(TINY_HF["vocab_size"])
    tokens[9] = "new\nline"
    write_json(folder, wordpiece_json(tokens))
    out = tmp_path / "modules"
    assert cli.main(["convert", str(folder), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert "field 'model.vocab': the token of id 9, 'new\\nline', holds a line break ('\\n')" in err
    assert not out.exists()


@pytest.mark.parametrize("separator", OTHER_SEPARATORS)
def test_other_line_separators_keep_every_id_through_vocab_txt(tmp_path, separator):
    # What tensorflow-text's lookup reads from the vocab.txt written for a module pair: every id where it was.
    tokens = tokens_of(12)
    tokens[6] = f"x{separator}y"
    tokenizer = read_folder(write_json(tmp_path / "in", wordpiece_json(tokens)), "wordpiece").build()
    os.makedirs(tmp_path / "out")
    path = write_tokenizer_files(tokenizer, tmp_path / "out")["vocab_file"]
    table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
        path, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), -1)
    assert table.lookup(tf.constant(tokens)).numpy().tolist() == list(range(12))
    assert WordPieceTokenizer(path).vocabulary == tokens


@pytest.mark.parametrize("token", ["a\nb", "a\rb", "a\x00b", "\ud800"])
def test_a_wordpiece_vocabulary_list_refuses_what_vocab_txt_or_tensorflow_text_cannot_hold(token):
    # "\x00" and a lone surrogate ended in a RuntimeError / TypeError inside tensorflow-text (exit 1).
    with pytest.raises(ValueError, match=r"argument `vocabulary`: the token of id 5 \(.*\) holds"):
        WordPieceTokenizer(SPECIALS + [token])


def test_a_bpe_merge_with_a_line_break_is_refused_naming_it(tmp_path):
    tokenizer = tokenizers.ByteLevelBPETokenizer(vocab={"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4,
                                                        "a": 5, "b\n": 6, "ab\n": 7, "c": 8, "cc": 9},
                                                 merges=[("c", "c"), ("a", "b\n")])
    data = json.loads(tokenizer._tokenizer.to_str())
    data["added_tokens"] = []
    folder = write_json(tmp_path, data)
    with pytest.raises(TokenizerFileError, match=r"field 'model.merges\[1\]': 'a b\\n' holds a line break \('\\n'\)"):
        read_folder(folder, "byte_bpe")
    with pytest.raises(ValueError, match=r"argument `merges`: merge 2 \('a b\\n'\) holds '\\n'"):
        from bert_keras.text.byte_bpe import load_bpe_files
        load_bpe_files(list(data["model"]["vocab"]), ["c c", "a b\n"])


def test_a_tokenizer_json_past_the_cap_is_refused_before_it_is_read(tmp_path):
    from bert_keras.text.base import MAX_TOKENIZER_JSON_BYTES

    path = tmp_path / "tokenizer.json"
    with open(path, "wb") as f:  # sparse: its size is what is told
        f.truncate(MAX_TOKENIZER_JSON_BYTES + 1)
    with pytest.raises(TokenizerFileError, match=f"tokenizer.json: is {MAX_TOKENIZER_JSON_BYTES + 1:,} bytes; at most "
                       f"{MAX_TOKENIZER_JSON_BYTES:,} are read"):
        read_folder(str(tmp_path), "wordpiece")
    assert MAX_TOKENIZER_JSON_BYTES == 32 * 2**20  # XLM-R's 250,002 pieces with scores: about 17 MB


# --- ALBERT's Unigram: scores and the precompiled charsmap ---


@pytest.fixture(scope="module")
def albert_folder(tmp_path_factory, tweets):  # noqa: F811
    from tests.checkpoints.test_transformers5_folders import make_folder

    folder = tmp_path_factory.mktemp("albert")
    make_folder("albert", folder, tweets)
    return folder


def _edited_albert(albert_folder, tmp_path, edit):
    import shutil

    folder = shutil.copytree(albert_folder, tmp_path / "albert")
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    edit(data)
    (folder / "tokenizer.json").write_text(json.dumps(data, allow_nan=True), encoding="utf-8")
    return folder, data


@pytest.mark.parametrize("score, shown", [(1e300, "1e+300"), (-1e300, "-1e+300"), (float("nan"), "nan"),
                                          (float("inf"), "inf"), (3.5e38, "3.5e+38"),
                                          pytest.param(10**400, "1000000", id="10**400")])
def test_a_unigram_score_beyond_float32_is_refused_naming_the_piece(albert_folder, tmp_path, score, shown):
    folder, data = _edited_albert(albert_folder, tmp_path, lambda d: d["model"]["vocab"][30].__setitem__(1, score))
    piece = data["model"]["vocab"][30][0]
    expected = rf"field 'model.vocab\[30\]': the score of {piece!r} is {re.escape(shown)}"
    with pytest.raises(TokenizerFileError, match=expected):
        read_folder(str(folder), "sentencepiece")


@pytest.mark.parametrize("score", ["1.0", True, None])
def test_a_unigram_score_that_is_no_number_is_refused(albert_folder, tmp_path, score):
    folder, _ = _edited_albert(albert_folder, tmp_path, lambda d: d["model"]["vocab"][30].__setitem__(1, score))
    with pytest.raises(TokenizerFileError, match=r"field 'model.vocab\[30\]': expected a \[piece, score\] pair"):
        read_folder(str(folder), "sentencepiece")


def test_convert_refuses_a_unigram_score_beyond_float32_with_exit_2(albert_folder, tmp_path, capsys):
    # It ended in exit 1 (OverflowError: float too large to pack with f format).
    folder, data = _edited_albert(albert_folder, tmp_path, lambda d: d["model"]["vocab"][30].__setitem__(1, 1e300))
    out = tmp_path / "modules"
    assert cli.main(["convert", str(folder), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"field 'model.vocab[30]': the score of {data['model']['vocab'][30][0]!r} is 1e+300" in err
    assert "internal error" not in err and not out.exists()


def _charsmap_step(data):
    return next(step for step in data["normalizer"]["normalizers"] if step["type"] == "Precompiled")


def test_a_charsmap_whose_double_array_leaves_its_bytes_is_refused(albert_folder, tmp_path):
    # A real charsmap with bytes changed inside its double array: the sentencepiece normaliser that tensorflow-text
    # runs read past it (a segmentation fault on the first text, after the tokenizer was built).
    def corrupt(data):
        charsmap = bytearray(base64.b64decode(_charsmap_step(data)["precompiled_charsmap"]))
        rng = np.random.default_rng(0)
        for at in rng.integers(4, 4 + struct.unpack("<I", charsmap[:4])[0], size=200):
            charsmap[at] = int(rng.integers(256))
        _charsmap_step(data)["precompiled_charsmap"] = base64.b64encode(bytes(charsmap)).decode()

    folder, _ = _edited_albert(albert_folder, tmp_path, corrupt)
    with pytest.raises(TokenizerFileError, match=r"precompiled_charsmap': is refused: its precompiled_charsmap is "
                       "broken: its double array points past its end"):
        read_folder(str(folder), "sentencepiece")


def test_the_charsmap_check_takes_a_real_one_and_refuses_a_broken_or_oversized_one(albert_folder):
    from bert_keras.text._model_proto import MAX_CHARSMAP_BYTES, check_charsmap

    data = json.loads((albert_folder / "tokenizer.json").read_text(encoding="utf-8"))
    real = base64.b64decode(_charsmap_step(data)["precompiled_charsmap"])
    check_charsmap(real)  # sentencepiece's nmt_nfkc: 240,007 bytes
    assert len(real) == 240_007 and MAX_CHARSMAP_BYTES == 2**20
    for broken in (real[: len(real) // 2], struct.pack("<I", 8) + b"\0" * 3, b"abc", real[:-1] + b"x"):
        with pytest.raises(ValueError, match="its precompiled_charsmap .*is broken"):
            check_charsmap(broken)
    with pytest.raises(ValueError, match=r"is 1,048,577 bytes; at most 1,048,576 are read"):
        check_charsmap(b"\0" * (MAX_CHARSMAP_BYTES + 1))


def test_an_oversized_charsmap_is_refused_before_it_is_decoded(albert_folder, tmp_path):
    def oversized(data):
        _charsmap_step(data)["precompiled_charsmap"] = base64.b64encode(b"\0" * (2 * 2**20)).decode()

    folder, _ = _edited_albert(albert_folder, tmp_path, oversized)
    with pytest.raises(TokenizerFileError, match=r"precompiled_charsmap': is 2,796,204 characters of base64; at most "
                       "1,048,576 bytes are read"):
        read_folder(str(folder), "sentencepiece")


# --- The hostile review: what else a tokenizer.json may say ---


def _ids(folder, kind, texts):
    ours = [sum(row, []) for row in read_folder(folder, kind).build().tokenize(tf.constant(texts)).to_list()]
    reference = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    return ours, [e.ids for e in reference.encode_batch(texts, add_special_tokens=False)]


@pytest.mark.parametrize("option, value, expected", [
    ("unk_token", "[PAD]", [[5, 6, 0], [6]]),  # ours gave [UNK]'s id (1) where the reference gives [PAD]'s
    ("max_input_chars_per_word", 4, [[1, 1, 1], [1]]),  # ours cut words of up to 100 characters
])
def test_the_wordpiece_models_unknown_token_and_word_length_are_read_as_the_reference(tmp_path, option, value,
                                                                                      expected):
    data = wordpiece_json(tokens_of(12))
    data["model"][option] = value
    ours, reference = _ids(write_json(tmp_path, data), "wordpiece", ["hello world zzz", "world"])
    assert ours == reference == expected


@pytest.mark.parametrize("part, value, message", [
    ("unk_token", "[NOPE]", r"'model.unk_token': expected a token of the vocabulary, found '\[NOPE\]'"),
])
def test_a_wordpiece_models_options_out_of_range_are_refused(tmp_path, part, value, message):
    data = wordpiece_json(tokens_of(12))
    data["model"][part] = value
    with pytest.raises(TokenizerFileError, match=message):
        read_folder(write_json(tmp_path, data), "wordpiece")


# A vocabulary of 300 with the token of id 297 replaced; "a", "b", "##b" are ids 7, 8, 9.
SPACED_TEXTS = ["a b", "a  b", "xa b", "a bc", "ab", "a", "b a b"]


def spaced_tokens(token, at=297):
    tokens = SPECIALS + ["hello", "world", "a", "b", "##b", "c"] + [f"w{i}" for i in range(300 - 12)]
    tokens[at] = token
    return tokens


@pytest.mark.parametrize("value, shown", [(-1, "-1"), ("x", "'x'"), (True, "True"), (1e30, "1e+30"), (2.5, "2.5"),
                                          (1.0, "1.0"), (2**64, "18446744073709551616")])
def test_a_word_length_the_reference_refuses_is_refused_naming_it(tmp_path, value, shown):
    # 2**64 was read as unbounded; the reference refuses it (a usize), as it refuses negatives and non-integers.
    data = wordpiece_json(tokens_of(12))
    data["model"]["max_input_chars_per_word"] = value
    folder = write_json(tmp_path, data)
    with pytest.raises(Exception, match="expected usize"):
        tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    with pytest.raises(TokenizerFileError, match=r"tokenizer.json, field 'model.max_input_chars_per_word': expected a "
                       rf"positive integer of at most 18,446,744,073,709,551,615 .*, found {re.escape(shown)}\.$"):
        read_folder(folder, "wordpiece")


def test_a_word_length_of_0_that_the_reference_reads_as_every_word_unknown_is_refused(tmp_path):
    # The reference takes 0 and gives [UNK] (id 1) for every word; WordPieceTokenizer takes positive lengths only.
    data = wordpiece_json(tokens_of(12))
    data["model"]["max_input_chars_per_word"] = 0
    folder = write_json(tmp_path, data)
    reference = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    assert reference.encode("hello world zzz", add_special_tokens=False).ids == [1, 1, 1]
    with pytest.raises(TokenizerFileError, match=r"field 'model.max_input_chars_per_word': expected a positive "
                       "integer, found 0: the reference makes every word \\[UNK\\]"):
        read_folder(folder, "wordpiece")


def test_the_largest_word_length_the_reference_reads_is_unbounded(tmp_path):
    data = wordpiece_json(spaced_tokens("w"))
    data["model"]["max_input_chars_per_word"] = 2**64 - 1
    ours, reference = _ids(write_json(tmp_path, data), "wordpiece", ["hello world zzz", "a" + "b" * 1500])
    assert ours == reference == [[5, 6, 1], [7] + [9] * 1500]  # 1,501 characters: [UNK] (1) by default


@pytest.mark.parametrize("token", ["a b", "## b", "a ", " a", "a\tb", "a\u00a0b", "a\u3000b", "a\u2028b"])
def test_a_token_holding_whitespace_is_never_given_as_the_reference_and_keeps_its_id(tmp_path, token):
    # tensorflow-text's WordPiece matched "a b" across the space: [297] where the reference, which splits words on
    # whitespace first, gives "a" and "b". Other whitespace is made a space by the normalizer on both sides.
    tokens = spaced_tokens(token)
    folder = write_json(tmp_path / "in", wordpiece_json(tokens))
    ours, reference = _ids(folder, "wordpiece", SPACED_TEXTS)
    assert ours == reference == [[7, 8], [7, 8], [1, 8], [7, 1], [7, 9], [7], [8, 7, 8]]
    tokenizer = read_folder(folder, "wordpiece").build()
    assert tokenizer.vocabulary[297] == token and tokenizer.id_to_token(297) == token
    assert WordPieceTokenizer(tokens).tokenize(tf.constant(SPACED_TEXTS)).merge_dims(1, 2).to_list() == ours
    os.makedirs(tmp_path / "out")  # vocab.txt keeps the token on its line: every id in place
    assert WordPieceTokenizer(write_tokenizer_files(tokenizer, tmp_path / "out")["vocab_file"]).vocabulary == tokens


def test_an_unknown_token_holding_a_space_is_still_given_for_unknown_and_long_words(tmp_path):
    tokens = spaced_tokens("[U NK]", at=1)
    data = wordpiece_json(tokens)
    data["model"].update(unk_token="[U NK]", max_input_chars_per_word=10)
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "[UNK]"]  # added past the vocabulary
    ours, reference = _ids(write_json(tmp_path, data), "wordpiece", ["a zzz", "[U NK]", "a" * 11 + " b", "u nk"])
    assert ours == reference == [[7, 1], [1, 1, 1, 1], [1, 8], [1, 1]]


def test_the_placeholder_of_a_spaced_token_cannot_take_another_tokens_place():
    from bert_keras.text.tokenizer import wordpiece_vocabulary

    assert wordpiece_vocabulary(["[UNK]", "\ufffd2", "a b"]) == ["[UNK]", "\ufffd2", "\ufffd\ufffd2"]


def test_a_word_length_past_tensorflow_texts_int32_is_unbounded_not_a_crash(tmp_path):
    # WordPieceTokenizer(max_chars_per_word=2**29) ended in a TypeError inside tensorflow-text (exit 1).
    data = wordpiece_json(tokens_of(12))
    data["model"]["max_input_chars_per_word"] = 10**12
    assert read_folder(write_json(tmp_path, data), "wordpiece").build().max_chars_per_word == (2**31 - 1) // 4
    with pytest.raises(ValueError, match=r"`max_chars_per_word`, expected a positive integer of at most 536,870,911"):
        WordPieceTokenizer(SPECIALS, max_chars_per_word=2**29)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["added_tokens"].append(dict(d["added_tokens"][0], id=5, content="hello", special=False)),
     r"'added_tokens\[5\]': 'hello' is not special"),
    (lambda d: d["added_tokens"].append(dict(d["added_tokens"][0], id=12, content="covid")),
     r"'added_tokens\[5\]': 'covid' with id 12 is not the model's token"),
    (lambda d: d.__setitem__("added_tokens", {"[PAD]": 0}), "'added_tokens': expected a list, found dict"),
    (lambda d: d.__setitem__("post_processor", {"type": "Foo"}), "'post_processor.type': expected"),
    (lambda d: d.__setitem__("post_processor", {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}),
     "'post_processor.single': expected one special token before the text and one after"),
    (lambda d: d["model"].__setitem__("vocab", {("\ud800" if i == 8 else t): i for t, i in d["model"]["vocab"].items()}),
     r"'model.vocab': the token of id 8, '\\ud800', is not Unicode text"),
])
def test_wordpiece_added_tokens_post_processor_and_tokens_are_checked(tmp_path, edit, message):
    # Each was taken without a look (a token added to the text's matching, ids past the vocabulary, [CLS] and [SEP]
    # other than the template's), or ended in a TypeError inside tensorflow-text (a lone surrogate).
    data = wordpiece_json(tokens_of(12))
    edit(data)
    with pytest.raises(TokenizerFileError, match=message):
        read_folder(write_json(tmp_path, data), "wordpiece")


def test_the_wordpiece_templates_special_tokens_are_the_ones_packed(tmp_path):
    data = wordpiece_json(tokens_of(12))
    assert data["post_processor"]["type"] == "BertProcessing"
    data["post_processor"].update(cls=["w0", 7], sep=["w1", 8])  # ours packed [CLS] and [SEP] whatever it said
    tokenizer = read_folder(write_json(tmp_path, data), "wordpiece").build()
    assert (tokenizer.cls_id, tokenizer.sep_id) == (7, 8)


def test_a_bpe_merge_the_vocabulary_cannot_hold_is_refused_as_the_reference_does(tmp_path):
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4, "a": 5, "b": 6, "ab": 7}
    data = json.loads(tokenizers.ByteLevelBPETokenizer(vocab=vocab, merges=[("a", "b")])._tokenizer.to_str())
    data["added_tokens"] = []
    data["model"]["merges"].append(["b", "zz"])
    with pytest.raises(TokenizerFileError, match=r"'model.merges\[1\]': 'b zz' merges into or from 'zz', which the "
                       "vocabulary lacks"):
        read_folder(write_json(tmp_path, data), "byte_bpe")
    with pytest.raises(Exception, match="out of vocabulary"):
        tokenizers.Tokenizer.from_file(os.path.join(tmp_path, "tokenizer.json"))


@pytest.mark.parametrize("edit, message", [
    (lambda vocab: vocab.__setitem__(31, list(vocab[30])), r"is refused: piece 31 \('.*'\) repeats piece 30"),
    (lambda vocab: vocab.__setitem__(31, ["x" * 100, -5.0]), "is refused: piece 31 .* has 100 characters"),
])
def test_what_the_sentencepiece_model_refuses_names_the_tokenizer_json(albert_folder, tmp_path, edit, message):
    # They were refused naming an argument `proto` the user never passed.
    folder, _ = _edited_albert(albert_folder, tmp_path, lambda d: edit(d["model"]["vocab"]))
    with pytest.raises(TokenizerFileError, match=f"tokenizer.json, field 'model.vocab': {message}"):
        read_folder(str(folder), "sentencepiece")


def test_a_tokenizer_config_json_past_its_cap_is_refused_before_it_is_read(tmp_path):
    from bert_keras.text.base import MAX_TOKENIZER_CONFIG_BYTES

    write_json(tmp_path, wordpiece_json(tokens_of(12)))
    with open(tmp_path / "tokenizer_config.json", "wb") as f:  # sparse: its size is what is told
        f.truncate(MAX_TOKENIZER_CONFIG_BYTES + 1)
    with pytest.raises(TokenizerFileError, match=f"tokenizer_config.json: is {MAX_TOKENIZER_CONFIG_BYTES + 1:,} bytes; "
                       f"at most {MAX_TOKENIZER_CONFIG_BYTES:,} are read"):
        read_folder(str(tmp_path), "wordpiece")


@pytest.mark.parametrize("value, found", [("", "''"), (5, "5"), (None, "None")])
def test_a_charsmap_that_is_no_base64_string_is_refused(albert_folder, tmp_path, value, found):
    # An empty one was read as no normalisation, where the reference cannot read the file.
    folder, _ = _edited_albert(albert_folder, tmp_path, lambda d: _charsmap_step(d).__setitem__(
        "precompiled_charsmap", value))
    with pytest.raises(TokenizerFileError, match=f"precompiled_charsmap': expected a base64 string, found {found}"):
        read_folder(str(folder), "sentencepiece")
