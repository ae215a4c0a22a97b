"""`bert-keras predict` and `bert-keras evaluate` on a tagger export: load_tagger's entities, entity-level scores."""

import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertEncoder, cli
from bert_keras.export.tagger import word_tags
from bert_keras.commands.predict import AGGREGATIONS, marked_text
from bert_keras.entities import entity_scores
from bert_keras.export import export_tagger, load_tagger
from bert_keras.export import tagger as tagger_module
from bert_keras.export.entity_groups import AGGREGATIONS as LIBRARY_AGGREGATIONS
from bert_keras.export.entity_groups import text_entities
from bert_keras.export.manifest import manifest_path
from bert_keras.tasks import BertTokenClassifier
from bert_keras.text import BertPreprocessor
from tests.helpers import as_written_before_the_manifest

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "ada", "love", "##lace", "paris", "is", "nice", "in",
         "london", "the", "city", "!", ","]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TEXTS = ["Ada Lovelace in Paris !", "the city is nice , London", "Café 😀", "paris " * 12]
CONLL = "-DOCSTART- -X- O\n\nAda\tB-PER\nLovelace\tI-PER\nin\tO\nParis\tB-LOC\n\nLondon\tB-LOC\nis\tO\nnice\tO\n"


@pytest.fixture(scope="module")
def tagger():
    keras.utils.set_random_seed(11)
    encoder = BertEncoder(vocab_size=len(VOCAB), num_layers=1, hidden_size=8, num_heads=2, intermediate_size=16,
                          max_sequence_length=16)
    model = BertTokenClassifier(encoder, num_classes=len(TAGS), preprocessor=BertPreprocessor(VOCAB, seq_length=10),
                                label_names=TAGS)
    kernel, bias = model.classifier_head.weights[-2:]
    kernel.assign(np.asarray(kernel) * 40.0)  # decisive, varied tags
    bias.assign(np.array([1.0, 0.0, 0.5, 0.0, 0.5], "float32"))
    return model


@pytest.fixture(scope="module")
def tagger_dir(tagger, tmp_path_factory):
    return export_tagger(tagger, str(tmp_path_factory.mktemp("taggers") / "ner"), stride=2)


def _run(argv, capsys, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _same_entities(printed, expected):
    """`printed` (per text, the command's entities) is `expected` (`load_tagger(...).predict`'s): every field equal, each
    score within float rounding. The command answers its first requests before the export's background warm-up
    ends, on the graph as loaded (`functions_unoptimized`), the loader with `warm_up=False` on the rewritten graph:
    the same arithmetic in another order, 1e-7 apart."""
    def without_scores(rows):
        return [[{key: value for key, value in entity.items() if key != "score"} for entity in row] for row in rows]

    assert without_scores(printed) == without_scores(expected)
    np.testing.assert_allclose([e["score"] for row in printed for e in row],
                               [e["score"] for row in expected for e in row], rtol=1e-6)
    return True


@pytest.mark.slow
def test_predict_prints_load_taggers_entities(tagger_dir, capsys):
    loaded = load_tagger(tagger_dir, warm_up=False)
    assert AGGREGATIONS == LIBRARY_AGGREGATIONS
    for aggregation in ("simple", "first", "none"):
        code, out, _ = _run(["predict", "--model", tagger_dir, "--format", "jsonl", "--aggregation", aggregation,
                             *TEXTS], capsys)
        assert code == 0
        records = [json.loads(line) for line in out.splitlines()]
        assert [record["text"] for record in records] == TEXTS
        _same_entities([record["entities"] for record in records], loaded.predict(TEXTS, aggregation=aggregation))
    assert sum(len(record["entities"]) for record in records) >= 5
    code, out, _ = _run(["predict", "--model", tagger_dir, *TEXTS], capsys)  # tsv: each text, its entities marked
    expected = loaded.predict(TEXTS)
    assert out.splitlines() == [marked_text(text, entities) for text, entities in zip(TEXTS, expected)]
    first = expected[0][0]
    assert f"[{TEXTS[0][first['start']:first['end']]}]({first['entity_group']} {first['score']:.4f})" in out
    code, out, _ = _run(["predict", "--model", tagger_dir, "--format", "json", "paris"], capsys)
    (record,) = json.loads(out)
    assert record["text"] == "paris" and _same_entities([record["entities"]], [loaded.predict("paris")])


@pytest.mark.slow
def test_predict_reads_files_and_standard_input(tagger_dir, tmp_path, capsys, monkeypatch):
    loaded = load_tagger(tagger_dir, warm_up=False)
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(TEXTS[:2]) + "\n", encoding="utf-8")
    code, out, _ = _run(["predict", "--model", tagger_dir, "--input", str(path), "--format", "jsonl"], capsys)
    assert code == 0 and _same_entities([json.loads(line)["entities"] for line in out.splitlines()],
                                        loaded.predict(TEXTS[:2]))
    stdin = "ada lovelace\n   \nparis\n".encode()
    code, out, err = _run(["predict", "--model", tagger_dir, "--skip-blank", "--format", "jsonl"], capsys, stdin,
                          monkeypatch)
    assert code == 0 and [json.loads(line)["text"] for line in out.splitlines()] == ["ada lovelace", "paris"]
    assert "skipped 1 blank input(s) of 3" in err
    code, _, err = _run(["predict", "--model", tagger_dir, "--top-k", "2", "paris"], capsys)
    assert code == 2 and "--top-k applies to classifiers;" in err and "is a tagger" in err


