"""The MiniLM-L6 classifier's serving computation forced into each layout, on batches of 1, 8 and 32 tweets.

`BertClassifier.serving_outputs(first_token_only=False)` on the preprocessor's packing of random tweets of
`serving.tweet_sample()`, cut after the longest row (the share of padding printed first), in a `tf.function` traced once with every batch padded
(`bert_keras.layers.packing`'s thresholds raised) and once with every batch token-packed (lowered); the two
alternate call by call. Prints the median time per batch size and layout: where packing starts to pay, which
`packing.PADDED_MAX_POSITIONS` and `PADDED_MAX_PADDING_SHARE` encode. Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/encoder_layouts.py
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving  # noqa: E402 - the tweet sample and the MiniLM checkpoint (imports nothing heavy)


def main():
    import numpy as np
    import tensorflow as tf

    from bert_keras.export._serving import trim_padding
    from bert_keras.layers import packing
    from bert_keras.tasks import BertClassifier

    model = BertClassifier.from_checkpoint(serving.minilm_dir(), num_classes=3, seq_length=128)
    tweets = serving.tweet_sample()
    functions = {}
    for layout, (positions, share) in {"packed": (-1, -1.0), "padded": (10**9, 2.0)}.items():
        packing.PADDED_MAX_POSITIONS, packing.PADDED_MAX_PADDING_SHARE = positions, share  # read when traced
        functions[layout] = tf.function(
            lambda texts: model.serving_outputs(trim_padding(model.preprocessor(texts)), first_token_only=False),
            input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
        functions[layout](tf.constant(tweets[:2]))
    lengths = model.preprocessor(tf.constant(tweets))["input_mask"].numpy().sum(axis=1)  # tokens per tweet
    rng = np.random.default_rng(0)
    for batch in (1, 8, 32):  # the share of padding in a batch cut after its longest row, over 500 random batches
        rows = [lengths[rng.integers(0, len(lengths), batch)] for _ in range(500)]
        print(f"batch {batch}: padding {np.mean([1 - r.sum() / (batch * r.max()) for r in rows]):.0%} of the positions")
    for batch, calls in ((1, 60), (8, 15), (32, 5)):
        times = {layout: [] for layout in functions}
        for i in range(calls):
            texts = tf.constant([tweets[j] for j in rng.integers(0, len(tweets), batch)])
            for layout in (list(functions) if i % 2 else list(functions)[::-1]):
                began = time.perf_counter()
                functions[layout](texts)
                times[layout].append(time.perf_counter() - began)
        medians = {layout: 1e3 * statistics.median(values) for layout, values in times.items()}
        print(f"batch {batch}: " + ", ".join(f"{layout} {ms:.1f} ms" for layout, ms in medians.items())
              + f"; packed/padded {medians['packed'] / medians['padded']:.2f}x")


if __name__ == "__main__":
    main()
