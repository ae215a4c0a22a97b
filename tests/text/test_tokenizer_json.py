"""Folders as transformers 5 saves them: `tokenizer.json` and `tokenizer_config.json` only, for every kind.

Tiny tokenizers of each kind (RoBERTa's byte-level BPE, ALBERT's Unigram, BERT's and DistilBERT's WordPiece) are
trained on tweets and saved by transformers' `save_pretrained`; the folder reader (`read_folder`, what every
`from_checkpoint`, `SentenceEncoder`, convert, finetune and explain go through) must give the `tokenizers` library's
ids on the same file. Literal special tokens in the text are text for both (`encode_special_tokens`).
"""

import base64
import copy
import io
import json
import os

import pytest
import tensorflow as tf

from bert_keras.text.base import TokenizerFileError
from bert_keras.text.folders import read_folder
from bert_keras.text.tokenizer_json import write_model_proto
from bert_keras.text.unigram import _typed_fields, read_pieces
from tests.helpers import ids_per_row

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

# Accents, emoji, CJK, control characters, whitespace runs, tabs and newlines, the empty string, over-long words,
# zero-width characters, contractions, ALBERT's quotes, NFKD expansions, literal special tokens.
EDGE_CASES = [
    "", " ", "   ", "\t\n ", "a", "Hello  world", " hi\t\tyo \n", "  Héllo\t ``World''  ", "```x''''y'",
    "don't 's we'll 'LL ''s it'sa I'm they've you're 're", "héllo café naïve É", "e\u0301te\u0300 \u0301x",
    "😀 👨\u200d👩\u200d👧 🇫🇷", "中文字符 日本語 한국어", "x\x00y\x01z\x7f\x9f", "zero\u200bwidth\u200c\u200d\ufeff",
    "nbsp\u00a0x\u3000y\u2009z\u202f", "ﬁne Ｆｕｌｌ ½ x² ㎏", "ΟΔΟΣ İstanbul ǅ", "1,000,000 ok 5,", "!!!???...",
    "x" * 3000, "word " * 600, "\ufffd invalid", "a\r\nb", "[MASK] [CLS] <s> <mask> </s>",
]
KINDS = {"roberta": "byte_bpe", "albert": "sentencepiece", "bert": "wordpiece", "distilbert": "wordpiece"}


def _charsmap(proto):
    """The `precompiled_charsmap` of a SentencePiece model (normalizer_spec, field 2)."""
    spec = next(value for number, _, value in _typed_fields(proto) if number == 3)
    return next(value for number, _, value in _typed_fields(spec) if number == 2)


def save_transformers_tokenizer(name, folder, tweets, size=400):
    """A tiny tokenizer of family `name`, trained on tweets and saved by transformers' `save_pretrained`: the
    folder holds tokenizer.json and tokenizer_config.json only (the slow tokenizer's files, if any, deleted)."""
    folder = os.fspath(folder)
    if name == "roberta":
        trainer = tokenizers.ByteLevelBPETokenizer()
        trainer.train_from_iterator(tweets[:3000], vocab_size=size, min_frequency=2,
                                    special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False)
        merges = [tuple(m) for m in json.loads(trainer._tokenizer.to_str())["model"]["merges"]]
        tokenizer = transformers.RobertaTokenizerFast(vocab=trainer.get_vocab(), merges=merges)
    elif name == "albert":
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter([t.lower() for t in tweets[:3000] if t.strip()]), model_writer=model,
            vocab_size=size, model_type="unigram", pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
            control_symbols=["[CLS]", "[SEP]", "[MASK]"], character_coverage=0.9995, minloglevel=2, num_threads=1)
        proto = model.getvalue()
        tokenizer = transformers.AlbertTokenizerFast(vocab=[(p, s) for p, s, _ in read_pieces(proto)],
                                                     _spm_precompiled_charsmap=_charsmap(proto))
    else:
        trainer = tokenizers.BertWordPieceTokenizer(lowercase=True)
        trainer.train_from_iterator(tweets[:3000], vocab_size=size, show_progress=False,
                                    special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        cls = transformers.BertTokenizerFast if name == "bert" else transformers.DistilBertTokenizerFast
        tokenizer = cls(vocab=trainer.get_vocab())
    tokenizer.save_pretrained(folder)
    for file in os.listdir(folder):
        if file not in ("tokenizer.json", "tokenizer_config.json"):
            os.remove(os.path.join(folder, file))
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tweets):
    return {name: save_transformers_tokenizer(name, tmp_path_factory.mktemp(name), tweets) for name in KINDS}


