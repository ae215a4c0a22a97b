"""Module pairs of the family read back as weights: `load_checkpoint(PAIR)` gives the folder's encoder and tokenizer.

`bert-keras convert FOLDER --out PAIR` writes ALBERT's SentencePiece and RoBERTa's byte-level BPE as the modules'
assets, and the tokenizer's options (`do_lower_case`, `keep_accents`, `add_prefix_space`) beside the encoder module
(`assets.extra/tokenizer/tokenizer_config.json`). Reading the pair back must give the folder's encoder (same
outputs on the same ids) and the folder's tokenizer, options included: a cased ALBERT that keeps accents and a
RoBERTa that adds a prefix space tell them apart on the tweets and edge cases. The folders are the tiny random
models of tests/test_family_workflows.py.
"""

import io
import json
import os
import shutil

import numpy as np
import pytest

from bert_keras import cli
from bert_keras.checkpoints import CheckpointError, ConfigError, load_checkpoint
from bert_keras.export import convert_to_hub
from bert_keras.formats.hub_module import TOKENIZER_CONFIG_FILE, TOKENIZER_FOLDER
from bert_keras.text import BertPreprocessor
from bert_keras.text.byte_bpe import BytePairTokenizer
from bert_keras.text.sentencepiece import SentencePieceTokenizer
from tests.test_family_workflows import SEQ, make_family_folder, texts, tweets  # noqa: F401 (fixtures)
from tests.text.test_sentencepiece import albert_reference_text

spm = pytest.importorskip("sentencepiece")

# name: (family, tokenizer_config.json written over the folder's: the options the pair must keep)
FOLDERS = {
    "albert_cased": ("albert", {"do_lower_case": False, "keep_accents": True}),
    "roberta_prefix": ("roberta", {"add_prefix_space": True}),
    "electra": ("electra", None),
    "albert": ("albert", None),
    "roberta": ("roberta", None),
}
# The options as the tokenizer names them, for each kind.
OPTIONS = {SentencePieceTokenizer: ("lower_case", "keep_accents"), BytePairTokenizer: ("add_prefix_space",)}


class _Read:
    """A folder, its pair, and what each reads as (loaded once: 2-4 s each, the tokenizers' first calls included)."""

    def __init__(self, folder, pair, texts):  # noqa: F811
        self.folder, self.pair = folder, pair
        self.expected = load_checkpoint(folder, with_heads=False)
        self.expected_tokenizer = self.expected.tokenizer(folder)
        self.expected_ids = _ids(self.expected_tokenizer, texts)
        self.loaded = load_checkpoint(pair)
        self.tokenizer = self.loaded.tokenizer(pair)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory, tweets, texts):  # noqa: F811 (the imported fixtures)
    """`pair(name)` -> `_Read` of the folder and its pair, each converted once, on first use (7 s a pair)."""
    built = {}

    def pair(name):
        if name not in built:
            family, options = FOLDERS[name]
            folder = tmp_path_factory.mktemp(name) / "folder"
            make_family_folder(family, folder, tweets)
            if options is not None:
                (folder / "tokenizer_config.json").write_text(json.dumps(options))
            out = str(folder.parent / "pair")
            convert_to_hub(str(folder), out, seq_length=SEQ)
            built[name] = _Read(str(folder), out, texts)
        return built[name]

    return pair


def _ids(tokenizer, texts):  # noqa: F811
    return tokenizer(np.array(texts)).to_list()


def _copy(pair, tmp_path):
    copy = str(tmp_path / "copy")
    shutil.copytree(pair, copy)
    return copy


@pytest.mark.parametrize("name", ["albert_cased", "roberta_prefix", pytest.param("electra", marks=pytest.mark.slow),
                                  pytest.param("albert", marks=pytest.mark.slow),
                                  pytest.param("roberta", marks=pytest.mark.slow)])
def test_a_pair_reads_back_as_the_folder_s_encoder_and_tokenizer(pairs, texts, name):  # noqa: F811
    read = pairs(name)
    expected, loaded = read.expected, read.loaded
    assert (loaded.summary.format, loaded.tokenizer_kind) == ("hub_module", expected.tokenizer_kind)
    assert loaded.tokenizer_folder == os.path.join(read.pair, "encoder", TOKENIZER_FOLDER)
    assert loaded.do_lower_case == expected.do_lower_case

    ours, theirs = read.tokenizer, read.expected_tokenizer
    assert type(ours) is type(theirs)
    for option in OPTIONS.get(type(ours), ("lower_case",)):
        assert getattr(ours, option) == getattr(theirs, option), option
    assert _ids(ours, texts) == read.expected_ids

    packed = BertPreprocessor(tokenizer=theirs, seq_length=SEQ)(np.array(texts))
    np.testing.assert_array_equal(BertPreprocessor(tokenizer=ours, seq_length=SEQ)(np.array(texts))["input_word_ids"],
                                  packed["input_word_ids"])
    sequence = np.asarray(loaded.encoder(packed)["sequence_output"])
    assert float(np.abs(sequence - np.asarray(expected.encoder(packed)["sequence_output"])).max()) <= 1e-6


