"""One process of a distributed contrastive run: `python -m tests.distribute._contrastive MODE INPUTS OUT`.

MODE is `single` (one replica) or `multi-worker` (the cluster of `TF_CONFIG`).
The process fine-tunes a `SentenceEncoder` on INPUTS' tiny checkpoint (no
dropout) with `finetune_sentence_encoder`: 64 (anchor, positive) pairs made
from its texts, a global batch of 32 (2 workers: 16 pairs each), 2 epochs.
The chief writes `contrastive.npz` (the trained weights) and
`contrastive.json` (the loss history) and `initial.npz` (the weights before).
"""

import argparse
import json
import os
import random

import numpy as np

from bert_keras.training.strategy import is_chief, make_strategy  # noqa: I001 - before TensorFlow starts its devices

OPTIONS = dict(batch_size=32, epochs=2, learning_rate=5e-3, seed=3)


def pairs():
    """64 pairs: a sentence of 3-6 words and the same words in another order with one of them left out."""
    rng = random.Random(0)
    anchors, positives = [], []
    for _ in range(64):
        words = [f"tok{rng.randrange(35)}" for _ in range(rng.randrange(3, 7))]
        kept = rng.sample(words, len(words) - 1)
        anchors.append(" ".join(words))
        positives.append(" ".join(kept))
    return anchors, positives


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("single", "multi-worker"))
    parser.add_argument("inputs")
    parser.add_argument("out")
    args = parser.parse_args()
    strategy = make_strategy("default" if args.mode == "single" else "multi-worker", connect_timeout=60)

    import keras

    from bert_keras.tasks.sentence_encoder import SentenceEncoder
    from bert_keras.training import finetune_sentence_encoder

    inputs = json.load(open(os.path.join(args.inputs, "inputs.json")))
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = SentenceEncoder.from_checkpoint(inputs["checkpoint"], pooling="mean", max_seq_length=12)
    initial = model.get_weights()
    history = finetune_sentence_encoder(model, *pairs(), strategy=strategy, verbose=0, **OPTIONS)
    if is_chief(strategy):
        np.savez(os.path.join(args.out, "contrastive.npz"), *model.get_weights())
        np.savez(os.path.join(args.out, "initial.npz"), *initial)
        with open(os.path.join(args.out, "contrastive.json"), "w") as f:
            json.dump(history, f)


if __name__ == "__main__":
    main()
