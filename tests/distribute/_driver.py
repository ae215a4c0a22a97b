"""One process of a distributed test run: `python -m tests.distribute._driver MODE INPUTS OUT [--backup DIR]`.

MODE is `single` (the default strategy), `mirrored` (2 logical CPU devices) or
`multi-worker` (the cluster of `TF_CONFIG`, set by the test). The process
fine-tunes the tiny checkpoint in INPUTS (dropout 0) with
`finetune_classifier`, pre-trains a tiny BERT on INPUTS' corpus with
`run_pretraining`, and records, for two epochs of the fine-tune's training
stream, the examples each of its replicas was given. The chief writes
`finetune.npz` and `pretrain.npz` (the trained weights); every process writes
`seen-TASK.json`. With `--backup`, the chief also exports the classifier
to `OUT/classifier`.
"""

import argparse
import json
import math
import os

import numpy as np

from bert_keras.training.feeding import distribute_batches  # noqa: I001 - before TensorFlow starts its devices (cpu_replicas)
from bert_keras.training.strategy import is_chief, make_strategy, task_name

FINETUNE = dict(seq_length=12, batch_size=8, head_epochs=1, epochs=2, learning_rate=1e-2, dropout=0.0, seed=0)
PRETRAIN = dict(
    encoder_config=dict(num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=16, dropout=0.0,
                attention_dropout=0.0),
    seq_length=16, batch_size=4, epochs=2, steps_per_epoch=2, seed=7, export=False,
)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("single", "mirrored", "multi-worker"))
    parser.add_argument("inputs")
    parser.add_argument("out")
    parser.add_argument("--backup")
    parser.add_argument("--only", choices=("finetune",))
    args = parser.parse_args()
    name = {"single": "default", "mirrored": "mirrored", "multi-worker": "multi-worker"}[args.mode]
    strategy = make_strategy(name, cpu_replicas=2 if name == "mirrored" else None, connect_timeout=60)

    from bert_keras.data.texts import read_labelled_file
    from bert_keras.training import finetune_classifier
    from bert_keras.training import run_pretraining

    inputs = json.load(open(os.path.join(args.inputs, "inputs.json")))
    train = read_labelled_file(inputs["train"])
    export_dir = os.path.join(args.out, "classifier") if args.backup else None  # the resumed run exports too
    result = finetune_classifier(inputs["checkpoint"], train, export_dir=export_dir, strategy=strategy, backup_dir=args.backup,
                                 verbose=0, **FINETUNE)
    chief = is_chief(strategy)
    if chief:
        np.savez(os.path.join(args.out, "finetune.npz"), *result.model.get_weights())
    if args.only:
        return
    pretrained = run_pretraining(inputs["corpus"], os.path.join(args.out, f"pretrain-{task_name(strategy)}"),
                                 inputs["vocab"], strategy=strategy, **PRETRAIN)
    if chief:
        np.savez(os.path.join(args.out, "pretrain.npz"), *pretrained.pretrainer.get_weights())
    if strategy.num_replicas_in_sync > 1:
        _record_seen(strategy, os.path.join(args.out, f"seen-{task_name(strategy)}.json"))


def _record_seen(strategy, path):
    """The examples (`ex0`...`ex26`) each local replica is given in two epochs of a fine-tune's training stream."""
    from bert_keras.data.texts import LabelledText
    from bert_keras.training import text_dataset

    data = LabelledText([f"ex{i}" for i in range(27)], np.zeros(27, dtype=np.int32), ["a"])
    batch_size = FINETUNE["batch_size"]
    steps = math.ceil(len(data) / batch_size)
    batches = iter(distribute_batches(strategy, text_dataset(data, batch_size, shuffle_seed=0), batch_size))
    seen = []
    for _ in range(2):
        epoch = []
        for _ in range(steps):
            batch = next(batches)
            for texts, weights in zip(*(_local(strategy, part) for part in (batch[0], batch[-1]))):
                epoch += [text.decode() for text, weight in zip(texts.numpy(), weights.numpy()) if weight > 0]
        seen.append(epoch)
    with open(path, "w") as f:
        json.dump(seen, f)


def _local(strategy, value):
    import tensorflow as tf

    if isinstance(value, tf.distribute.DistributedValues):
        return strategy.experimental_local_results(value)
    return (value,)


if __name__ == "__main__":
    main()
