"""Fine-tuning BERT's family for the token-level tasks: `finetune_tagger` and `finetune_reader` on a folder of each
family's base model (tests/test_family_workflows.py's), exported and loaded back.

Apart from tests/test_family_token_tasks.py (the exports of imported task heads against transformers): a test process
keeps what its tests build, and the two as one file were the suite's largest process (5.26 GB, 307 s in the full run
of 2026-12-07), which no other could run beside; apart, each is half as long and holds only its own models.
"""

import numpy as np
import pytest

from bert_keras.export import load_reader, load_tagger
from bert_keras.training import finetune_reader, finetune_tagger
from tests.test_family_token_tasks import KINDS
from tests.test_family_workflows import make_family_folder, tweets  # noqa: F401 (a fixture)
from tests.training.test_reading import _examples
from tests.training.test_tagging import _sentences

pytest.importorskip("transformers")
pytest.importorskip("torch")
pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def base_folders(tmp_path_factory, tweets):  # noqa: F811
    """name -> a folder of the family's base model (tests/test_family_workflows.py's, 24 positions)."""
    built = {}

    def build(name):
        if name not in built:
            folder = tmp_path_factory.mktemp(f"{name}_base")
            make_family_folder(name, folder, tweets)
            built[name] = str(folder)
        return built[name]

    return build


@pytest.mark.slow
@pytest.mark.parametrize("name,min_f1", [("albert", 0.6), ("roberta", 0.9), ("electra", 0.9), ("distilbert", 0.9)])
def test_finetune_tagger_on_the_family_exports_a_tagger(base_folders, tmp_path, name, min_f1):
    export_dir = str(tmp_path / "tagger")
    result = finetune_tagger(base_folders(name), _sentences(96, 0), test=_sentences(24, 1), export_dir=export_dir,
                             seq_length=24, head_epochs=1, epochs=4, batch_size=8, head_learning_rate=1e-2,
                             learning_rate=5e-3, verbose=0)
    assert result.scores["f1"] >= min_f1, result.evaluation
    tagger = load_tagger(export_dir, warm_up=False)
    assert tagger.tokenizer_kind == KINDS[name]
    text = "ada lives in new york and paris"
    found = tagger.predict(text, aggregation="first")
    assert {"ada", "paris"} <= {text[e["start"]:e["end"]] for e in found}, found
    assert {e["entity_group"] for e in found} <= {"PER", "LOC"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["albert", "roberta"])
def test_finetune_reader_on_the_family_answers(base_folders, tmp_path, name):
    train, test = _examples(160, 0), _examples(30, 1)
    export_dir = str(tmp_path / "reader")
    result = finetune_reader(base_folders(name), train, test=test, export_dir=export_dir, seq_length=24,
                             doc_stride=4, max_question_length=4, batch_size=16, head_epochs=1, epochs=6,
                             head_learning_rate=1e-2, learning_rate=5e-3, verbose=0)
    assert result.scores["exact_match"] >= 30, result.evaluation  # measured 46.7 (ALBERT and RoBERTa): tiny models
    reader = load_reader(export_dir, warm_up=False)
    answers = reader.predict(question=test.questions, context=test.contexts)
    for answer, context in zip(answers, test.contexts):
        assert context[answer["start"]:answer["end"]] == answer["answer"]
    exact = np.mean([a["answer"] == truth[0]["text"] for a, truth in zip(answers, test.answers)])
    assert 100 * exact == pytest.approx(result.scores["exact_match"])  # the export answers as the scores were made
