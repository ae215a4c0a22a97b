"""Two classifier SavedModels side by side in one process: batch-1 and batch-32 times, alternating call by call.

For a change to the serving graph (e.g. the encoder's layout per batch, issue 58): export the same classifier
before and after it (`benchmarks/serving_engines.py --work DIR` writes `DIR/saved_model`), then

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/saved_model_ab.py BEFORE_DIR AFTER_DIR

Both are loaded with `load_classifier` (warm-up replayed before timing) and serve the same random tweets of
`serving.tweet_sample()`, the order of the two alternating per call, so that a shared, loaded machine slows both
alike. Prints each one's batch-1 p50/p99 and batch-32 texts/s, the median of per-call time ratios (after/before),
and the max abs difference of their probabilities on 200 tweets.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving  # noqa: E402 - the tweet sample (imports nothing heavy)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--single", type=int, default=300, help="batch-1 calls of each")
    parser.add_argument("--batches", type=int, default=40, help="batch-32 calls of each")
    args = parser.parse_args()
    import numpy as np

    from bert_keras.export import load_classifier

    models = {"before": load_classifier(args.before, warm_up=True), "after": load_classifier(args.after, warm_up=True)}
    tweets = serving.tweet_sample()
    rng = np.random.default_rng(0)
    times = {(name, size): [] for name in models for size in (1, 32)}
    for size, calls in ((1, args.single), (32, args.batches)):
        for i in range(calls):
            texts = [tweets[j] for j in rng.integers(0, len(tweets), size)]
            for name in (["before", "after"] if i % 2 else ["after", "before"]):
                began = time.perf_counter()
                models[name].predict(texts, batch_size=size)
                times[name, size].append(time.perf_counter() - began)
    for name in models:
        single, batch = np.array(times[name, 1]), np.array(times[name, 32])
        print(f"{name}: batch 1 p50 {1e3 * np.median(single):.1f} ms, p99 {1e3 * np.percentile(single, 99):.1f} ms; "
              f"batch 32 {32 * len(batch) / batch.sum():.0f} texts/s")
    for size in (1, 32):
        ratios = np.array(times["after", size]) / np.array(times["before", size])
        print(f"batch {size}: after/before, median of per-call time ratios {np.median(ratios):.2f}x")
    probabilities = [np.asarray(model.predict_proba(tweets[:200])) for model in models.values()]
    print(f"max abs difference of the probabilities on 200 tweets: {np.abs(probabilities[0] - probabilities[1]).max():.2e}")


if __name__ == "__main__":
    main()