@pytest.mark.slow
def test_evaluate_scores_entities(tagger_dir, tmp_path, capsys):
    data = tmp_path / "test.conll"
    data.write_text(CONLL, encoding="utf-8")
    out_dir = tmp_path / "report"
    code, out, err = _run(["evaluate", "--model", tagger_dir, "--data", str(data), "--out", str(out_dir)], capsys)
    assert code == 0, err
    loaded = load_tagger(tagger_dir, warm_up=False)
    sentences = [["Ada", "Lovelace", "in", "Paris"], ["London", "is", "nice"]]
    pieces = loaded.tag_pieces([" ".join(words) for words in sentences])
    starts = [[0, 4, 13, 16], [0, 7, 10]]
    predicted = [word_tags(piece, start, loaded.tag_names) for piece, start in zip(pieces, starts)]
    expected = entity_scores([["B-PER", "I-PER", "O", "B-LOC"], ["B-LOC", "O", "O"]], predicted)
    written = json.loads((out_dir / "evaluation.json").read_text())
    assert written == json.loads(json.dumps(expected))
    assert written["true_entities"] == 3 and written["num_words"] == 7
    assert f"micro avg  {expected['precision']:.4f}" in out and "Wrote evaluation.json" in out
    # A tag the tagger does not have: exit 2, the file's line and the tagger's tags named.
    data.write_text("Ada\tB-ORG\n", encoding="utf-8")
    code, _, err = _run(["evaluate", "--model", tagger_dir, "--data", str(data)], capsys)
    assert code == 2 and f"{data}" in err and "line 1" in err and "the tagger's tags: ['O', 'B-PER'" in err


def test_evaluate_refuses_bad_data_before_tensorflow_loads(tmp_path):
    # Told a tagger by its labels.json (data); the data's error comes before the export would be loaded.
    tagger_dir = tmp_path / "ner"
    (tagger_dir / "assets.extra").mkdir(parents=True)
    (tagger_dir / "assets.extra" / "labels.json").write_text(json.dumps({"task": "tagger", "tag_names": TAGS}))
    data = tmp_path / "bad.conll"
    data.write_text("Ada\tB-PER\nLovelace\n", encoding="utf-8")
    program = ("import sys; from bert_keras import cli; code = cli.main(sys.argv[1:]); "
               "print('tensorflow' in sys.modules); sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", program, "evaluate", "--model", str(tagger_dir), "--data",
                             str(data)], capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert result.returncode == 2 and result.stdout.strip() == "False"
    assert f"{data}" in result.stderr and "line 2" in result.stderr


def test_a_long_text_runs_through_the_model_a_few_windows_at_a_time(tagger, monkeypatch):
    # issue 47, item 4: every window of a text went into one call of the model (a 5 MB line: 2.1 GB, 3 min 48 s).
    tokenizer = tagger.preprocessor.tokenizer
    vocabulary = tf.constant(list(tokenizer.vocabulary))
    texts = tf.constant([TEXTS[0] * 4, "paris", ""])  # 24 pieces: windows of 8 every 6, 4 of them; then 1 and 1
    serving, calls = tagger.serving_outputs, []

    def counted(packed):
        calls.append(int(packed["input_word_ids"].shape[0]))
        return serving(packed)

    monkeypatch.setattr(tagger, "serving_outputs", counted)
    # Run eagerly, the loop over calls is a Python loop: each call of the model is seen.
    chunked = tagger_module._tag_pieces(tagger, tokenizer, vocabulary, texts, 2, None, windows_per_call=2)
    assert calls == [2, 2, 2]  # 6 windows, 2 per call
    calls.clear()
    whole = tagger_module._tag_pieces(tagger, tokenizer, vocabulary, texts, 2, None, windows_per_call=100)
    assert calls == [6] and tagger_module.WINDOWS_PER_CALL == 64
    for name, value in chunked.items():
        np.testing.assert_allclose(value.numpy(), whole[name].numpy(), atol=1e-6) if value.dtype.is_floating else \
            np.testing.assert_array_equal(value.numpy(), whole[name].numpy())
    length = int(whole["lengths"][0])
    pieces = {name: value.numpy()[0, :length] for name, value in whole.items() if name != "lengths"}
    pieces["tokens"] = [token.decode() for token in pieces["tokens"]]
    chunked_pieces = dict(pieces, scores=chunked["scores"].numpy()[0, :length])
    entities, chunked_entities = (text_entities(TEXTS[0] * 4, piece, TAGS) for piece in (pieces, chunked_pieces))
    assert len(entities) >= 4 and [dict(e, score=0) for e in chunked_entities] == [dict(e, score=0) for e in entities]
    np.testing.assert_allclose([e["score"] for e in chunked_entities], [e["score"] for e in entities], atol=1e-6)