def reference(folder):
    tokenizer = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tokenizer.encode_special_tokens = True  # a literal "<mask>" is text, as for ours
    return tokenizer


def differences(folder, kind, texts):
    ours = read_folder(folder, kind).build()
    ids = ids_per_row(ours.tokenize(tf.constant(texts)))
    expected = [e.ids for e in reference(folder).encode_batch(texts, add_special_tokens=False)]
    return [text for text, a, b in zip(texts, ids, expected) if a != b]


@pytest.mark.parametrize("name", sorted(KINDS))
def test_ids_equal_the_tokenizers_library(folders, tweets, name):
    folder = folders[name]
    assert sorted(os.listdir(folder)) == ["tokenizer.json", "tokenizer_config.json"]
    found = read_folder(folder, KINDS[name])
    assert found.file == os.path.join(folder, "tokenizer.json") and found.files is None
    assert len(found.tokens()) == reference(folder).get_vocab_size()
    assert differences(folder, KINDS[name], tweets[-300:] + EDGE_CASES) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["albert", "roberta"])
def test_ids_equal_the_tokenizers_library_on_20000_tweets(folders, tweets, name):
    # ALBERT's scores are added in float64, as tokenizers' Unigram does (in float32, as the sentencepiece library
    # does, paths of equal score up to rounding, "...." as "..." "." or "." "...", went the other way in 16 tweets).
    bad = differences(folders[name], KINDS[name], tweets[-20_000:])
    assert len(bad) == 0, bad[:3]


def test_albert_options_and_special_tokens_come_from_the_normalizer(folders, tmp_path):
    tokenizer = read_folder(folders["albert"], "sentencepiece").build()
    assert (tokenizer.lower_case, tokenizer.keep_accents) == (True, False)
    assert (tokenizer.cls_token, tokenizer.sep_token, tokenizer.unknown_token) == ("[CLS]", "[SEP]", "<unk>")
    # keep_accents and a cased model: no NFKD/StripAccents, no Lowercase; tokenizer_config.json says otherwise.
    data = json.load(open(os.path.join(folders["albert"], "tokenizer.json"), encoding="utf-8"))
    data["normalizer"]["normalizers"] = [step for step in data["normalizer"]["normalizers"]
                                         if step["type"] not in ("NFKD", "StripAccents", "Lowercase")]
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "keep_accents": False}))
    tokenizer = read_folder(str(tmp_path), "sentencepiece").build()
    assert (tokenizer.lower_case, tokenizer.keep_accents) == (False, True)
    assert differences(str(tmp_path), "sentencepiece", ["Héllo Wörld ÉTÉ", "ﬁne ΟΔΟΣ"]) == []


def test_bpe_merges_as_pairs_or_strings(folders, tmp_path):
    data = json.load(open(os.path.join(folders["roberta"], "tokenizer.json"), encoding="utf-8"))
    assert isinstance(data["model"]["merges"][0], list)  # as tokenizers 0.23 writes them
    data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    assert differences(str(tmp_path), "byte_bpe", ["Hello world, it's me!", "naïve 😀"]) == []
    # add_prefix_space from the pre-tokenizer: " Hello" and "Hello" cut alike.
    data["pre_tokenizer"]["add_prefix_space"] = True
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    assert read_folder(str(tmp_path), "byte_bpe").build().add_prefix_space is True
    assert differences(str(tmp_path), "byte_bpe", ["Hello world", " Hello"]) == []


def _edited(folder, tmp_path, edit):
    data = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8"))
    edit(data)
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    return str(tmp_path)


