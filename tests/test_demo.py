"""The main job's pieces, and a miniature run of it on the real weights and tweets."""

import json
import os

import numpy as np
import pytest

from bert_keras.datasets import LabelledText


def test_baselines_on_a_separable_toy_set():
    pytest.importorskip("sklearn")
    from bert_keras.demo import baselines

    train = LabelledText(["good good", "great", "bad", "awful bad", "fine"] * 4, np.array([1, 1, 0, 0, 1] * 4), ["neg", "pos"])
    test = LabelledText(["good", "bad", "great great"], np.array([1, 0, 1]), ["neg", "pos"])
    scores = baselines(train, test)
    assert scores["majority class"]["accuracy"] == pytest.approx(2 / 3)
    assert scores["TF-IDF 1-2 grams + logistic regression"]["accuracy"] == 1.0


@pytest.mark.slow
def test_miniature_demo_run(tmp_path):
    pytest.importorskip("sklearn")
    from bert_keras.demo import DemoConfig, run_demo

    lines = []
    config = DemoConfig(out_dir=str(tmp_path), train_size=96, validation_size=32, test_size=48, seq_length=32, epochs=1)
    results = run_demo(config, report=lines.append, verbose=0)
    # Stratified subsets round each class down: at most one example short per class (3 classes).
    for part, size in (("train", 96), ("validation", 32), ("test", 48)):
        assert size - 3 <= results["sizes"][part] <= size
    assert results["reload_same_labels"] is True
    assert results["reload_max_abs_difference"] <= 1e-6
    assert 0.0 <= results["fine_tuned"]["accuracy"] <= 1.0
    assert set(results["baselines"]) == {"majority class", "TF-IDF 1-2 grams + logistic regression"}
    assert os.path.exists(os.path.join(str(tmp_path), "tweet_sentiment_classifier", "saved_model.pb"))
    with open(os.path.join(str(tmp_path), "demo_results.json")) as f:
        assert json.load(f)["fine_tuned"] == results["fine_tuned"]
    text = "\n".join(lines)
    assert "Converting the MiniLM checkpoint" in text and "Reloaded from disk" in text
    assert len([line for line in lines if line.startswith("  ") and "(" in line]) >= 5
