"""`bert-keras finetune` (classify, ner, qa) and `bert-keras convert` on XLM-RoBERTa, DeBERTa-v3 and ModernBERT folders
as transformers 5 saves them (tiny seeded random models of transformers' own classes, tokenizers of each family's
kind trained here on tweets): each command runs from the folder, and what it writes answers as the family does."""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import cli, hub
from bert_keras.export import load_classifier, load_reader, load_tagger
from bert_keras.tasks import load_encoder_and_preprocessor
from tests.checkpoints._models import perturb_torch
from tests.commands.test_cli_finetune_tasks import _conll
from tests.test_family_workflows import ACCENTED, tweets  # noqa: F401 (a fixture)
from tests.training.test_reading import _examples as _squad_examples
from tests.training.test_tagging import _sentences

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # a fine-tune and an export per test

SEQ = 24
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
# The tokenizer kind each family's exports record, and the assets of its module pair.
KINDS = {"xlm-roberta": "unigram", "deberta-v3": "deberta_unigram", "modernbert": "modernbert_bpe"}
ASSETS = {"xlm-roberta": ["unigram.model"], "deberta-v3": ["spm.model"], "modernbert": ["merges.txt", "vocab.json"]}


def make_folder(name, folder, tweets):  # noqa: F811
    """A tiny seeded random model of `name` of transformers' own class and its tokenizer, saved into `folder`."""
    torch.manual_seed(0)
    if name == "xlm-roberta":
        from tests.test_family_workflows import write_unigram_tokenizer

        config = transformers.XLMRobertaConfig(**SIZES, vocab_size=write_unigram_tokenizer(folder, tweets),
                                               max_position_embeddings=SEQ + 2, type_vocab_size=1, pad_token_id=1,
                                               layer_norm_eps=1e-5)
        model = transformers.XLMRobertaModel(config)
    elif name == "deberta-v3":
        from tests.checkpoints.test_deberta import CONFIG
        from tests.text.deberta_tokenizers import write_deberta_tokenizer

        vocab_size = write_deberta_tokenizer(folder, tweets[:3000] + ACCENTED * 20)
        model = transformers.DebertaV2Model(transformers.DebertaV2Config(**dict(CONFIG, vocab_size=vocab_size)))
    else:
        from tests.checkpoints.test_modernbert import CONFIG, save_modernbert_tokenizer

        size, vocab = save_modernbert_tokenizer(folder)
        ids = dict(pad_token_id=vocab["[PAD]"], cls_token_id=vocab["[CLS]"], sep_token_id=vocab["[SEP]"],
                   bos_token_id=vocab["[CLS]"], eos_token_id=vocab["[SEP]"])
        model = transformers.ModernBertModel(transformers.ModernBertConfig(**dict(CONFIG, vocab_size=size, **ids)))
    perturb_torch(model).save_pretrained(str(folder))
    return model.eval()


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tweets):  # noqa: F811
    """`folders(name)` -> (transformers model, folder), each made on first use."""
    made = {}

    def get(name):
        if name not in made:
            folder = tmp_path_factory.mktemp(name)
            made[name] = (make_folder(name, folder, tweets), str(folder))
        return made[name]

    return get


def _finetune(capsys, *argv):
    status = cli.main(["finetune", *argv, "--seq-length", str(SEQ), "--batch-size", "16", "--head-epochs", "0"])
    out = capsys.readouterr()
    assert status == 0, out.err[-3000:]
    return out.out


@pytest.mark.parametrize("name", sorted(KINDS))
def test_convert_writes_modules_that_run_as_transformers(folders, tweets, tmp_path, capsys, name):  # noqa: F811
    model, folder = folders(name)
    out = str(tmp_path / "modules")
    assert cli.main(["convert", folder, "--out", out, "--seq-length", str(SEQ)]) == 0
    assert f"Wrote {out}/encoder and {out}/preprocess" in capsys.readouterr().out
    for module in ("encoder", "preprocess"):
        assert sorted(os.listdir(os.path.join(out, module, "assets"))) == ASSETS[name]
    texts = tweets[-8:] + ACCENTED[:3]
    packed = hub.PreprocessLayer(os.path.join(out, "preprocess"), seq_length=SEQ)(tf.constant(texts))
    # The module's ids are transformers' tokenizer's on the same folder.
    expected = transformers.AutoTokenizer.from_pretrained(folder)(texts, padding="max_length", truncation=True,
                                                                  max_length=SEQ)
    np.testing.assert_array_equal(packed["input_word_ids"], expected["input_ids"])
    np.testing.assert_array_equal(packed["input_mask"], expected["attention_mask"])
    outputs = hub.KerasLayer(os.path.join(out, "encoder"))(packed)
    with torch.no_grad():
        reference = model(input_ids=torch.tensor(expected["input_ids"]),
                          attention_mask=torch.tensor(expected["attention_mask"])).last_hidden_state.numpy()
    real = np.asarray(expected["attention_mask"]).astype(bool)
    assert float(np.abs(np.asarray(outputs["sequence_output"])[real] - reference[real]).max()) < 1e-5
    encoder, _ = load_encoder_and_preprocessor(folder, seq_length=SEQ)
    assert float(np.abs(np.asarray(outputs["pooled_output"]) - np.asarray(encoder(packed)["pooled_output"])).max()) < 1e-5