def _set(path, value):
    def edit(data):
        *parents, last = path
        for key in parents:
            data = data[key]
        data[last] = value
    return edit


@pytest.mark.parametrize("name, edit, part", [
    ("roberta", _set(["model", "type"], "WordLevel"), "'model.type'"),
    ("roberta", _set(["normalizer"], {"type": "NFC"}), "'normalizer.type': expected no normalizer.*found 'NFC'"),
    ("roberta", _set(["pre_tokenizer", "use_regex"], False), "'pre_tokenizer.use_regex'"),
    ("roberta", _set(["model", "dropout"], 0.1), "'model.dropout'"),
    ("roberta", _set(["model", "merges", 3], "a b c"), r"'model.merges\[3\]'"),
    ("roberta", lambda d: d["added_tokens"].append(dict(copy.deepcopy(d["added_tokens"][0]), id=7, content=next(
        t for t, i in d["model"]["vocab"].items() if i == 7), special=False)), r"'added_tokens\[5\]'.*not special"),
    ("roberta", lambda d: d["added_tokens"].append(dict(d["added_tokens"][0], id=10**6, content="<new>")),
     r"'added_tokens\[5\]'.*not the model's token"),
    ("albert", _set(["model", "type"], "BPE"), "'model.type'"),
    ("albert", lambda d: d["normalizer"]["normalizers"].insert(3, {"type": "NFC"}),
     r"'normalizer.normalizers\[3\]'.*ALBERT's normalizer"),
    ("albert", _set(["pre_tokenizer", "pretokenizers", 1, "prepend_scheme"], "first"),
     r"'pre_tokenizer.pretokenizers\[1\].prepend_scheme'"),
    ("albert", _set(["pre_tokenizer"], {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}),
     "'pre_tokenizer.type': expected 'Sequence'"),
    ("albert", _set(["model", "byte_fallback"], True), "'model.byte_fallback'"),
    ("albert", _set(["model", "vocab", 9], ["x", "high"]), r"'model.vocab\[9\]'"),
    ("albert", _set(["model", "unk_id"], None), "'model.unk_id'"),
])
def test_what_the_graph_cannot_reproduce_is_refused_naming_the_part(folders, tmp_path, name, edit, part):
    folder = _edited(folders[name], tmp_path, edit)
    with pytest.raises(TokenizerFileError, match=f"tokenizer.json, field {part}"):
        read_folder(folder, KINDS[name])


def test_model_proto_round_trip_and_the_sentencepiece_op_reads_it():
    pieces = [("<pad>", 0.0, 3), ("<unk>", 0.0, 2), ("\u2581a", -1.0, 1), ("b", -2.5, 1), ("\u2581", -3.0, 1)]
    proto = write_model_proto(pieces)
    assert read_pieces(proto) == pieces
    processor = spm.SentencePieceProcessor(model_proto=proto)
    assert processor.encode("a b", out_type=str) == ["\u2581a", "\u2581", "b"]
    assert base64.b64encode(proto)  # bytes, as the layer's config stores them


@pytest.mark.slow  # 5 s in the full run of 450d6b9
@pytest.mark.parametrize("name", ["albert", "roberta", "bert"])
def test_tokenizer_files_written_from_tokenizer_json_read_back_the_same(folders, tweets, tmp_path, name):
    from bert_keras.text.folders import tokenizer_from_folder, write_tokenizer_files

    tokenizer = read_folder(folders[name], KINDS[name]).build()
    paths = write_tokenizer_files(tokenizer, tmp_path)
    assert sorted(os.path.basename(p) for p in paths.values()) == sorted(tokenizer.files.values())
    assert set(paths) == set(tokenizer.files)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer.tokenizer_config()))
    again = tokenizer_from_folder(str(tmp_path), KINDS[name])
    assert read_folder(str(tmp_path), KINDS[name]).files is not None  # its own files, not a tokenizer.json
    texts = tf.constant(tweets[-100:] + EDGE_CASES)
    assert again.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()
    with pytest.raises(FileExistsError):
        write_tokenizer_files(tokenizer, tmp_path)  # nothing replaced
