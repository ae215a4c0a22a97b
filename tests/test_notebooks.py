"""Every notebook runs top to bottom."""

import glob
import os

import pytest

NOTEBOOKS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "notebooks", "*.ipynb")))


def test_there_are_notebooks():
    assert [os.path.basename(path) for path in NOTEBOOKS] == ["reference_workflow.ipynb"]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs(path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    outputs = "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])
    )
    assert "encoder variables changed while frozen: 0" in outputs
    assert "max difference to the in-memory model:" in outputs
    difference = float(outputs.split("max difference to the in-memory model:")[1].split()[0])
    assert difference < 1e-5
