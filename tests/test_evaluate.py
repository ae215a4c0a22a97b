"""bert_keras.evaluate: scores equal to scikit-learn's, and reports without matplotlib (the `reports` extra)."""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from bert_keras.evaluate import CONFUSION_PNG, CURVES_PNG, REPORT_FILE, classification_report, report_files

metrics = pytest.importorskip("sklearn.metrics")


def test_the_scores_are_scikit_learns_to_the_last_bit():
    rng = np.random.default_rng(0)
    for trial in range(300):
        n, k = int(rng.integers(1, 30)), int(rng.integers(1, 6))
        labels = rng.integers(0, k + 1 if trial % 3 == 0 else k, size=n)  # a third hold a class id beyond the names
        scores = rng.random((n, k + trial % 2))  # half predict a class beyond the names too
        names = [f"c{i}" for i in range(k)]
        report, predicted = classification_report(labels, scores, names), scores.argmax(-1)
        reference = metrics.precision_recall_fscore_support(labels, predicted, labels=list(range(k)), zero_division=0)
        for key, values in zip(("precision", "recall", "f1", "support"), reference):
            assert [report["per_class"][name][key] for name in names] == values.tolist(), (trial, key)
        assert report["accuracy"] == metrics.accuracy_score(labels, predicted)
        assert report["macro_f1"] == float(np.mean(reference[2]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if set(labels.tolist()) & set(range(k)):  # scikit-learn refuses a matrix of no true class it is given
                assert report["confusion_matrix"] == metrics.confusion_matrix(labels, predicted, labels=list(range(k))).tolist()


def test_a_negative_class_id_is_refused():
    with pytest.raises(ValueError, match="negative class id"):
        classification_report([0, -1], np.eye(2), ["a", "b"])


def test_with_matplotlib_the_report_holds_its_pictures():
    report = classification_report([0, 1], np.eye(2), ["a", "b"])
    files = report_files(report, {"head": {"loss": [1.0, 0.5]}, "full": {"loss": [0.4]}})
    assert sorted(files) == sorted([REPORT_FILE, CONFUSION_PNG, CURVES_PNG])
    assert files[CONFUSION_PNG][:4] == b"\x89PNG"


# A process where matplotlib is not installed: its import fails as it would (a finder that refuses it).
WITHOUT_MATPLOTLIB = """
import importlib.abc, sys, json
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "matplotlib":
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Absent())
import logging
logging.basicConfig(level=logging.WARNING, format="%(message)s")
import numpy as np
from bert_keras import evaluate
evaluate.can_draw = lambda: False  # find_spec would still see the installed package
report = evaluate.classification_report([0, 1, 1], np.eye(2)[[0, 1, 0]], ["a", "b"])
written = evaluate.write_report(sys.argv[1], report)
print(json.dumps([sorted(evaluate.report_files(report, {"head": {"loss": [1.0]}})), [p.rsplit("/", 1)[1] for p in written]]))
print("matplotlib" in sys.modules)
"""


@pytest.mark.slow
def test_without_matplotlib_the_reports_hold_their_numbers_and_name_the_pictures_left_out(tmp_path):
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-c", WITHOUT_MATPLOTLIB, str(out)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 0, done.stderr[-3000:]
    files, written = json.loads(done.stdout.splitlines()[0])
    assert files == [REPORT_FILE] and written == [REPORT_FILE]
    assert done.stdout.splitlines()[1] == "False"
    assert "confusion_matrix.png and training_curves.png not drawn: matplotlib is not installed" in done.stderr
    assert json.loads((out / REPORT_FILE).read_text())["accuracy"] == pytest.approx(2 / 3)
    assert REPORT_FILE in os.listdir(out) and CONFUSION_PNG not in os.listdir(out)
