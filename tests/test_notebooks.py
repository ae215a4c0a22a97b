"""Every notebook runs top to bottom."""

import glob
import os

import pytest

NOTEBOOKS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "notebooks", "*.ipynb")))


def test_there_are_notebooks():
    assert [os.path.basename(path) for path in NOTEBOOKS] == ["inside_bert.ipynb", "reference_workflow.ipynb"]


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if not p.endswith("inside_bert.ipynb")], ids=os.path.basename)
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
    assert sorted(os.listdir(tmp_path)) == ["inside_bert_attention.html", "inside_bert_layer.png",
                                            "inside_bert_probe.png", "inside_bert_statistics.png"]
