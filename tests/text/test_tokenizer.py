import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras.text import WordPieceTokenizer, load_vocabulary, normalize_text


def _flat(ragged):
    """(batch, words, pieces) -> list of per-text id lists."""
    return ragged.merge_dims(1, 2).to_list()


# --- values on a tiny vocabulary ---


def test_tokenize_words_and_pieces(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    ids = tokenizer(["The quick brown fox!", "abc, xyz"])
    assert ids.dtype == tf.int32 and ids.ragged_rank == 2
    assert ids.to_list() == [[[5], [6, 7], [8], [9], [10]], [[13, 16, 17], [11], [1]]]


def test_uncased_lowercases_and_strips_accents_cased_keeps_them(tiny_vocab):
    uncased = WordPieceTokenizer(tiny_vocab, lower_case=True)
    cased = WordPieceTokenizer(tiny_vocab, lower_case=False)
    assert uncased(["Hello CAFÉ"]).to_list() == [[[18], [12]]]
    assert cased(["Hello café"]).to_list() == [[[22], [1]]]
    assert cased(["é"]).to_list() == [[[23]]]


def test_cjk_ideographs_are_words_of_their_own(tiny_vocab):
    assert WordPieceTokenizer(tiny_vocab)(["中文"]).to_list() == [[[20], [21]]]


def test_offsets_point_into_the_normalized_text(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    ids, starts, ends = tokenizer.tokenize_with_offsets(["the quick!"])
    assert ids.to_list() == [[[5], [6, 7], [10]]]
    assert starts.to_list() == [[[0], [4, 6], [9]]]
    assert ends.to_list() == [[[3], [6, 9], [10]]]
    text = tokenizer.normalize(["The QUICK!"]).numpy()[0]
    assert [text[s:e] for s, e in zip(starts.flat_values.numpy(), ends.flat_values.numpy())] == [
        b"the", b"qu", b"ick", b"!"
    ]


def test_scalar_and_column_inputs(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    assert tokenizer("the fox").to_list() == [[5], [9]]
    assert tokenizer(tf.constant([["the"], ["fox"]])).to_list() == [[[5]], [[9]]]


def test_special_tokens_are_read_from_the_vocabulary(tiny_vocab, vocab_path):
    shuffled = tiny_vocab[5:] + tiny_vocab[:5]  # [PAD] is now id 19, [MASK] 23
    assert WordPieceTokenizer(shuffled).get_special_tokens_dict() == {
        "vocab_size": 24,
        "start_of_sequence_id": 21,
        "end_of_segment_id": 22,
        "padding_id": 19,
        "mask_id": 23,
    }
    real = WordPieceTokenizer(vocab_path)
    assert real.get_special_tokens_dict() == {
        "vocab_size": 30522,
        "start_of_sequence_id": 101,
        "end_of_segment_id": 102,
        "padding_id": 0,
        "mask_id": 103,
    }
    assert real.unknown_id == 100 and real.token_to_id("hello") == 7592 and real.id_to_token(7592) == "hello"


def test_long_words_become_unknown_as_in_the_reference(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab + ["##" + "a"], max_chars_per_word=5)
    assert tokenizer(["aaaaa aaaaaa"]).to_list() == [[[13, 24, 24, 24, 24], [1]]]


# --- bad input ---


def test_empty_string_whitespace_and_empty_batch(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    assert tokenizer(["", " \t\n\u3000\u00a0 ", "the"]).to_list() == [[], [], [[5]]]
    empty = tokenizer(tf.constant([], tf.string))
    assert empty.shape.as_list() == [0, None, None] and empty.ragged_rank == 2 and empty.dtype == tf.int32


def test_control_characters_are_dropped_as_in_the_reference(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    # NUL, BEL, zero-width space, soft hyphen, BOM, U+FFFD and a private-use
    # character vanish; tab, newline and carriage return separate words.
    text = "th\x00e\x07 fo\u200bx\u00ad\ufeff\ufffd\ue000\tthe\r\nfox"
    assert normalize_text(tf.constant(text)).numpy() == b"the fox the  fox"
    assert tokenizer([text]).to_list() == [[[5], [9], [5], [9]]]


def test_invalid_utf8_bytes_are_replaced_then_dropped(tiny_vocab, hf_uncased):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    data = [b"the\xff fox", b"\xc3\x28the", b"\xe2\x82 fox\xf0\x9f\x98"]
    assert tokenizer(data).to_list() == [[[5], [9]], [[1], [5]], [[9]]]  # "(" is not in the vocabulary
    # Documented replacement: the result is the reference's on the text that
    # Python decodes with errors="replace" (U+FFFD, which BERT drops).
    assert normalize_text(tf.constant(data)).numpy().tolist() == [b"the fox", b"(the", b" fox"]
    decoded = [d.decode("utf-8", errors="replace") for d in data]
    normalizer = hf_uncased.backend_tokenizer.normalizer
    assert [normalizer.normalize_str(d).encode() for d in decoded] == [b"the fox", b"(the", b" fox"]


def test_string_of_100000_characters(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    ids = tokenizer(["the " * 25_000, "a" * 100_000])
    assert ids.shape[0] == 2
    assert ids[0].flat_values.shape[0] == 25_000 and set(ids[0].flat_values.numpy()) == {5}
    assert ids[1].to_list() == [[1]]  # one word of 100,000 characters > max_chars_per_word


def test_non_string_inputs_raise(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    with pytest.raises(TypeError, match=r"expected a tensor of dtype string.*dtype=int32"):
        tokenizer(tf.constant([1, 2]))
    with pytest.raises(TypeError, match=r"dtype=float"):
        tokenizer(np.array([1.0]))
    with pytest.raises(TypeError, match="argument `inputs`"):
        tokenizer([b"a", 3])
    with pytest.raises(ValueError, match=r"shape \(batch,\) or \(batch, 1\)"):
        tokenizer(tf.constant([["a", "b"]]))


def test_constructor_errors(tiny_vocab, tmp_path):
    with pytest.raises(ValueError, match=r"`mask_token`.*'\[MASK\]', which the vocabulary lacks"):
        WordPieceTokenizer([t for t in tiny_vocab if t != "[MASK]"])
    with pytest.raises(ValueError, match=r"`vocabulary`.*Received: vocabulary='/nonexistent/vocab.txt'"):
        WordPieceTokenizer("/nonexistent/vocab.txt")
    with pytest.raises(ValueError, match=r"`vocabulary`.*type int"):
        WordPieceTokenizer(3)
    with pytest.raises(ValueError, match=r"`lower_case`.*Received: lower_case='yes'"):
        WordPieceTokenizer(tiny_vocab, lower_case="yes")
    with pytest.raises(ValueError, match=r"`max_chars_per_word`.*Received: max_chars_per_word=0"):
        WordPieceTokenizer(tiny_vocab, max_chars_per_word=0)


def test_load_vocabulary_from_file(tiny_vocab, tmp_path, vocab_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\r\n".join(tiny_vocab) + "\r\n", encoding="utf-8")
    assert load_vocabulary(path) == tiny_vocab
    real = load_vocabulary(vocab_path)
    assert len(real) == 30522 and real[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]


# --- Keras and TensorFlow integration ---


def test_config_round_trip(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab, lower_case=False, max_chars_per_word=50, name="tok")
    config = tokenizer.get_config()
    assert config["vocabulary"] == tiny_vocab and config["lower_case"] is False
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(tokenizer))
    assert isinstance(restored, WordPieceTokenizer) and restored.get_config() == config
    assert restored(["Hello the"]).to_list() == tokenizer(["Hello the"]).to_list() == [[[22], [5]]]


@pytest.mark.slow
def test_in_tf_function_and_tf_data(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab)
    traced = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    assert traced(tf.constant(["the fox"])).to_list() == [[[5], [9]]]
    ds = tf.data.Dataset.from_tensor_slices(["the fox", "quick"]).batch(2).map(tokenizer)
    assert next(iter(ds)).to_list() == [[[5], [9]], [[6, 7]]]


# --- parity with the reference on real tweets ---


@pytest.mark.slow
def test_uncased_ids_equal_the_reference_on_all_tweets(uncased_tokenizer, hf_uncased, raw_tweets, tweets):
    assert len(raw_tweets) == 38158
    expected = hf_uncased(tweets, add_special_tokens=False)["input_ids"]
    # Our input: the file's raw bytes, invalid UTF-8 included (4,934 tweets).
    ours = _flat(uncased_tokenizer(tf.constant(raw_tweets)))
    mismatches = [i for i, (a, b) in enumerate(zip(ours, expected)) if a != b]
    assert mismatches == []  # 100.00% of 38,158 tweets
    assert sum(map(len, ours)) == 1_174_695


@pytest.mark.slow
def test_cased_ids_equal_the_reference_on_all_tweets(cased_tokenizer, hf_cased, tweets):
    expected = hf_cased(tweets, add_special_tokens=False)["input_ids"]
    ours = _flat(cased_tokenizer(tf.constant(tweets)))
    mismatches = [i for i, (a, b) in enumerate(zip(ours, expected)) if a != b]
    assert mismatches == []  # 100.00% of 38,158 tweets
    # The cased path really differs: capitals are not in this uncased vocabulary.
    assert sum(a != b for a, b in zip(ours[:2000], _flat(cased_tokenizer(tf.constant([t.lower() for t in tweets[:2000]]))))) > 500


def test_nfkc_characters_that_tf_text_lower_casing_changes(uncased_tokenizer, hf_uncased):
    # Full-width letters, ligatures, superscripts and circled letters: NFKC case
    # folding (tensorflow-text's own lower-casing) rewrites them, the reference
    # and we keep them.
    texts = ["Ｈｅｌｌｏ", "ﬁne", "x²", "Ⓐ", "ℌ", "Ǆ", "İstanbul", "STRASSE ß"]
    expected = hf_uncased(texts, add_special_tokens=False)["input_ids"]
    assert _flat(uncased_tokenizer(texts)) == expected


def test_special_token_strings_in_text_are_plain_text(uncased_tokenizer, hf_uncased):
    # Documented difference: the reference maps a literal "[MASK]" in the input
    # to the [MASK] id; an in-graph tokenizer treats it as text, as TF Hub's does.
    assert hf_uncased("[MASK]", add_special_tokens=False)["input_ids"] == [103]
    assert _flat(uncased_tokenizer(["[MASK]"])) == [[1031, 7308, 1033]]


# --- the two tokenization paths ---

CODE_POINTS = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


@pytest.mark.slow
def test_fast_path_equals_exact_path_outside_the_detour_table(uncased_tokenizer):
    from bert_keras.text import _unicode_tables as tables

    # Every code point between two letters, normalised as the tokenizer does.
    text = normalize_text(tf.constant([f"a{chr(cp)}b" for cp in CODE_POINTS]))
    fast = uncased_tokenizer._fast_path(text)[0].merge_dims(1, 2).to_list()
    exact = uncased_tokenizer._exact_path(text)[0].merge_dims(1, 2).to_list()
    differ = [cp for cp, f, e in zip(CODE_POINTS, fast, exact) if f != e]
    detour = [cp for first, last in tables.SPLIT_DETOUR_RANGES for cp in range(first, last + 1)]
    assert differ == detour and len(detour) == 398


@pytest.mark.slow
def test_every_code_point_between_letters_equals_the_reference(uncased_tokenizer, hf_uncased):
    texts = [f"x{chr(cp)}y" for cp in CODE_POINTS if cp < 0x20000]
    expected = hf_uncased(texts, add_special_tokens=False)["input_ids"]
    ours = _flat(uncased_tokenizer(tf.constant(texts)))
    assert [t for t, a, b in zip(texts, ours, expected) if a != b] == []


def test_mixed_batch_keeps_the_order_of_rows(tiny_vocab):
    tokenizer = WordPieceTokenizer(tiny_vocab, max_chars_per_word=10)
    texts = ["the fox", "a" * 11 + " the", "\u2e43the", "fox", ""]  # fast, long word, detour char, fast
    together = tokenizer.tokenize_with_offsets(texts)
    alone = [tokenizer.tokenize_with_offsets([text]) for text in texts]
    for i in range(3):
        assert together[i].to_list() == [a[i].to_list()[0] for a in alone]
    # U+2E43 is punctuation for ICU, not for the reference: one unknown word.
    assert together[0].to_list() == [[[5], [9]], [[1], [5]], [[1]], [[9]], []]
    # Offsets of the 11-character word (one unknown piece) and of "the" after it.
    assert together[1].to_list()[1] == [[0], [12]] and together[2].to_list()[1] == [[11], [15]]
    assert together[1].to_list()[2] == [[0]] and together[2].to_list()[2] == [[6]]


def test_symbolic_call_explains_the_ragged_output(tiny_vocab):
    with pytest.raises(NotImplementedError, match="use BertPreprocessor inside a model"):
        WordPieceTokenizer(tiny_vocab)(keras.Input(shape=(), dtype="string"))


# transformers' options of BertTokenizerFast / BertNormalizer: (do_lower_case, strip_accents, tokenize_chinese_chars).
_OPTIONS = [(True, False, True), (True, None, False), (True, False, False), (False, None, False), (False, False, True)]
_VARIED = [
    "Héllo CAFÉ naïve résumé Ångström ÉTÉ", "e\u0301te\u0300 \u0301x", "中文字符 日本語の文章 한국어 中a文b", "Straße ΟΔΟΣ İstanbul ǅ",
    "ﬁne Ｆｕｌｌ ½ x² ㎏", "x\x00y\x01z\u200b\ufeff 😀 👨\u200d👩\u200d👧", "Ǆemal Ⱟ \ua7cb 𐕰", "  tabs\tand\nnewlines  ",
    "中" * 120, "naïve" * 30, "",
]


@pytest.mark.parametrize("lower_case, strip_accents, chinese", _OPTIONS)
def test_strip_accents_and_tokenize_chinese_chars_as_transformers(vocab_path, tweets, lower_case, strip_accents,
                                                                   chinese):
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertTokenizerFast(vocab=vocab_path, do_lower_case=lower_case,
                                               strip_accents=strip_accents, tokenize_chinese_chars=chinese)
    tokenizer = WordPieceTokenizer(vocab_path, lower_case=lower_case, strip_accents=strip_accents,
                                   tokenize_chinese_chars=chinese)
    texts = tweets[-200:] + _VARIED
    ids, starts, ends = (x.merge_dims(1, 2).to_list() for x in tokenizer.tokenize_with_char_offsets(tf.constant(texts)))
    expected = reference(texts, add_special_tokens=False, return_offsets_mapping=True)
    assert [t for t, a, b in zip(texts, ids, expected["input_ids"]) if a != b] == []
    assert [t for t, s, e, b in zip(texts, starts, ends, expected["offset_mapping"])
            if list(zip(s, e)) != [tuple(o) for o in b]] == []
    if lower_case and strip_accents is False:  # accents kept, lower-cased
        assert tokenizer.normalize(["CAFÉ"]).numpy()[0].decode() == "café"
    if not chinese:  # a run of ideographs is one word
        assert len(tokenizer(["中文字"]).to_list()[0]) == 1


def test_options_read_from_tokenizer_config_and_tokenizer_json(vocab_path, tmp_path):
    import json
    import shutil

    from bert_keras.text.folders import read_folder

    shutil.copy(vocab_path, tmp_path / "vocab.txt")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": True, "strip_accents": False, "tokenize_chinese_chars": False}))
    tokenizer = WordPieceTokenizer.from_folder(str(tmp_path))
    assert (tokenizer.lower_case, tokenizer.strip_accents, tokenizer.tokenize_chinese_chars) == (True, False, False)
    assert tokenizer.tokenizer_config() == {"do_lower_case": True, "strip_accents": False,
                                            "tokenize_chinese_chars": False}
    restored = WordPieceTokenizer.from_config(tokenizer.get_config())
    assert (restored.strip_accents, restored.tokenize_chinese_chars) == (False, False)
    # tokenizer.json's BertNormalizer fields win over tokenizer_config.json.
    vocab = load_vocabulary(vocab_path)
    normalizer = {"type": "BertNormalizer", "lowercase": True, "strip_accents": None, "handle_chinese_chars": True,
                  "clean_text": True}
    data = {"normalizer": normalizer, "pre_tokenizer": {"type": "BertPreTokenizer"},
            "model": {"type": "WordPiece", "continuing_subword_prefix": "##",
                      "vocab": {token: i for i, token in enumerate(vocab)}}}
    json_folder = tmp_path / "json"
    json_folder.mkdir()
    (json_folder / "tokenizer_config.json").write_text(json.dumps({"strip_accents": False}))
    for fields, expected in (({}, (None, True)), ({"strip_accents": False, "handle_chinese_chars": False}, (False, False))):
        (json_folder / "tokenizer.json").write_text(json.dumps(dict(data, normalizer=dict(normalizer, **fields))))
        built = read_folder(str(json_folder), "wordpiece").build()
        assert (built.strip_accents, built.tokenize_chinese_chars) == expected
    for fields, key in (({"lowercase": False, "strip_accents": True}, "normalizer.strip_accents"),
                        ({"clean_text": False}, "normalizer.clean_text"),
                        ({"handle_chinese_chars": "yes"}, "normalizer.handle_chinese_chars")):
        (json_folder / "tokenizer.json").write_text(json.dumps(dict(data, normalizer=dict(normalizer, **fields))))
        with pytest.raises(ValueError, match=f"tokenizer.json, field '{key}': expected"):
            read_folder(str(json_folder), "wordpiece")
    with pytest.raises(ValueError, match=r"argument `strip_accents`.*Received: strip_accents=True with lower_case=False"):
        WordPieceTokenizer(vocab, lower_case=False, strip_accents=True)
