"""The main job: real pretrained weights, real tweets, fine-tune, export, reload, predict.

Run it with `bert-keras demo`. Steps: convert the installed MiniLM checkpoint
into Hub modules (reused when present), split the tweets (stratified, fixed
seed), score two baselines on the same training examples (majority class;
TF-IDF word 1-2 grams + logistic regression), fine-tune through the reference
workflow (Hub layers, string input, freeze -> adapt -> unfreeze), report test
accuracy and macro-F1, export the model (raw strings in; probabilities and
label names out), reload it from disk and predict.
"""

import dataclasses
import json
import logging
import os
import time

import numpy as np

from bert_keras._files import check_target, read_marker
from bert_keras.export import convert_to_hub
from bert_keras.data.texts import LabelledText, stratified_split
from bert_keras.evaluate import classification_scores
from bert_keras.export import load_classifier
from bert_keras.formats.hub_module import read_module_pair
from bert_keras.training import FineTuneConfig, finetune_classifier
from bert_keras.text.corpora import TWEET_LABELS, load_tweets, minilm_vocab_path

logger = logging.getLogger(__name__)

EXAMPLES = [
    "I love this new phone, the camera is amazing!",
    "Worst customer service ever. Never flying with them again.",
    "The meeting has been moved to 3pm on Thursday.",
    "@friend thanks so much for the birthday wishes :)",
    "ugh my flight got cancelled again",
]


@dataclasses.dataclass
class DemoConfig:
    out_dir: str = "saved_models"
    train_size: int = 4998
    validation_size: int = 499
    test_size: int = 1999  # 0: the whole test split
    # The classifier packs 64 tokens (99.8% of the tweets fit); the converted module pair keeps TF Hub's default of
    # 128, so that it is an ordinary preprocess module for other texts. The training recipe is FineTuneConfig's own.
    seq_length: int = 64
    batch_size: int = FineTuneConfig.batch_size
    head_epochs: int = FineTuneConfig.head_epochs
    epochs: int = FineTuneConfig.epochs
    head_learning_rate: float = FineTuneConfig.head_learning_rate
    learning_rate: float = FineTuneConfig.learning_rate
    seed: int = FineTuneConfig.seed
    full: bool = False
    overwrite: bool = False  # replace the classifier and results of an earlier run in out_dir


def _subsample(indices, labels, size, seed):
    """A stratified subset of exactly `size` of `indices` (all of them when size >= len).

    Each class gets its share of `size` rounded down, and the places left over
    go one each to the classes with the largest remainders (ties: the lower
    label), so the sizes add up to `size`. The random draws are those of
    `stratified_split` (a permutation of each class's members, then of the
    part), so a size that the rounding used to reach gives the same tweets.
    """
    if size <= 0 or size >= len(indices):
        return indices
    subset_labels = labels[indices]
    classes, counts = np.unique(subset_labels, return_counts=True)
    quotas = size * counts / len(indices)
    take = np.floor(quotas + 1e-9).astype(int)
    by_remainder = sorted(range(len(classes)), key=lambda c: (take[c] - quotas[c], c))
    for c in by_remainder[: size - int(take.sum())]:
        take[c] += 1
    rng = np.random.default_rng(seed)
    part = []
    for label, count in zip(classes, take):
        part.extend(rng.permutation(np.flatnonzero(subset_labels == label))[:count])
    return indices[rng.permutation(np.array(part, dtype=int))]


def baselines(train, test, seed=0):
    """Majority class and TF-IDF (word 1-2 grams) + logistic regression, scored on `test`."""
    # scikit-learn comes with the demo extra only.
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    def scores(predicted):
        one_hot = np.eye(len(train.label_names))[predicted]
        return classification_scores(test.labels, one_hot, len(train.label_names))

    majority = int(np.bincount(train.labels).argmax())
    results = {"majority class": scores(np.full(len(test), majority))}
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1)
    features = vectorizer.fit_transform(train.texts)
    classifier = LogisticRegression(max_iter=2000, C=4.0, random_state=seed).fit(features, train.labels)
    results["TF-IDF 1-2 grams + logistic regression"] = scores(classifier.predict(vectorizer.transform(test.texts)))
    return results


def ensure_modules(out_dir, report):
    """Hub modules of the installed MiniLM checkpoint under `out_dir`, converted once."""
    target = os.path.join(out_dir, "minilm_l6_h384_uncased")
    source = os.path.abspath(os.path.dirname(minilm_vocab_path()))
    pair = read_module_pair(target)
    if pair is not None and read_marker(target).get("source") == source:
        report(f"Reusing the Hub modules in {target} (a whole pair converted from {source})")
        encoder_dir, preprocess_dir = pair
        return preprocess_dir, encoder_dir
    report(f"Converting the MiniLM checkpoint in {source} into Hub modules under {target}")
    convert_to_hub(source, target, overwrite=True, progress=lambda i, n, text: report(f"  [{i}/{n}] {text}"))
    encoder_dir, preprocess_dir = read_module_pair(target)
    return preprocess_dir, encoder_dir


