"""Evaluation reports: accuracy, macro-F1, per-class scores, the confusion matrix, and training curves.

The numbers are counted here with numpy (scikit-learn's definitions: `zero_division=0`, macro averages over every
class); the pictures come from matplotlib (an object-oriented `Figure`, no pyplot state, rendered to PNG bytes),
imported where a picture is drawn: it is the `reports` extra (`pip install "bert-keras[reports]"`), not a
requirement, because Keras imports matplotlib (and scikit-learn) at its own import whenever they are installed, which
every process that only serves would pay for. Without it, the reports hold their JSON and text and say which
pictures were left out. This module is the one place the package scores a classifier: `finetune --test`,
`bert-keras evaluate` and the demo's baselines all call it.
"""

import io
import json
import os

import logging

import numpy as np

from bert_keras._files import staged_directory

logger = logging.getLogger(__name__)

REPORT_FILE = "evaluation.json"
CONFUSION_PNG = "confusion_matrix.png"
CURVES_PNG = "training_curves.png"


def _predicted(scores):
    """Class ids from `(n, num_classes)` scores (probabilities, logits or one-hot)."""
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"Expected scores of shape (num_examples, num_classes). Received: shape={scores.shape}")
    return scores.argmax(axis=-1)


def classification_scores(labels, probabilities, num_classes):
    """Accuracy and macro-F1 of the most probable class.

    >>> classification_scores([0, 1, 1], np.eye(2)[[0, 1, 0]], 2)
    {'accuracy': 0.6666666666666666, 'macro_f1': 0.6666666666666666}
    """
    report = classification_report(labels, probabilities, [str(i) for i in range(num_classes)])
    return {"accuracy": report["accuracy"], "macro_f1": report["macro_f1"]}


