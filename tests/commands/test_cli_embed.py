"""`bert-keras embed`, `index` and `search` on tiny random models: outputs equal to `encode`, streamed in order,
refusals with exit status 2 and nothing half-written; one real-MiniLM parity test of `embed` (slow)."""

import io
import json
import os
import re
import shlex
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import cli
from bert_keras.export import export_sentence_encoder
from bert_keras.search import build_index, load_embedding_model, load_index
from bert_keras.tasks.sentence_encoder import SentenceEncoder
from tests import sentence_models
from tests.helpers import assert_close, planted_module

pytest.importorskip("sentence_transformers", reason="sentence-transformers (test extra) writes the tiny folders")

TEXTS = ["the good day", "", "a bad day, not ok?", "Naïve café — OK!", "   ", " ".join(["very good day"] * 10)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Tiny sentence-transformers folders (mean + Normalize; another seed; two modes: dimension 32), a plain BERT
    folder, an export, and the reference vectors of TEXTS."""
    root = tmp_path_factory.mktemp("embed")
    bert = sentence_models.write_tiny_bert(str(root / "bert"))
    other_bert = sentence_models.write_tiny_bert(str(root / "other_bert"), seed=1)
    folders = {"bert": bert, "root": root}
    for name, source, pooling in (("st", bert, "mean"), ("other", other_bert, "mean"), ("wide", bert, ("cls", "mean"))):
        sentence_models.sentence_transformer(source, pooling=pooling).save(str(root / name))
        folders[name] = str(root / name)
    model = SentenceEncoder.from_checkpoint(folders["st"])
    folders["export"] = export_sentence_encoder(model, str(root / "export"))
    folders["expected"] = model.encode(TEXTS)
    folders["model"] = model
    return folders


def _run(argv, capsys, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _leftovers(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith("."))


@pytest.mark.slow
def test_embed_texts_to_npy_equals_encode_and_sentence_transformers(models, tmp_path, capsys):
    out = str(tmp_path / "vectors.npy")
    code, stdout, err = _run(["embed", "--checkpoint", models["st"], "--out", out, *TEXTS], capsys)
    assert code == 0, err
    assert stdout.strip() == f"Wrote {len(TEXTS)} embeddings of dimension 16 to {out}"
    vectors = np.load(out)
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), 16)
    assert_close(vectors, models["expected"], atol=1e-6)
    reference = sentence_models.sentence_transformer(models["bert"], pooling="mean").encode(TEXTS)
    assert_close(vectors, reference, atol=1e-5)
    assert _leftovers(tmp_path) == []


@pytest.mark.slow
def test_embed_streams_files_and_standard_input_in_order_blank_lines_kept(models, tmp_path, capsys, monkeypatch):
    lines = [TEXTS[i % len(TEXTS)] if i % 7 else "" for i in range(40)]  # blank lines among them
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = models["model"].encode(lines)

    # --input, .jsonl out, batches of 1 (16 texts a chunk: three chunks).
    out = str(tmp_path / "vectors.jsonl")
    code, _, err = _run(["embed", "--model", models["export"], "--input", str(source), "--out", out, "--batch-size", "1"], capsys)
    assert code == 0, err
    records = [json.loads(line) for line in open(out, encoding="utf-8")]
    assert [record["text"] for record in records] == lines
    assert_close(np.array([record["embedding"] for record in records], dtype="float32"), expected, atol=1e-5)

    # Standard input, .npy out.
    out = str(tmp_path / "stdin.npy")
    code, _, err = _run(["embed", "--checkpoint", models["st"], "--out", out, "--batch-size", "3"], capsys,
                        stdin=("\n".join(lines) + "\n").encode(), monkeypatch=monkeypatch)
    assert code == 0, err
    assert_close(np.load(out), expected, atol=1e-6)

    # A CSV column.
    table = tmp_path / "tweets.csv"
    table.write_text("id,tweet\n" + "".join(f'{i},"{text}"\n' for i, text in enumerate(TEXTS)), encoding="utf-8")
    out = str(tmp_path / "csv.npy")
    code, _, err = _run(["embed", "--checkpoint", models["st"], "--input", str(table), "--text-column", "tweet", "--out", out], capsys)
    assert code == 0, err
    assert_close(np.load(out), models["expected"], atol=1e-6)
    assert _leftovers(tmp_path) == []


def test_embed_refusals_exit_2_and_write_nothing(models, tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "out.npy")

    def refused(argv, stdin=None):
        code, _, err = _run(argv, capsys, stdin=stdin, monkeypatch=monkeypatch if stdin is not None else None)
        assert code == 2, err
        assert not os.path.exists(out) and _leftovers(tmp_path) == []
        return err

    err = refused(["embed", "--checkpoint", models["bert"], "--out", out, "ok"])
    assert "has no sentence-transformers configuration" in err and "--pooling mean" in err
    err = refused(["embed", "--checkpoint", models["bert"], "--pooling", "mean,median", "--out", out, "ok"])
    assert "--pooling mean,median: no pooling mode 'median'; expected one of mean, cls, max" in err
    folder = str(tmp_path / "bad_mode")
    shutil.copytree(models["st"], folder)
    with open(os.path.join(folder, "1_Pooling", "config.json"), "w") as f:
        json.dump({"embedding_dimension": 16, "pooling_mode": "median"}, f)
    err = refused(["embed", "--checkpoint", folder, "--out", out, "ok"])
    assert "`pooling_mode` names the pooling mode(s) ['median'], which do not exist" in err
    assert "--pooling, --normalize and --max-seq-length go with --checkpoint" in refused(
        ["embed", "--model", models["export"], "--pooling", "cls", "--out", out, "ok"])
    assert "--out must name a .npy or .jsonl file" in refused(["embed", "--model", models["export"], "--out", str(tmp_path / "x.txt"), "ok"])
    assert "no text given" in refused(["embed", "--model", models["export"], "--out", out], stdin=b"")
    # A bad record after good ones (invalid JSON on line 40): nothing at --out.
    source = tmp_path / "texts.jsonl"
    source.write_text("".join(json.dumps({"text": f"text {i}"}) + "\n" for i in range(39)) + "{not json\n")
    err = refused(["embed", "--model", models["export"], "--input", str(source), "--out", out, "--batch-size", "4"])
    assert "line 40" in err
    source.unlink()
    # An existing file is never replaced.
    with open(out, "w") as f:
        f.write("mine")
    code, _, err = _run(["embed", "--model", models["export"], "--out", out, "ok"], capsys)
    assert code == 2 and "exists; it is never replaced" in err
    assert open(out).read() == "mine"


def test_embed_and_index_refuse_a_lone_surrogate_naming_the_file_and_line(models, tmp_path, capsys):
    source = tmp_path / "texts.jsonl"  # valid UTF-8: the surrogate is a JSON escape
    source.write_text('{"text": "the good day"}\n{"text": "a \\ud800 b"}\n')
    message = f"{source}: line 2: `text` holds a lone surrogate (\\ud800 at character 3), which is not text."
    out, index = str(tmp_path / "out.npy"), str(tmp_path / "index")
    code, _, err = _run(["embed", "--model", models["export"], "--input", str(source), "--out", out], capsys)
    assert code == 2 and err.startswith(f"bert-keras embed: {message}"), err
    code, _, err = _run(["index", "--model", models["export"], "--input", str(source), "--out", index], capsys)
    assert code == 2 and err.startswith(f"bert-keras index: {message}"), err
    assert os.listdir(tmp_path) == ["texts.jsonl"]  # no vectors, no index, nothing staged, no lock


def test_an_export_whose_info_is_nested_too_deep_is_refused_naming_it(models, tmp_path, capsys):
    from bert_keras.export.manifest import manifest_path

    export = str(tmp_path / "export")
    shutil.copytree(models["export"], export)
    info = manifest_path(export)
    with open(info, "w") as f:
        f.write("[" * 100_000 + "]" * 100_000)
    out = str(tmp_path / "out.npy")
    code, _, err = _run(["embed", "--model", export, "--out", out, "ok"], capsys)
    assert code == 2 and f"{info} cannot be read (nested too deep)" in err, err
    assert not os.path.exists(out)


@pytest.mark.slow
def test_index_and_search(models, tmp_path, capsys):
    corpus = ["the good day", "a bad day", "not ok", "very good", "cafe naive", "", "quick brown fox"]
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(corpus) + "\n", encoding="utf-8")
    index = str(tmp_path / "index")
    code, stdout, err = _run(["index", "--checkpoint", models["st"], "--input", str(source), "--out", index], capsys)
    assert code == 0, err
    assert stdout.strip() == f"Indexed {len(corpus)} texts (16-dimensional vectors) in {index}"
    assert sorted(os.listdir(index)) == [".bert_keras_output.json", "index.json", "texts.jsonl", "vectors.npy"]
    info = json.load(open(os.path.join(index, "index.json")))
    assert (info["count"], info["dimension"], info["model"]["source"], info["model"]["pooling"]) == (
        len(corpus), 16, os.path.abspath(models["st"]), "mean")
    vectors = models["model"].encode(corpus)
    assert_close(np.load(os.path.join(index, "vectors.npy")), vectors, atol=1e-6)

    # Exact cosine top-k, as numpy computes it; the index's own model is loaded from what index.json names.
    queries = ["good day", "fox"]
    code, stdout, err = _run(["search", index, *queries, "--top-k", "3", "--format", "json"], capsys)
    assert code == 0, err
    results = json.loads(stdout)
    scores = models["model"].encode(queries) @ vectors.T  # normalised vectors: cosine = dot product
    for result, query, row in zip(results, queries, scores):
        best = np.argsort(-row, kind="stable")[:3]
        assert result["query"] == query
        assert [hit["index"] for hit in result["results"]] == best.tolist()
        assert [hit["text"] for hit in result["results"]] == [corpus[i] for i in best]
        assert_close([hit["score"] for hit in result["results"]], row[best], atol=1e-5)
        assert [hit["rank"] for hit in result["results"]] == [1, 2, 3]
    code, stdout, _ = _run(["search", index, "the good day", "--top-k", "50", "--model", models["export"]], capsys)
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0] == "query: the good day" and len(lines) == 1 + len(corpus)  # top-k beyond the count: every text
    assert lines[1].startswith("1\t1.0000\tthe good day")

    # An existing index is replaced only with --force.
    code, _, err = _run(["index", "--checkpoint", models["st"], "--input", str(source), "--out", index], capsys)
    assert code == 2 and "already exists; pass --force to replace it." in err and "overwrite" not in err
    source.write_text("one\ntwo\n")
    assert _run(["index", "--checkpoint", models["st"], "--input", str(source), "--out", index, "--force"], capsys)[0] == 0
    assert json.load(open(os.path.join(index, "index.json")))["count"] == 2


@pytest.mark.slow
def test_search_refuses_another_model_and_a_damaged_index(models, tmp_path, capsys):
    source = tmp_path / "corpus.txt"
    source.write_text("the good day\na bad day\n", encoding="utf-8")
    index = str(tmp_path / "index")
    assert _run(["index", "--model", models["export"], "--input", str(source), "--out", index], capsys)[0] == 0

    code, _, err = _run(["search", index, "ok", "--checkpoint", models["wide"]], capsys)
    assert code == 2 and "Dimension mismatch: the index" in err and "holds 16-dimensional vectors" in err and "gives 32" in err
    code, _, err = _run(["search", index, "ok", "--checkpoint", models["other"]], capsys)
    assert code == 2 and "was written by another model" in err and os.path.abspath(models["export"]) in err

    def damaged(name, write):
        copy = str(tmp_path / name)
        shutil.copytree(index, copy)
        write(os.path.join(copy, "vectors.npy"))
        code, _, err = _run(["search", copy, "ok"], capsys)
        assert code == 2
        return err

    def truncate(path):
        with open(path, "r+b") as f:
            f.truncate(100)

    assert "vectors.npy cannot be read as a .npy array" in damaged("truncated", truncate)
    assert "holds a float32 array of shape (3, 16), but index.json describes float32 (2, 16)" in damaged(
        "shape", lambda path: np.save(path, np.zeros((3, 16), "float32")))
    assert "holds values that are not finite" in damaged("nan", lambda path: np.save(path, np.full((2, 16), np.nan, "float32")))
    code, _, err = _run(["search", str(tmp_path), "ok"], capsys)
    assert code == 2 and "is not an index written by bert-keras index (no index.json)" in err

    # A failure while indexing (a bad record) leaves no index.
    source.write_bytes(b"good\n\xff\n")
    code, _, err = _run(["index", "--model", models["export"], "--input", str(source), "--out", str(tmp_path / "new")], capsys)
    assert code == 2 and "UTF-8" in err
    assert not os.path.exists(tmp_path / "new") and not [n for n in os.listdir(tmp_path) if n.startswith(".partial")]


# === An index is data: the model it records is used only as weights (issue 38, findings 1 and 8) ===


@pytest.fixture(scope="module")
def tiny_index(models):
    return build_index(models["model"], ["the good day", "a bad day"], str(models["root"] / "tiny_index")).index_dir


def _index_naming(tiny_index, tmp_path, model):
    """A copy of an index of the tiny model whose index.json records `model` as the model that wrote it."""
    directory = tmp_path / "index"
    shutil.copytree(tiny_index, directory)
    info = json.loads((directory / "index.json").read_text())
    info["model"] = model
    (directory / "index.json").write_text(json.dumps(info))
    return str(directory)


def _planted_export(models, tmp_path, flag):
    """A SavedModel that writes `flag` when loaded, dressed as an export of export_sentence_encoder (its info file),
    so that nothing but the rule keeps it from being loaded."""
    planted = planted_module(tmp_path / "planted_export", flag)
    shutil.copytree(os.path.join(models["export"], "assets.extra"), os.path.join(planted, "assets.extra"))
    return planted


def test_search_never_loads_an_export_an_index_records(models, tiny_index, tmp_path, capsys):
    flag = tmp_path / "ran.txt"
    planted = _planted_export(models, tmp_path, flag)
    index = _index_naming(tiny_index, tmp_path, {"export": planted, "dimension": 16})
    code, stdout, err = _run(["search", index, "ok"], capsys)
    assert code == 2 and stdout == ""
    assert f"--model {planted}" in err and os.path.join(index, "index.json") in err and "read only as weights" in err
    assert not flag.exists()  # the planted graph never ran
    with pytest.raises(ValueError, match=re.escape(f"--model {planted}")) as refused:
        load_embedding_model(json.loads(open(os.path.join(index, "index.json")).read())["model"])
    assert "bert_keras.export.load(path)" in str(refused.value)  # the one door, a directory or its file
    assert not flag.exists()
    tf.saved_model.load(planted)  # the plant works: a load runs it
    assert flag.exists()


@pytest.mark.parametrize("layout", ["module", "module_pair"])
def test_search_never_loads_a_module_an_index_records_as_its_source(tiny_index, tmp_path, capsys, layout):
    flag = tmp_path / "ran.txt"
    source = tmp_path / "source"
    if layout == "module":
        planted_module(source, flag)
    else:  # the layout of `bert-keras convert`: encoder/ and preprocess/
        planted_module(source / "encoder", flag)
        planted_module(source / "preprocess", flag)
    identity = {"source": str(source), "pooling": "mean", "normalize": True, "max_seq_length": 12, "dimension": 16}
    index = _index_naming(tiny_index, tmp_path, identity)
    code, stdout, err = _run(["search", index, "ok"], capsys)
    assert code == 2 and stdout == ""
    assert f"--checkpoint {source}" in err and os.path.join(index, "index.json") in err and "read only as weights" in err
    assert not flag.exists()
    with pytest.raises(ValueError, match=re.escape(f"--checkpoint {source}")):
        load_embedding_model(identity)
    assert not flag.exists()


@pytest.mark.slow
def test_an_index_of_a_real_module_searches_with_the_flags_its_refusal_prints(models, tmp_path, capsys):
    """An index written from a Hub module pair (`bert-keras convert`) the user named: search without flags refuses
    it, and the flags the message prints rebuild the recorded model exactly (the probe check passes)."""
    pair, corpus, index = str(tmp_path / "pair"), tmp_path / "corpus.txt", str(tmp_path / "pair_index")
    assert _run(["convert", models["bert"], "--out", pair], capsys)[0] == 0
    corpus.write_text("the good day\na bad day\n", encoding="utf-8")
    code, _, err = _run(["index", "--checkpoint", pair, "--pooling", "mean", "--input", str(corpus), "--out", index], capsys)
    assert code == 0, err
    code, stdout, err = _run(["search", index, "good"], capsys)
    assert code == 2 and stdout == ""
    flags = shlex.split(err.split("pass it yourself: ")[1].split(" (in Python")[0])
    assert flags[:4] == ["--checkpoint", os.path.abspath(pair), "--pooling", "mean"], err
    code, stdout, err = _run(["search", index, "good", *flags], capsys)
    assert code == 0, err
    assert stdout.splitlines()[0] == "query: good" and len(stdout.splitlines()) == 3


@pytest.mark.slow  # 7 s in the full run of 450d6b9
def test_search_reads_a_recorded_hugging_face_folder_as_weights(models, tmp_path, capsys):
    """A plain Hugging Face folder (with a SavedModel planted beside its weights) recorded as the source: searched
    without flags, its weights are read and the SavedModel never loads."""
    flag, folder = tmp_path / "ran.txt", tmp_path / "bert"
    shutil.copytree(models["bert"], folder)
    planted = planted_module(tmp_path / "planted", flag)
    for name in ("saved_model.pb", "variables"):
        os.replace(os.path.join(planted, name), folder / name)
    index, corpus = str(tmp_path / "plain_index"), tmp_path / "corpus.txt"
    corpus.write_text("the good day\na bad day\nquick brown fox\n", encoding="utf-8")
    code, _, err = _run(["index", "--checkpoint", str(folder), "--pooling", "mean", "--input", str(corpus), "--out", index],
                        capsys)
    assert code == 0, err
    code, stdout, err = _run(["search", index, "good day", "the day"], capsys)
    assert code == 0, err
    named = _run(["search", index, "good day", "the day", "--checkpoint", str(folder), "--pooling", "mean"], capsys)
    assert named[:2] == (0, stdout) and stdout.count("\n") == 2 * (1 + 3) + 1  # two queries, three hits each
    assert not flag.exists()


@pytest.mark.parametrize("probe", [[float("nan")] * 16, [], [0.25] * 15, [0.25], [[0.25] * 16], [1e39] * 16, ["a"] * 16, None])
def test_an_index_with_a_bad_probe_is_refused(models, tiny_index, tmp_path, capsys, probe):
    index = _index_naming(tiny_index, tmp_path, {"export": models["export"], "dimension": 16})
    info_path = os.path.join(index, "index.json")
    info = json.loads(open(info_path).read())
    info["probe"]["embedding"] = probe
    with open(info_path, "w") as f:
        json.dump(info, f)  # a NaN is written as NaN, which json reads back
    with pytest.raises(ValueError, match=re.escape(info_path) + ".*probe"):
        load_index(index)
    code, stdout, err = _run(["search", index, "ok", "--model", models["export"]], capsys)
    assert code == 2 and stdout == "" and info_path in err and "probe" in err


@pytest.mark.slow  # over 3 s: the whole suite runs it, the fast loop does not
def test_index_piped_prints_progress_lines_and_q_silences_them(models, tmp_path, capsys, monkeypatch):
    from bert_keras.commands import _common

    source = tmp_path / "corpus.txt"
    source.write_text("".join(f"text number {i}\n" for i in range(1200)), encoding="utf-8")
    monkeypatch.setattr(_common, "PROGRESS_SECONDS", 0.0)  # a line per chunk of 16 batches, not per 10 s
    argv = ["index", "--model", models["export"], "--input", str(source), "--batch-size", "32"]
    code, _, err = _run([*argv, "--out", str(tmp_path / "a")], capsys)  # capsys: standard error is no terminal
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("bert-keras index: ")]
    assert [line.split(" texts (")[0] for line in lines] == ["bert-keras index: 512", "bert-keras index: 1024",
                                                             "bert-keras index: 1200"]
    assert all(line.endswith(" texts/s)") for line in lines)
    code, _, err = _run(["-q", *argv, "--out", str(tmp_path / "b")], capsys)
    assert code == 0 and "bert-keras index: " not in err, err
    _common.set_quiet(False)


@pytest.mark.slow  # over 3 s: the whole suite runs it, the fast loop does not
def test_search_answers_queries_from_standard_input_with_one_load(models, tmp_path, capsys, monkeypatch):
    source = tmp_path / "corpus.txt"
    source.write_text("the good day\na bad day\nnot ok\nvery good\nquick brown fox\n", encoding="utf-8")
    index = str(tmp_path / "index")
    assert _run(["index", "--model", models["export"], "--input", str(source), "--out", index], capsys)[0] == 0
    queries = ["good day", "a fox", "bad"]
    search = ["search", index, "--model", models["export"], "--top-k", "2"]
    code, expected, err = _run([*search, "--format", "json", *queries], capsys)
    assert code == 0, err
    code, stdout, err = _run([*search, "--format", "json"], capsys, stdin="good day\n\na fox\r\nbad\n".encode(),
                             monkeypatch=monkeypatch)
    assert code == 0, err
    answers, expected = [json.loads(line) for line in stdout.splitlines()], json.loads(expected)  # a line per query
    assert [a["query"] for a in answers] == queries  # blank lines skipped, \r\n ends a line
    for answer, reference in zip(answers, expected):  # one query per batch here, three there: float rounding only
        assert [hit["index"] for hit in answer["results"]] == [hit["index"] for hit in reference["results"]]
        np.testing.assert_allclose([h["score"] for h in answer["results"]], [h["score"] for h in reference["results"]],
                                   atol=1e-5)
    code, stdout, err = _run(search, capsys, stdin="good day\n".encode(), monkeypatch=monkeypatch)
    assert code == 0 and stdout.startswith("query: good day\n1\t") and stdout.endswith("\n\n"), (stdout, err)
    code, _, err = _run(search, capsys, stdin=b"good day\n\xff\n", monkeypatch=monkeypatch)
    assert code == 2 and "standard input line 2 is not valid UTF-8 (byte 0xff at column 1)" in err
    code, _, err = _run(search, capsys, stdin=b"\n \n", monkeypatch=monkeypatch)
    assert code == 2 and "no query given" in err