def _edited(tagger_dir, tmp_path, legacy=False, **fields):
    """A copy of the tagger export with `fields` of its manifest (or, `legacy`, of an older export's labels.json) edited."""
    directory = shutil.copytree(tagger_dir, tmp_path / "edited", dirs_exist_ok=True)
    labels = pathlib.Path(as_written_before_the_manifest(str(directory)) if legacy else manifest_path(str(directory)))
    metadata = json.loads(labels.read_text())
    if not legacy:  # this version's manifest: how the pieces make words is in its `tokenizer` entry
        entry = metadata["tokenizer"]
        for field, value in fields.items():
            key = "kind" if field == "tokenizer" else field
            entry.pop(key) if value is None else entry.update({key: value})
        fields = {}
    metadata.update(fields)
    labels.write_text(json.dumps(metadata))
    return str(directory)


@pytest.mark.slow
def test_an_edited_labels_json_cannot_change_how_pieces_make_words(tagger_dir, tmp_path, capsys):
    # issue 47, item 10: "suffix_indicator": "" turned "Ada Lovelace wrote in Paris" into "AdaLovelacewroteinParis".
    expected = load_tagger(tagger_dir, warm_up=False).predict(TEXTS[0])
    for field, value, graph in (("tokenizer", "byte_bpe", "'wordpiece'"), ("suffix_indicator", "", "'##'"),
                                ("unknown_token", {"a": 1}, "'\\[UNK\\]'")):
        directory = _edited(tagger_dir, tmp_path, **{field: value})
        with pytest.raises(ValueError, match=rf"The manifest of .* records {field}={re.escape(repr(value))}, but the "
                           rf"SavedModel was exported with {field}={graph} \(its `tokenizer_info\(\)`: how its "
                           r"pieces make words\): the export was modified after it was written"):
            load_tagger(directory, warm_up=False)
    code, _, err = _run(["predict", "--model", directory, "Ada Lovelace"], capsys)
    assert code == 2 and err.startswith(f"bert-keras predict: cannot load a tagger from {directory}: ")
    # The graph is the truth: a manifest without these fields changes nothing; one nested too deeply is refused.
    directory = _edited(tagger_dir, tmp_path, tokenizer=None, suffix_indicator=None, unknown_token=None)
    assert load_tagger(directory, warm_up=False).predict(TEXTS[0]) == expected
    pathlib.Path(manifest_path(directory)).write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = _run(["predict", "--model", directory, "Ada"], capsys)  # no traceback
    assert code == 2 and err == f"bert-keras predict: {manifest_path(directory)} cannot be read (nested too deep): " \
                                "the export is damaged; export the model again.\n"


@pytest.mark.slow
def test_an_export_written_before_the_graph_carried_them_is_checked_by_a_probe(tagger_dir, tmp_path, monkeypatch):
    # An export of the previous version has no `tokenizer_info()`: its labels.json is read, and checked against what
    # its own graph does with a probe text.
    monkeypatch.setattr(tagger_module, "DECODING_ENDPOINT", "no_such_endpoint")
    loaded = load_tagger(tagger_dir, warm_up=False)
    assert (loaded.tokenizer_kind, loaded._unknown_token, loaded._suffix_indicator) == ("wordpiece", "[UNK]", "##")
    assert loaded.predict(TEXTS) == load_tagger(tagger_dir, warm_up=False).predict(TEXTS)
    for field, value, found in (("tokenizer", "byte_bpe", "tokenizer='wordpiece'"),
                                ("unknown_token", "ada", "unknown_token='[UNK]'")):
        with pytest.raises(ValueError, match=rf"records {field}='{value}', but the export's own tokenizer gives "
                                             rf"{re.escape(found)} \(its pieces of a probe text\)"):
            load_tagger(_edited(tagger_dir, tmp_path, legacy=True, **{field: value}), warm_up=False)
    with pytest.raises(ValueError, match=r"records suffix_indicator=''; expected a non-empty string"):
        load_tagger(_edited(tagger_dir, tmp_path, legacy=True, suffix_indicator=""), warm_up=False)
