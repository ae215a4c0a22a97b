"""One way from a folder to encoder, tokenizer and preprocessor (`checkpoints.load_pretrained`): the tasks, the sentence
encoder and the inspector read a folder alike, the format detected once, the same vocabulary fallback (a
`tokenizer.json` where there is no `vocab.txt`), the same refusals, and no call back up the layers on the way."""

import json
import os
import shutil
import sys

import numpy as np
import pytest

from bert_keras import formats
from bert_keras.checkpoints import load_pretrained, pretrained
from bert_keras.formats import CheckpointError
from bert_keras.inspection import Inspector
from bert_keras.tasks.sentence_encoder import SentenceEncoder
from bert_keras.tasks import BertClassifier
from bert_keras.text import SentencePieceTokenizer, WordPieceTokenizer
from tests import sentence_models
from tests.test_layering import RANK

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TEXTS = ["the good day", "a bad day, not ok?", "Naïve café"]
# The three ways in, each reading a folder through `load_pretrained`.
READERS = {
    "task": lambda path, **kw: BertClassifier.from_checkpoint(path, num_classes=2, seq_length=kw.get("seq_length", 12)),
    "sentence_encoder": lambda path, **kw: SentenceEncoder.from_checkpoint(
        path, pooling="mean", max_seq_length=kw.get("seq_length", 12)),
    "inspector": lambda path, **kw: Inspector.from_checkpoint(path, seq_length=kw.get("seq_length", 12)),
}


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return sentence_models.write_tiny_bert(str(tmp_path_factory.mktemp("bert") / "bert"))


def _tokenizer_json(vocabulary, lower_case=True):
    """A Hugging Face `tokenizer.json` of BERT's WordPiece, as transformers 5 saves it in place of vocab.txt."""
    return {"normalizer": {"type": "BertNormalizer", "lowercase": lower_case, "strip_accents": None,
                           "clean_text": True, "handle_chinese_chars": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                      "vocab": {token: i for i, token in enumerate(vocabulary)}}}


@pytest.fixture(scope="module")
def json_only(bert, tmp_path_factory):
    """The tiny BERT with its vocabulary in tokenizer.json only."""
    folder = str(tmp_path_factory.mktemp("json_only") / "bert")
    shutil.copytree(bert, folder)
    os.remove(os.path.join(folder, "vocab.txt"))
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(_tokenizer_json(sentence_models.VOCAB), f)
    return folder


def _tokenizer_of(model):
    return (model.preprocessor if hasattr(model, "preprocessor") else model).tokenizer


@pytest.fixture
def detections(monkeypatch):
    """Counts `detect_format` calls, wherever they are made from."""
    calls = []
    original = formats.detect_format

    def spy(path):
        calls.append(path)
        return original(path)

    for module in (formats, pretrained, sys.modules["bert_keras.tasks.sentence_encoder"]):
        monkeypatch.setattr(module, "detect_format", spy)
    return calls


@pytest.mark.parametrize("reader", sorted(READERS))
def test_each_reader_detects_the_format_once(bert, detections, reader):
    model = READERS[reader](bert)
    assert detections == [bert]
    assert _tokenizer_of(model).vocabulary == sentence_models.VOCAB


def test_load_pretrained_gives_the_encoder_tokenizer_and_preprocessor(bert, detections):
    result = load_pretrained(bert)
    assert (result.format, result.tokenizer_folder, result.seq_length) == ("huggingface", bert, 40)  # 40 positions
    assert result.preprocessor.tokenizer is result.tokenizer and isinstance(result.tokenizer, WordPieceTokenizer)
    assert result.encoder is result.loaded.encoder and result.loaded.vocab_file == os.path.join(bert, "vocab.txt")
    assert load_pretrained(bert, default_seq_length=16, format="huggingface").seq_length == 16
    assert detections == [bert]  # a format given is not detected again


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_falls_back_to_tokenizer_json(bert, json_only, reader):
    """transformers 5 saves no vocab.txt: the tasks and the inspector read the tokenizer.json the sentence encoder
    read, with the ids vocab.txt gives."""
    ours = _tokenizer_of(READERS[reader](json_only))
    expected = WordPieceTokenizer(os.path.join(bert, "vocab.txt"))
    assert (ours.vocabulary, ours.lower_case) == (expected.vocabulary, True)
    assert ours(TEXTS).to_list() == expected(TEXTS).to_list()