@pytest.mark.slow
def test_the_encoder_module_alone_reads_as_the_pair(pairs, texts):  # noqa: F811
    read = pairs("albert_cased")
    loaded = load_checkpoint(os.path.join(read.pair, "encoder"))
    tokenizer = loaded.tokenizer()
    assert (tokenizer.lower_case, tokenizer.keep_accents) == (False, True)
    assert _ids(tokenizer, texts) == read.expected_ids


@pytest.mark.slow  # 8 s in the full run of 450d6b9
@pytest.mark.parametrize("name, defaults", [("albert_cased", {"lower_case": True, "keep_accents": False}),
                                            ("roberta_prefix", {"add_prefix_space": False})])
def test_the_options_are_what_the_record_keeps(pairs, texts, tmp_path, name, defaults):  # noqa: F811
    read = pairs(name)
    kind = type(read.expected_tokenizer)
    # The texts tell the options apart: with the defaults, the folder's files give other ids.
    assert _ids(kind.from_folder(read.folder, **defaults), texts) != read.expected_ids
    assert _ids(read.tokenizer, texts) == read.expected_ids
    with open(os.path.join(read.pair, "encoder", TOKENIZER_FOLDER, TOKENIZER_CONFIG_FILE), encoding="utf-8") as f:
        assert json.load(f) == FOLDERS[name][1]

    # A pair written before the options were recorded: its assets' folder, the tokenizer's defaults.
    old = _copy(read.pair, tmp_path)
    shutil.rmtree(os.path.join(old, "encoder", TOKENIZER_FOLDER))
    loaded = load_checkpoint(old)
    assert loaded.tokenizer_folder == os.path.join(old, "encoder", "assets")
    tokenizer = loaded.tokenizer()
    # ALBERT's do_lower_case is the module's variable (False here); keep_accents and add_prefix_space go back to False.
    assert {option: getattr(tokenizer, option) for option in defaults} == (
        {"lower_case": False, "keep_accents": False} if kind is SentencePieceTokenizer else defaults)
    assert _ids(tokenizer, texts) != read.expected_ids


@pytest.mark.slow
def test_explain_reads_an_albert_pair(pairs, tmp_path, capsys):
    pair = pairs("albert_cased").pair
    out = str(tmp_path / "explained")
    status = cli.main(["explain", "--modules", pair, "--out", out, "--seq-length", "12", "Héllo World, the cat sat"])
    assert status == 0
    printed = capsys.readouterr().out
    assert "[CLS]" in printed and "[SEP]" in printed
    assert "attention.html" in os.listdir(out)
    with open(os.path.join(out, "attention.json"), encoding="utf-8") as f:
        assert json.load(f)["source"] == os.path.abspath(pair)


def _rewrite_vocab_json(path, extra):
    with open(path, encoding="utf-8") as f:
        vocabulary = json.load(f)
    vocabulary.update({token: len(vocabulary) + i for i, token in enumerate(extra)})
    with open(path, "w", encoding="utf-8") as f:
        json.dump(vocabulary, f)
    return len(vocabulary)


def test_a_bpe_vocabulary_of_another_size_is_refused_naming_vocab_json(pairs, tmp_path):
    pair = pairs("roberta_prefix").pair
    copy = _copy(pair, tmp_path)
    for folder in ("assets", TOKENIZER_FOLDER):  # the module's asset and the tokenizer's copy, alike
        size = _rewrite_vocab_json(os.path.join(copy, "encoder", folder, "vocab.json"), ["added"])
    with pytest.raises(CheckpointError, match=rf"tokenizer/vocab\.json, tensor .*: the vocabulary has {size} tokens "
                                              rf"but the word embeddings .* have {size - 1} rows"):
        load_checkpoint(copy)


def test_a_sentencepiece_model_of_another_size_is_refused_naming_it(pairs, tweets, tmp_path):  # noqa: F811
    pair = pairs("albert_cased").pair
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([albert_reference_text(t) for t in tweets[:2000] if t.strip()]), model_writer=model,
        vocab_size=500, model_type="unigram", pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2, num_threads=1,
    )
    copy = _copy(pair, tmp_path)
    for folder in ("assets", TOKENIZER_FOLDER):
        with open(os.path.join(copy, "encoder", folder, "spiece.model"), "wb") as f:
            f.write(model.getvalue())
    with pytest.raises(CheckpointError, match=r"tokenizer/spiece\.model, tensor .*: the vocabulary has 500 tokens but "
                                              r"the word embeddings .* have 600 rows"):
        load_checkpoint(copy)


def test_a_changed_tokenizer_copy_or_option_is_refused_naming_the_file(pairs, tmp_path):
    pair = pairs("roberta_prefix").pair
    copy = _copy(pair, tmp_path)
    _rewrite_vocab_json(os.path.join(copy, "encoder", TOKENIZER_FOLDER, "vocab.json"), ["added"])
    with pytest.raises(CheckpointError, match=r"tokenizer/vocab\.json: differs from .*encoder/assets/vocab\.json, the "
                                              r"vocab_file the module's graph tokenizes with"):
        load_checkpoint(copy)

    shutil.rmtree(copy)
    copy = _copy(pair, tmp_path)
    with open(os.path.join(copy, "encoder", TOKENIZER_FOLDER, TOKENIZER_CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump({"add_prefix_space": "yes"}, f)
    with pytest.raises(ConfigError, match=r"tokenizer_config\.json, field 'add_prefix_space': expected true or false, "
                                          r"found 'yes'"):
        load_checkpoint(copy)
