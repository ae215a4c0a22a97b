"""The tagging pipeline: windows and labels of tagged sentences, and `finetune_tagger` on a tiny checkpoint."""

import json
import os

import numpy as np
import pytest

from bert_keras.data.tagged import TaggedText
from bert_keras.text import WordPieceTokenizer
from bert_keras.text.alignment import IGNORE_LABEL
from bert_keras.entities import entity_scores
from bert_keras.export import load_tagger
from bert_keras.training.tagging import finetune_tagger, tagger_config, tagging_examples
from tests.helpers import save_tiny_bert

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "in", "met", "lives", "and", "paris", "london", "rome",
         "ada", "alan", "grace", "##s", "new", "york"]
PEOPLE, PLACES, OTHER = ["ada", "alan", "grace"], ["paris", "london", "rome", "romes"], ["the", "met", "lives", "and"]


def _sentences(n, seed):
    """Sentences of people (B-PER), places (B-LOC, "new york" B-LOC I-LOC) and other words."""
    rng = np.random.default_rng(seed)
    words, tags = [], []
    for _ in range(n):
        sentence, sentence_tags = [], []
        for _ in range(rng.integers(2, 7)):
            kind = rng.integers(4)
            if kind == 0:
                sentence.append(str(rng.choice(PEOPLE))); sentence_tags.append("B-PER")
            elif kind == 1:
                sentence.append(str(rng.choice(PLACES))); sentence_tags.append("B-LOC")
            elif kind == 2:
                sentence += ["new", "york"]; sentence_tags += ["B-LOC", "I-LOC"]
            else:
                sentence.append(str(rng.choice(OTHER))); sentence_tags.append("O")
        words.append(sentence)
        tags.append(sentence_tags)
    return TaggedText.from_lists(words, tags, tag_names=["O", "B-LOC", "I-LOC", "B-PER", "I-PER"])


def test_examples_label_first_pieces_and_cut_long_sentences_as_the_export():
    tokenizer = WordPieceTokenizer(VOCAB)
    data = TaggedText.from_lists([["Ada", "romes", "in", "New", "York"], ["rome"] * 9],
                                 [["B-PER", "B-LOC", "O", "B-LOC", "I-LOC"], ["B-LOC"] * 9],
                                 tag_names=["O", "B-LOC", "I-LOC", "B-PER", "I-PER"])
    examples = tagging_examples(tokenizer, data, seq_length=8, stride=2)
    # The first sentence: [CLS] ada rome ##s in new york [SEP]; "##s" carries no label.
    assert examples["labels"][0].tolist() == [IGNORE_LABEL, 3, 1, IGNORE_LABEL, 0, 1, 2, IGNORE_LABEL]
    # Nine one-piece words in windows of 6 pieces moving on by 4 (2 shared): two windows, no word lost.
    assert examples["sentence"].tolist() == [0, 1, 1]
    assert examples["labels"][1].tolist() == [IGNORE_LABEL] + [1] * 6 + [IGNORE_LABEL]
    assert examples["labels"][2].tolist() == [IGNORE_LABEL, 1, 1, 1, 1, 1, IGNORE_LABEL, IGNORE_LABEL]
    with pytest.raises(ValueError, match="Received: stride=6"):
        tagging_examples(tokenizer, data, seq_length=8, stride=6)


def test_tagger_config_defaults_and_refusals():
    assert (tagger_config().batch_size, tagger_config().epochs) == (16, 3)
    assert tagger_config(epochs=5).epochs == 5 and tagger_config(epochs=5).batch_size == 16
    with pytest.raises(ValueError, match="class_weights"):
        finetune_tagger("unused", _sentences(4, 0), class_weights="balanced")
    other = TaggedText.from_lists([["ada"]], [["B-PER"]])
    with pytest.raises(ValueError, match="test data's tags"):
        finetune_tagger("unused", _sentences(4, 0), test=other)
    only_o = TaggedText.from_lists([["the", "met"]], [["O", "O"]])
    with pytest.raises(ValueError, match=r"the tags \['O'\]: a tagger needs at least one entity tag"):
        finetune_tagger("unused", only_o)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    pytest.importorskip("transformers")
    return save_tiny_bert(tmp_path_factory.mktemp("checkpoint"), VOCAB, num_layers=1)


@pytest.mark.slow
def test_finetune_tagger_learns_entities_and_reports_the_f1_its_export_gets(checkpoint, tmp_path):
    train, test = _sentences(96, 0), _sentences(24, 1)
    test = TaggedText.from_lists(test.words + [["ada", "lives", "in", "new", "york", "and"] * 3],  # one of 3 windows
                                 test.tags + [["B-PER", "O", "O", "B-LOC", "I-LOC", "O"] * 3], tag_names=train.tag_names)
    lines, export_dir = [], str(tmp_path / "ner")
    result = finetune_tagger(checkpoint, train, test=test, export_dir=export_dir, seq_length=16, head_epochs=1,
                             epochs=4, batch_size=8, head_learning_rate=1e-2, learning_rate=5e-3, report=lines.append,
                             verbose=0)
    assert result.sizes == {"train": 86, "validation": 10, "test": 25}
    assert result.scores["f1"] >= 0.95, result.evaluation
    assert set(result.evaluation["per_type"]) == {"LOC", "PER"}
    assert any("micro avg" in line for line in lines)
    assert json.dumps(result.evaluation)  # JSON-ready, as metrics.json stores it
    # The F1 the fine-tune reports is the F1 of the path its export serves, to the last digit.
    with open(os.path.join(export_dir, "assets.extra", "metrics.json")) as f:
        reported = json.load(f)["test"]
    exported = load_tagger(export_dir, warm_up=False)
    assert reported == json.loads(json.dumps(entity_scores(test.tags, exported.tag_words(test.words), test.scheme)))
    assert reported["f1"] == result.scores["f1"] and reported["num_words"] == sum(len(w) for w in test.words)
