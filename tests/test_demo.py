"""The main job's pieces, and a miniature run of it on the real weights and tweets."""

import json
import os

import numpy as np
import pytest

from bert_keras.data.texts import LabelledText


def test_baselines_on_a_separable_toy_set():
    pytest.importorskip("sklearn")
    from bert_keras.demo import baselines

    train = LabelledText(["good good", "great", "bad", "awful bad", "fine"] * 4, np.array([1, 1, 0, 0, 1] * 4), ["neg", "pos"])
    test = LabelledText(["good", "bad", "great great"], np.array([1, 0, 1]), ["neg", "pos"])
    scores = baselines(train, test)
    assert scores["majority class"]["accuracy"] == pytest.approx(2 / 3)
    assert scores["TF-IDF 1-2 grams + logistic regression"]["accuracy"] == 1.0


def test_subsample_gives_exactly_the_size_asked_with_each_class_share():
    from bert_keras.data.texts import stratified_split
    from bert_keras.demo import _subsample

    labels = np.array([0] * 1017 + [1] * 943 + [2] * 437)
    rng = np.random.default_rng(5)
    labels = labels[rng.permutation(len(labels))]
    indices = np.arange(3, len(labels))
    for size in (1, 2, 60, 200, 299, 300, 1999, len(indices) - 1):
        part = _subsample(indices, labels, size, seed=0)
        assert len(part) == size and len(np.unique(part)) == size and set(part) <= set(indices)
        counts = np.bincount(labels[part], minlength=3)
        shares = size * np.bincount(labels[indices], minlength=3) / len(indices)
        assert np.all(np.abs(counts - shares) < 1), (size, counts, shares)
    assert np.array_equal(_subsample(indices, labels, 300, seed=1), _subsample(indices, labels, 300, seed=1))
    assert not np.array_equal(_subsample(indices, labels, 300, seed=1), _subsample(indices, labels, 300, seed=2))
    assert _subsample(indices, labels, 0, seed=0) is indices and _subsample(indices, labels, 10**6, seed=0) is indices
    # Where rounding each class down used to land on the same size, the tweets are the same ones (the
    # published figures were measured on those): the old subset of 2000 here is the new one of its size.
    (old,) = stratified_split(labels[indices], [2000 / len(indices)], seed=0)
    assert np.array_equal(_subsample(indices, labels, len(old), seed=0), indices[old])


@pytest.mark.slow
def test_miniature_demo_run(tmp_path):
    pytest.importorskip("sklearn")
    from bert_keras.demo import DemoConfig, run_demo
    from bert_keras.export.litert import served_manifest

    lines = []
    config = DemoConfig(out_dir=str(tmp_path), train_size=96, validation_size=32, test_size=48, seq_length=32, epochs=1)
    results = run_demo(config, report=lines.append, verbose=0)
    assert results["sizes"] == {"train": 96, "validation": 32, "test": 48}
    assert results["reload_same_labels"] is True
    assert results["reload_max_abs_difference"] <= 1e-6
    assert 0.0 <= results["fine_tuned"]["accuracy"] <= 1.0
    assert set(results["baselines"]) == {"majority class", "TF-IDF 1-2 grams + logistic regression"}
    assert os.path.exists(os.path.join(str(tmp_path), "tweet_sentiment_classifier", "saved_model.pb"))
    # Trained on Hub modules, exported with the equal BertPreprocessor: bert-keras litert accepts it (issue 56).
    tokenizer = served_manifest(os.path.join(str(tmp_path), "tweet_sentiment_classifier"))["tokenizer"]
    assert (tokenizer["kind"], tokenizer["seq_length"], tokenizer["lower_case"]) == ("wordpiece", 32, True)
    with open(os.path.join(str(tmp_path), "demo_results.json")) as f:
        assert json.load(f)["fine_tuned"] == results["fine_tuned"]
    text = "\n".join(lines)
    assert "Converting the MiniLM checkpoint" in text and "Reloaded from disk" in text
    assert len([line for line in lines if line.startswith("  ") and "(" in line]) >= 5


def test_the_plan_said_before_tensorflow_loads_counts_what_the_run_does():
    # issue 55, item 12: a new user waited 9 min 16 s with no estimate up front. The plan is counted without
    # TensorFlow, from constants that must agree with their sources.
    from bert_keras.cli import _build_parser
    from bert_keras.commands import demo as command
    from bert_keras.demo import DemoConfig, load_tweet_splits
    from bert_keras.text.corpora import load_tweets, minilm_vocab_path
    from bert_keras.training import FineTuneConfig

    labels = np.array(load_tweets()[1])
    assert command.TWEETS_PER_CLASS == tuple(np.bincount(labels)) and command.BATCH_SIZE == FineTuneConfig.batch_size
    with open(os.path.join(os.path.dirname(minilm_vocab_path()), "config.json")) as f:
        config = json.load(f)
    assert command.MINILM == dict(num_layers=config["num_hidden_layers"], hidden_size=config["hidden_size"],
                                  intermediate_size=config["intermediate_size"])
    for argv, full in ((["demo"], False), (["demo", "--full"], True), (["demo", "--test-size", "0", "--train-size", "100"], False)):
        args = _build_parser().parse_args(argv)
        sizes, frozen, unfrozen, _ = command.plan(args)
        splits = load_tweet_splits(DemoConfig(train_size=args.train_size, validation_size=args.validation_size,
                                              test_size=args.test_size, full=full), report=lambda line: None)
        assert sizes == [len(part) for part in splits], argv
        assert (frozen, unfrozen) == (-(-sizes[0] // 32), 2 * -(-sizes[0] // 32))
    seconds, text = command.estimate(_build_parser().parse_args(["demo"]), rate=100.0)
    assert text.startswith("4998 training tweets: 157 steps of 32 with the encoder frozen, then 314 with it unfrozen")
    slower, _ = command.estimate(_build_parser().parse_args(["demo"]), rate=50.0)
    assert slower == pytest.approx(2 * seconds)  # computed from this machine's rate, not a fixed time