def classification_report(labels, probabilities, label_names):
    """Scores predictions against true labels.

    Args:
        labels: `(n,)` true class ids.
        probabilities: `(n, num_classes)` scores; the most probable class is predicted.
        label_names: list of str, the names of classes `0..num_classes-1`.

    Returns:
        A JSON-ready dict: `label_names`, `num_examples`, `accuracy`,
        `macro_f1` (every class counts, an absent one with F1 0), `per_class`
        (`{name: {precision, recall, f1, support}}`) and `confusion_matrix`
        (rows: true class, columns: predicted class).

    >>> report = classification_report([0, 0, 1, 2], np.eye(3)[[0, 1, 1, 2]], ["neg", "neu", "pos"])
    >>> report["confusion_matrix"]
    [[1, 1, 0], [0, 1, 0], [0, 0, 1]]
    >>> report["per_class"]["neu"]
    {'precision': 0.5, 'recall': 1.0, 'f1': 0.6666666666666666, 'support': 1}
    """
    labels = np.asarray(labels, dtype="int64")
    predicted = _predicted(probabilities)
    classes = list(range(len(label_names)))
    if len(labels) != len(predicted):
        raise ValueError(f"Received {len(labels)} labels and {len(predicted)} predictions; expected as many of each.")
    if labels.size and labels.min() < 0:
        raise ValueError(f"Received a negative class id among the labels ({int(labels.min())}); class ids start at 0.")
    width = max(len(classes), int(labels.max(initial=-1)) + 1, int(predicted.max(initial=-1)) + 1)
    support = np.bincount(labels, minlength=width)[: len(classes)]
    chosen = np.bincount(predicted, minlength=width)[: len(classes)]
    hits = np.bincount(labels[labels == predicted], minlength=width)[: len(classes)]
    precision, recall, f1 = (_share(hits, chosen), _share(hits, support), _share(2 * hits, support + chosen))
    confusion = np.zeros((len(classes), len(classes)), dtype="int64")
    known = (labels < len(classes)) & (predicted < len(classes))
    np.add.at(confusion, (labels[known], predicted[known]), 1)
    return {
        "label_names": [str(name) for name in label_names],
        "num_examples": int(len(labels)),
        "accuracy": float(np.mean(labels == predicted)) if len(labels) else 0.0,
        "macro_f1": float(np.mean(f1)),
        "per_class": {
            str(name): {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for name, p, r, f, s in zip(label_names, precision, recall, f1, support)
        },
        "confusion_matrix": confusion.tolist(),
    }


def _share(part, whole):
    """`part / whole` per class, 0 where `whole` is 0 (scikit-learn's `zero_division=0`)."""
    return np.divide(part, whole, out=np.zeros(len(part)), where=whole > 0)


def format_report(report):
    """The report as text: per-class table, accuracy and macro-F1, then the confusion matrix.

    >>> print(format_report(classification_report([0, 1, 1], np.eye(2)[[0, 1, 0]], ["neg", "pos"])))
    class  precision  recall  f1      support
    neg    0.5000     1.0000  0.6667  1
    pos    1.0000     0.5000  0.6667  2
    accuracy 0.6667, macro-F1 0.6667 (3 examples)
    confusion matrix (rows: true, columns: predicted)
         neg  pos
    neg  1    0
    pos  1    1
    """
    names = report["label_names"]
    rows = [["class", "precision", "recall", "f1", "support"]]
    for name in names:
        scores = report["per_class"][name]
        rows.append([name] + [f"{scores[key]:.4f}" for key in ("precision", "recall", "f1")] + [str(scores["support"])])
    matrix = [[""] + names] + [[name] + [str(count) for count in row] for name, row in zip(names, report["confusion_matrix"])]
    return "\n".join(
        _table(rows)
        + [f"accuracy {report['accuracy']:.4f}, macro-F1 {report['macro_f1']:.4f} ({report['num_examples']} examples)",
           "confusion matrix (rows: true, columns: predicted)"]
        + _table(matrix)
    )


def _table(rows):
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def _figure(figsize):
    from matplotlib.figure import Figure  # the `reports` extra; imported where a picture is drawn

    return Figure(figsize=figsize)


def can_draw():
    """Whether matplotlib (the `reports` extra) is installed, so that the reports' PNGs can be drawn."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _png(figure):
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def confusion_matrix_png(report, title="Confusion matrix"):
    """The report's confusion matrix as PNG bytes (counts, and row shares as colour)."""
    matrix = np.asarray(report["confusion_matrix"])
    names = report["label_names"]
    size = max(3.5, 0.9 * len(names) + 1.5)
    figure = _figure((size + 1, size))
    axes = figure.add_subplot()
    shares = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    image = axes.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    figure.colorbar(image, ax=axes, label="share of the true class")
    for (row, column), count in np.ndenumerate(matrix):
        axes.text(column, row, str(count), ha="center", va="center", color="white" if shares[row, column] > 0.5 else "black")
    axes.set_xticks(range(len(names)), names, rotation=45 if len(names) > 4 else 0)
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    axes.set_title(f"{title}: accuracy {report['accuracy']:.3f}, macro-F1 {report['macro_f1']:.3f}")
    return _png(figure)


def training_curves_png(history):
    """Loss and accuracy per epoch of both fine-tuning phases as PNG bytes.

    Args:
        history: dict with `head` and `full`, each a Keras `history.history`
            dict (`loss`, `accuracy`, `val_loss`, `val_accuracy`; any may be absent).
    """
    figure = _figure((10, 4))
    phases = [(name, history.get(name) or {}) for name in ("head", "full")]
    head_epochs = len(phases[0][1].get("loss", []))
    for index, metric in enumerate(("loss", "accuracy")):
        axes = figure.add_subplot(1, 2, index + 1)
        for key, style in ((metric, "-o"), (f"val_{metric}", "--s")):
            values = [v for _, logs in phases for v in logs.get(key, [])]
            if values and len(values) == sum(len(logs.get("loss", [])) for _, logs in phases):
                axes.plot(range(1, len(values) + 1), values, style, label="validation" if key.startswith("val_") else "training")
        if head_epochs:
            axes.axvline(head_epochs + 0.5, color="grey", linewidth=1)
            axes.text(head_epochs + 0.5, axes.get_ylim()[1], " encoder unfrozen", va="top", fontsize=8, color="grey")
        axes.set_xlabel("epoch")
        axes.set_title(metric)
        axes.xaxis.get_major_locator().set_params(integer=True)
        if axes.get_legend_handles_labels()[0]:
            axes.legend()
    return _png(figure)


def report_files(report=None, history=None):
    """`{file name: contents}` for a report and/or a training history: JSON values and PNG bytes (the PNGs where
    matplotlib is installed; a warning names those left out otherwise)."""
    files = {}
    if report is not None:
        files[REPORT_FILE] = report
    pictures = {CONFUSION_PNG: report is not None and (lambda: confusion_matrix_png(report)),
                CURVES_PNG: history is not None and (lambda: training_curves_png(history))}
    pictures = {name: draw for name, draw in pictures.items() if draw}
    if pictures and not can_draw():
        logger.warning("%s not drawn: matplotlib is not installed (pip install \"bert-keras[reports]\").",
                       " and ".join(pictures))
        return files
    return {**files, **{name: draw() for name, draw in pictures.items()}}


def write_report(directory, report, overwrite=False, argument="--out"):
    """Writes `evaluation.json` and `confusion_matrix.png` (where matplotlib is installed) into `directory` (a staged,
    atomic write); returns the paths written."""
    files = report_files(report)
    with staged_directory(directory, overwrite, kind="evaluation", argument=argument) as staging:
        for name, value in files.items():
            with open(os.path.join(staging, name), "wb" if isinstance(value, bytes) else "w") as f:
                f.write(value if isinstance(value, bytes) else json.dumps(value, indent=2))
    return [os.path.join(directory, name) for name in files]