def load_tweet_splits(config, report):
    texts, labels = load_tweets()
    data = LabelledText(texts=texts, labels=np.array(labels, dtype="int32"), label_names=list(TWEET_LABELS))
    train_idx, val_idx, test_idx = stratified_split(data.labels, (0.8, 0.1, 0.1), seed=config.seed)
    if not config.full:
        train_idx = _subsample(train_idx, data.labels, config.train_size, config.seed)
        val_idx = _subsample(val_idx, data.labels, config.validation_size, config.seed)
        test_idx = _subsample(test_idx, data.labels, config.test_size, config.seed)
    splits = data.subset(train_idx), data.subset(val_idx), data.subset(test_idx)
    counts = ", ".join(f"{name} {len(part)}" for name, part in zip(("train", "validation", "test"), splits))
    report(f"Tweets: {len(data)} in the corpus; stratified split (seed {config.seed}): {counts}")
    return splits


def run_demo(config=None, report=print, verbose=2):
    """Runs the main job and returns a dict of its results (also written as JSON)."""
    config = config or DemoConfig()
    started = time.time()
    export_dir = os.path.join(config.out_dir, "tweet_sentiment_classifier")
    check_target(export_dir, config.overwrite, argument="the classifier in out_dir", kind="classifier")  # before any work
    preprocess_dir, encoder_dir = ensure_modules(config.out_dir, report)
    train, validation, test = load_tweet_splits(config, report)

    report("Baselines on the same training examples:")
    baseline_scores = baselines(train, test, seed=config.seed)
    for name, scores in baseline_scores.items():
        report(f"  {name}: accuracy {scores['accuracy']:.4f}, macro-F1 {scores['macro_f1']:.4f}")

    report("Fine-tuning MiniLM-L6-H384 through its Hub modules (bert_keras.hub layers):")
    result = finetune_classifier(
        (encoder_dir, preprocess_dir),
        train,
        validation,
        test,
        export_dir,
        FineTuneConfig(seq_length=config.seq_length, batch_size=config.batch_size, head_epochs=config.head_epochs,
                       head_learning_rate=config.head_learning_rate, epochs=config.epochs,
                       learning_rate=config.learning_rate, seed=config.seed),
        overwrite=config.overwrite,
        verbose=verbose,
        report=lambda text: report(f"  {text}"),
    )
    ours, probabilities = result.scores, result.test_probabilities
    report(f"Fine-tuned MiniLM on the test split: accuracy {ours['accuracy']:.4f}, macro-F1 {ours['macro_f1']:.4f}")
    report(f"The report (evaluation.json, confusion_matrix.png, training_curves.png) is in {export_dir}/assets.extra")

    report(f"Reloading the export from {export_dir} and scoring the {len(test)} test tweets with it")
    reloaded = load_classifier(export_dir, warm_up=False)  # batches only: no length bucket to compile ahead
    reloaded_probabilities = reloaded.predict_proba(test.texts)
    difference = float(np.max(np.abs(reloaded_probabilities - probabilities)))
    same_labels = bool(np.array_equal(reloaded_probabilities.argmax(-1), probabilities.argmax(-1)))
    report(f"Reloaded from disk: max |probability difference| vs the in-memory model {difference:.2e}; same labels: {same_labels}")
    for text, prediction in zip(EXAMPLES, reloaded.predict(EXAMPLES)):
        report(f"  {prediction['label']:>8} ({prediction['score']:.2f})  {text}")

    results = {
        "config": dataclasses.asdict(config),
        "sizes": result.sizes,
        "baselines": baseline_scores,
        "fine_tuned": ours,
        "evaluation": result.evaluation,
        "history": dataclasses.asdict(result.history),
        "reload_max_abs_difference": difference,
        "reload_same_labels": same_labels,
        "fit_seconds": round(result.fit_seconds, 1),
        "total_seconds": round(time.time() - started, 1),
    }
    with open(os.path.join(config.out_dir, "demo_results.json"), "w") as f:
        json.dump(results, f, indent=2)
    report(f"Done in {results['total_seconds']:.0f} s (fine-tuning {results['fit_seconds']:.0f} s); results in {config.out_dir}/demo_results.json")
    return results