def test_a_tokenizer_json_of_another_size_is_refused_naming_it(json_only, tmp_path):
    folder = str(shutil.copytree(json_only, tmp_path / "bert"))
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(_tokenizer_json(sentence_models.VOCAB + ["extra"]), f)
    for reader in READERS.values():
        with pytest.raises(CheckpointError, match=rf"{os.path.join(folder, 'tokenizer.json')}, tensor "
                                                  rf"'.*word_embeddings.*': the vocabulary has 72 tokens but the word "
                                                  r"embeddings .* have 71 rows"):
            reader(folder)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_refuses_a_folder_without_its_tokenizer_in_one_wording(bert, tmp_path, reader):
    folder = str(shutil.copytree(bert, tmp_path / "bert"))
    os.remove(os.path.join(folder, "vocab.txt"))
    with pytest.raises(ValueError, match=rf"^The checkpoint at '{folder}' has no vocab.txt, which its wordpiece "
                                         r"tokenizer is read from, so no preprocessor can be built for it. Put the "
                                         r"model's vocab.txt \(or its tokenizer.json\) next to its weights.$"):
        READERS[reader](folder)


@pytest.mark.parametrize("reader, argument", [("task", "seq_length"), ("sentence_encoder", "max_seq_length"),
                                              ("inspector", "seq_length")])
def test_every_reader_refuses_a_length_beyond_the_positions_in_one_wording(bert, reader, argument):
    with pytest.raises(ValueError, match=rf"^Received an invalid value for argument `{argument}`, expected at most "
                                         rf"the encoder's max_sequence_length=40. Received: {argument}=41$"):
        READERS[reader](bert, seq_length=41)


# ---------------------------------------------------------------------------
# The walk of a Hugging Face ALBERT folder into a SentenceEncoder: no call climbs back up the layers.
# ---------------------------------------------------------------------------


def _rank(frame):
    """The layer (tests/test_layering.py) of the package module a frame runs in, None outside the package."""
    parts = frame.f_globals.get("__name__", "").split(".")
    return RANK.get(parts[1]) if parts[0] == "bert_keras" and len(parts) > 1 else None


def upward_calls(function):
    """`(result, calls)`: the calls `function()` makes from a module of the package into a module of a later layer
    (a module calling a function of a lower one that calls back up), as `"caller_module.function ->
    callee_module.function"`. The caller is the nearest frame of the package below the callee (Keras' and
    TensorFlow's frames between them are passed over)."""
    climbs = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_code.co_name == "<module>":
            return
        callee = _rank(frame)
        if callee is None:
            return
        caller = frame.f_back
        while caller is not None and _rank(caller) is None:
            caller = caller.f_back
        if caller is not None and _rank(caller) < callee:
            climbs.append(f"{caller.f_globals['__name__']}.{caller.f_code.co_name} -> "
                          f"{frame.f_globals['__name__']}.{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        result = function()
    finally:
        sys.setprofile(None)
    return result, climbs


@pytest.fixture(scope="module")
def albert(tmp_path_factory):
    """A tiny random Hugging Face ALBERT folder with its spiece.model."""
    from tests.checkpoints.test_hostile_family import _SIZES, _save, _sentencepiece_model

    proto = _sentencepiece_model()
    pieces = len(SentencePieceTokenizer(proto).vocabulary)
    folder = _save(transformers.AlbertModel(transformers.AlbertConfig(
        **_SIZES, vocab_size=pieces, embedding_size=8, max_position_embeddings=20)), tmp_path_factory.mktemp("albert"))
    with open(os.path.join(folder, "spiece.model"), "wb") as f:
        f.write(proto)
    return folder


@pytest.mark.slow  # 5 s in the full run of 450d6b9
def test_an_albert_folder_walks_into_a_sentence_encoder_without_climbing_back(albert, detections):
    model, climbs = upward_calls(lambda: SentenceEncoder.from_checkpoint(albert, pooling="mean"))
    assert climbs == []
    assert detections == [albert]
    assert isinstance(model.preprocessor.tokenizer, SentencePieceTokenizer) and model.max_seq_length == 20
    assert np.all(np.isfinite(model.encode(["the cat sat"])))
