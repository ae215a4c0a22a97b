"""The reading pipeline: `finetune_reader` on a tiny checkpoint, windows trimmed, answers decoded as the export does."""


import numpy as np
import pytest

from bert_keras.export import load_reader
from bert_keras.data.squad import SquadExamples
from bert_keras.training.reading import finetune_reader, reader_config, window_dataset
from tests.helpers import save_tiny_bert

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "in", "met", "lives", "and", "paris", "london", "rome",
         "ada", "alan", "grace", "who", "where", "?"]
PEOPLE, PLACES, FILLER = ["ada", "alan", "grace"], ["paris", "london", "rome"], ["the", "and", "met", "lives"]


def _examples(n, seed):
    """"where ?" is answered by the context's place, "who ?" by its person, among filler words."""
    rng = np.random.default_rng(seed)
    questions, contexts, answers = [], [], []
    for _ in range(n):
        words = [str(w) for w in rng.choice(FILLER, size=rng.integers(2, 6))]
        person, place = str(rng.choice(PEOPLE)), str(rng.choice(PLACES))
        words.insert(int(rng.integers(len(words) + 1)), person)
        words.insert(int(rng.integers(len(words) + 1)), place)
        context = " ".join(words)
        asked = person if rng.integers(2) else place
        questions.append(("who" if asked == person else "where") + " ?")
        contexts.append(context)
        start = len(" ".join(words[: words.index(asked)])) + (1 if words.index(asked) else 0)
        answers.append([{"text": asked, "answer_start": start}])
    return SquadExamples.from_lists(questions, contexts, answers)


def test_reader_config_and_window_batches():
    config = reader_config()
    assert (config.seq_length, config.batch_size, config.epochs, config.learning_rate) == (384, 12, 2, 3e-5)
    assert reader_config(epochs=1).seq_length == 384
    features = {key: np.zeros((5, 32), "int32") for key in ("input_word_ids", "input_mask", "input_type_ids")}
    features["input_mask"][:, :7] = 1
    features["input_mask"][2, :11] = 1
    features["start_positions"] = features["end_positions"] = np.arange(5, dtype="int32")
    inputs, labels = next(iter(window_dataset(features, batch_size=4)))
    assert inputs["input_word_ids"].shape == (4, 11)  # trimmed to the batch's longest window
    assert labels["start_logits"].numpy().tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="doc_stride"):
        finetune_reader("unused", _examples(4, 0), seq_length=32, doc_stride=40)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    pytest.importorskip("transformers")
    return save_tiny_bert(tmp_path_factory.mktemp("checkpoint"), VOCAB, num_layers=2)


@pytest.mark.slow
def test_finetune_reader_learns_to_answer_and_exports(checkpoint, tmp_path):
    train, test = _examples(160, 0), _examples(30, 1)
    lines = []
    result = finetune_reader(checkpoint, train, test=test, export_dir=str(tmp_path / "reader"), seq_length=24,
                             doc_stride=4, max_question_length=4, batch_size=16, head_epochs=1, epochs=6, head_learning_rate=1e-2,
                             learning_rate=5e-3, report=lines.append, verbose=0)
    assert result.sizes == {"train": 144, "validation": 16, "test": 30}
    assert result.scores["exact_match"] >= 90, result.evaluation
    assert any(line.startswith("Test set (30 questions): exact match") for line in lines)
    reader = load_reader(str(tmp_path / "reader"), warm_up=False)
    answers = [reader.predict(question=q, context=c) for q, c in zip(test.questions, test.contexts)]
    for answer, context in zip(answers, test.contexts):
        assert context[answer["start"]:answer["end"]] == answer["answer"]
    exact = np.mean([a["answer"] == truth[0]["text"] for a, truth in zip(answers, test.answers)])
    assert 100 * exact == pytest.approx(result.scores["exact_match"])  # the export answers as the scores were made