def _keyword_texts(tweets, count, seed):  # noqa: F811
    """A tweet's first words with 'great' (label good) or 'awful' (label bad) among them: a task a tiny model learns.
    Few words, so that the word is never cut off at SEQ tokens."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        words = tweets[int(rng.integers(len(tweets)))].split()[:3]
        label = ("bad", "good")[i % 2]
        words.insert(int(rng.integers(len(words) + 1)), ("awful", "great")[i % 2])
        rows.append((" ".join(words), label))
    return rows


def _csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return str(path)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_finetune_classify_learns_and_exports_a_classifier_of_the_family(folders, tweets, tmp_path, capsys, name):  # noqa: F811
    _, folder = folders(name)
    train = _csv(tmp_path / "train.csv", _keyword_texts(tweets[:2000], 160, 0))
    test_rows = _keyword_texts(tweets[2000:4000], 40, 1)
    out = tmp_path / "classifier"
    stdout = _finetune(capsys, "--checkpoint", folder, "--train", train, "--test", _csv(tmp_path / "test.csv", test_rows),
                       "--out", str(out), "--epochs", "4", "--learning-rate", "0.002")
    assert f"Exported the classifier (raw strings in; probabilities and label names out) to {out}" in stdout
    with open(out / "assets.extra" / "export.json", encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["tokenizer"]["kind"] == KINDS[name] and manifest["label_names"] == ["bad", "good"]
    # The export, on raw strings, tells the texts apart by their word.
    predictions = load_classifier(str(out), warm_up=False).predict([text for text, _ in test_rows])
    accuracy = np.mean([p["label"] == label for p, (_, label) in zip(predictions, test_rows)])
    assert accuracy >= 0.9, accuracy


@pytest.mark.parametrize("name", sorted(KINDS))
def test_finetune_ner_and_qa_export_answers_with_the_texts_offsets(folders, tmp_path, capsys, name):
    _, folder = folders(name)
    tagger = tmp_path / "tagger"
    stdout = _finetune(capsys, "--task", "ner", "--checkpoint", folder, "--out", str(tagger), "--epochs", "2",
                       "--train", _conll(tmp_path / "train.conll", _sentences(32, 0)), "--learning-rate", "0.005",
                       "--test", _conll(tmp_path / "test.conll", _sentences(8, 1)))
    assert "micro avg" in stdout and "Exported the tagger" in stdout
    with open(tagger / "assets.extra" / "export.json", encoding="utf-8") as f:
        assert json.load(f)["tokenizer"]["kind"] == KINDS[name]
    # (No emoji: a byte-level BPE piece of part of a character has the word "\ufffd", as in transformers' pipeline.)
    texts = ["Ada met Alan in New York", "grace lives in  rome"]
    entities = load_tagger(str(tagger), warm_up=False).predict(texts)
    # Whole words with their character spans in the raw string (the family's offsets through the graph).
    assert any(e["word"].strip() for found in entities for e in found), entities
    for text, found in zip(texts, entities):
        # (A piece's span may start at the space before its word; a lone "▁" piece, whose word is empty, spans a
        # space or the text's first character, as the tokenizers library's offsets give them.)
        assert all(text[e["start"]:e["end"]].strip() == e["word"].strip() for e in found if e["word"].strip()), found

    examples = _squad_examples(16, 0)
    train = tmp_path / "train.jsonl"
    with open(train, "w", encoding="utf-8") as f:
        for q, c, a in zip(examples.questions, examples.contexts, examples.answers):
            f.write(json.dumps({"question": q, "context": c, "answers": a}) + "\n")
    reader = tmp_path / "reader"
    stdout = _finetune(capsys, "--task", "qa", "--checkpoint", folder, "--train", str(train), "--test", str(train),
                       "--out", str(reader), "--doc-stride", "8", "--max-question-length", "8", "--epochs", "1")
    assert "Test set (16 questions): exact match" in stdout
    context = examples.contexts[0]
    answer = load_reader(str(reader), warm_up=False).predict(question=examples.questions[0], context=context)
    assert answer["answer"] and context[answer["start"]:answer["end"]] == answer["answer"]
