"""`bert-keras finetune --task ner | qa` end to end on tiny checkpoints: train, score, export, serve; killed and resumed."""

import json
import os
import sys

import numpy as np
import pytest

from tests import forked
from tests.training.test_reading import _examples as _squad_examples
from tests.training.test_tagging import VOCAB, _sentences
from tests.helpers import save_tiny_bert

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    pytest.importorskip("transformers")
    return save_tiny_bert(tmp_path_factory.mktemp("checkpoint"), VOCAB + ["who", "where", "?"], num_layers=1)


def _conll(path, data):
    with open(path, "w", encoding="utf-8") as f:
        for words, tags in zip(data.words, data.tags):
            f.write("".join(f"{w}\t{t}\n" for w, t in zip(words, tags)) + "\n")
    return str(path)


def _cli(*argv, fault=None):
    """`bert-keras ARGV` in a process of its own (killed at the fault point `fault`), forked from one with TensorFlow
    imported (tests/forked.py): each run costs the command's own work, not TensorFlow's import again."""
    env = {key: value for key, value in os.environ.items() if key != "BERT_KERAS_FAULT_POINT"}
    if fault:
        env["BERT_KERAS_FAULT_POINT"] = fault
    return forked.run([sys.executable, "-m", "bert_keras.cli", *argv], env=env, timeout=600)


def _ner(checkpoint, tmp_path, out, fault=None):
    return _cli("finetune", "--task", "ner", "--checkpoint", checkpoint, "--train", _conll(tmp_path / "train.conll", _sentences(64, 0)),
                "--test", _conll(tmp_path / "test.conll", _sentences(16, 1)), "--out", str(out), "--seq-length", "16",
                "--batch-size", "8", "--epochs", "2", "--learning-rate", "0.005", fault=fault)


def test_finetune_ner_exports_a_tagger_that_predict_serves_and_resumes_exactly(checkpoint, tmp_path):
    done = _ner(checkpoint, tmp_path, tmp_path / "tagger")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "micro avg" in done.stdout and "Exported the tagger" in done.stdout
    with open(tmp_path / "tagger" / "assets.extra" / "metrics.json", encoding="utf-8") as f:
        metrics = json.load(f)
    assert metrics["test"]["num_sentences"] == 16 and metrics["tag_names"] == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    served = _cli("predict", "--model", str(tmp_path / "tagger"), "--format", "jsonl", "Ada met Alan in New York")
    assert served.returncode == 0, served.stderr[-3000:]
    (line,) = served.stdout.splitlines()
    record = json.loads(line)
    text = record["text"]
    assert text == "Ada met Alan in New York"
    assert all(text[e["start"]:e["end"]].lower() == e["word"] for e in record["entities"])

    # Killed after phase 1, then run again: it resumes and exports what the uninterrupted run exported.
    killed = _ner(checkpoint, tmp_path, tmp_path / "resumed", fault="after-head-phase")
    assert killed.returncode == -9 and not (tmp_path / "resumed").exists()
    resumed = _ner(checkpoint, tmp_path, tmp_path / "resumed")
    assert resumed.returncode == 0 and "Resuming from the backup in" in resumed.stdout, resumed.stderr[-3000:]
    from bert_keras.export import load_tagger

    texts = ["Ada met Alan in New York", "grace lives in romes", "the and met"]
    first, second = (load_tagger(str(tmp_path / name), warm_up=False).tag_pieces(texts) for name in ("tagger", "resumed"))
    for a, b in zip(first, second):
        np.testing.assert_allclose(a["scores"], b["scores"], atol=1e-6)


def test_finetune_qa_exports_a_reader(checkpoint, tmp_path):
    train = tmp_path / "train.jsonl"
    examples = _squad_examples(48, 0)
    with open(train, "w", encoding="utf-8") as f:
        for q, c, a in zip(examples.questions, examples.contexts, examples.answers):
            f.write(json.dumps({"question": q, "context": c, "answers": a}) + "\n")
    done = _cli("finetune", "--task", "qa", "--checkpoint", checkpoint, "--train", str(train), "--test", str(train),
                "--out", str(tmp_path / "reader"), "--seq-length", "24", "--doc-stride", "4", "--max-question-length", "4", "--epochs", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Test set (48 questions): exact match" in done.stdout
    assert f"Try: bert-keras predict --model {tmp_path / 'reader'} --question" in done.stdout
    from bert_keras.export import load_reader

    answer = load_reader(str(tmp_path / "reader"), warm_up=False).predict(question="who ?", context="ada met the")
    assert "ada met the"[answer["start"]:answer["end"]] == answer["answer"]


def test_token_tasks_refuse_a_module_pair_naming_why(tmp_path):
    import keras

    from bert_keras import BertEncoder
    from bert_keras.export import export_encoder, export_preprocessor

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16)
    keras.utils.set_random_seed(0)
    export_encoder(encoder, str(tmp_path / "modules" / "encoder"), str(vocab), do_lower_case=True)
    export_preprocessor(str(tmp_path / "modules" / "preprocess"), str(vocab), do_lower_case=True, seq_length=16)
    train = _conll(tmp_path / "train.conll", _sentences(8, 0))
    for task, what in (("ner", "tagger"), ("qa", "reader")):
        data = train if task == "ner" else str(tmp_path / "train.jsonl")
        if task == "qa":
            examples = _squad_examples(8, 0)
            (tmp_path / "train.jsonl").write_text("".join(json.dumps({"question": q, "context": c, "answers": a}) + "\n"
                                                         for q, c, a in zip(examples.questions, examples.contexts, examples.answers)))
        done = _cli("finetune", "--task", task, "--modules", str(tmp_path / "modules"), "--train", data,
                    "--out", str(tmp_path / f"out-{task}"), "--seq-length", "16", "--max-question-length", "4",
                    "--doc-stride", "4")
        assert done.returncode == 2, done.stderr[-2000:]
        assert (f"bert-keras finetune: --task {task} takes no --modules: the {what}'s preprocessing must report where "
                "each piece is in the text") in done.stderr
        assert not (tmp_path / f"out-{task}").exists() and not (tmp_path / f".out-{task}.backup").exists()


def _token_head_folder(directory, tags, seed=0):
    """A tiny transformers BertForTokenClassification (its head of `tags`, config.json's id2label) and its vocab.txt."""
    import torch
    import transformers

    config = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, id2label=dict(enumerate(tags)))
    torch.manual_seed(seed)
    transformers.BertForTokenClassification(config).save_pretrained(str(directory))
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return str(directory)


# The file's tags, as read_tagged_file orders them: O, then each type's B- and I-, types sorted.
FILE_TAGS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


@pytest.mark.parametrize("head_tags, reused", [
    (["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], True),  # the file's tags in the head's own order: the head is reused
    (["O", "B-PER", "I-PER", "B-MISC", "I-MISC"], False),  # other tags (as many): a new head replaces it
], ids=["same-tags-other-order", "other-tags"])
def test_finetune_ner_on_a_folder_with_its_own_token_head(tmp_path, head_tags, reused):
    pytest.importorskip("transformers")
    folder = _token_head_folder(tmp_path / "fine-tuned", head_tags)
    out = tmp_path / "tagger"
    done = _cli("finetune", "--task", "ner", "--checkpoint", folder, "--train", _conll(tmp_path / "train.conll", _sentences(32, 0)),
                "--out", str(out), "--seq-length", "16", "--batch-size", "8", "--head-epochs", "0", "--epochs", "1",
                "--learning-rate", "1e-9")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "label_names" not in done.stdout + done.stderr
    if reused:
        assert (f"Reusing the checkpoint's token-classification head in its own order of tags {head_tags}: the data's "
                "tags are mapped to its outputs") in done.stdout
        expected = head_tags
    else:
        assert (f"Replacing the checkpoint's token-classification head (tags {head_tags}) with a new head of the "
                f"data's tags {FILE_TAGS}: ['B-LOC', 'I-LOC'] only in the data; ['B-MISC', 'I-MISC'] only in the head"
                ) in done.stdout
        expected = FILE_TAGS
    with open(out / "assets.extra" / "metrics.json", encoding="utf-8") as f:
        assert json.load(f)["tag_names"] == expected
    from bert_keras.export import load_tagger

    tagger = load_tagger(str(out), warm_up=False)
    assert tagger.tag_names == expected
    if reused:  # trained at a negligible rate, the tagger is the folder's model: its probabilities, in its order
        import torch
        import transformers

        model = transformers.BertForTokenClassification.from_pretrained(folder).eval()
        text = "ada met alan in new york"
        ids = [VOCAB.index(word) for word in text.split()]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([[2, *ids, 3]])).logits[0, 1:-1]
        (row,) = tagger.tag_pieces([text])
        np.testing.assert_allclose(row["scores"], torch.softmax(logits, -1).numpy(), atol=1e-4)
