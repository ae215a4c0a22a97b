"""Training on more than one worker, measured: accuracy of the CLI's runs and scaling of 1 vs 2 workers.

Two parts, each a table (benchmarks/results/distributed.md and distributed_scaling.md):

1. Accuracy (`--part accuracy`): `bert-keras finetune` on the installed
   MiniLM-L6 checkpoint and the demo's tweet split (`bert_keras.demo.load_tweet_splits`,
   written to CSV files), run as one process, as two worker processes on
   127.0.0.1 (`--strategy multi-worker`, TF_CONFIG per worker, the same
   command on both) and as one process with `--dtype mixed_bfloat16`.
   Reported: test accuracy and macro-F1 and the seconds of both training
   phases with their validation (`fit_seconds`), from the export's
   metrics.json, and the whole command's wall time.
2. Scaling (`--part scaling`): training steps of the MiniLM-L6 classifier
   (seq 64, global batch `--batch-size`, AdamW, raw tweets in) in one
   process with 1 thread, in two worker processes with 1 thread each (the
   same global batch: half each), and in one process with 2 threads (this
   machine's natural setting). Reported: the median step time after
   `--warmup` steps, sequences per second, and the all-reduce alone: the
   median time of one cross-worker sum of a gradient-sized set of tensors
   (all trainable weights), measured in the two workers after training.

Run from the repository root (about 20 and 10 minutes on 2 cores):

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/distributed.py --part accuracy --out benchmarks/results/distributed.md
    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/distributed.py --part scaling --out benchmarks/results/distributed_scaling.md

GPUs: the same script runs there unchanged (one worker per GPU is the
mirrored strategy's job; `--strategy mirrored` in the CLI); no GPU figures
are in the results unless a GPU run wrote them.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from bert_keras.cluster import local_tf_configs  # noqa: E402 - no TensorFlow devices started by importing it
from run_all import cpu_description  # noqa: E402 - benchmarks/ is this script's directory


def environment(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    env.pop("TF_CONFIG", None)
    env.update({key: str(value) for key, value in extra.items()})
    return env


# --- part 1: accuracy of the command line's runs --------------------------------------------------------


def write_split(directory, args):
    """The demo's split as train/validation/test CSV files."""
    import csv

    from bert_keras.demo import DemoConfig, load_tweet_splits

    config = DemoConfig(train_size=args.train_size, validation_size=args.validation_size, test_size=args.test_size, seed=0)
    splits = load_tweet_splits(config, report=print)
    os.makedirs(directory, exist_ok=True)
    paths = {}
    for name, data in zip(("train", "validation", "test"), splits):
        paths[name] = os.path.join(directory, f"{name}.csv")
        with open(paths[name], "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows((text, data.label_names[label]) for text, label in zip(data.texts, data.labels))
    return paths, {name: len(data) for name, data in zip(("train", "validation", "test"), splits)}


class Timed:
    """A running command whose output lines are kept with the time they arrived."""

    def __init__(self, argv, env):
        self.started = time.monotonic()
        self.process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []

    def wait(self):
        for line in self.process.stdout:
            self.lines.append((time.monotonic() - self.started, line.rstrip("\n")))
        self.process.wait()
        self.seconds = time.monotonic() - self.started
        if self.process.returncode:
            tail = "\n".join(line for _, line in self.lines[-30:])
            raise RuntimeError(f"{self.process.args} exited {self.process.returncode}:\n{tail}")
        return self


def finetune_argv(paths, out, extra):
    return [sys.executable, "-m", "bert_keras.cli", "finetune", "--train", paths["train"], "--validation", paths["validation"],
            "--test", paths["test"], "--out", out, "--force", "--seq-length", "64", "--batch-size", "32", "--head-epochs", "1",
            "--epochs", "2", "--learning-rate", "5e-5", "--seed", "0", *extra]


def accuracy_row(name, out, timed):
    with open(os.path.join(out, "assets.extra", "metrics.json")) as f:
        metrics = json.load(f)
    return {"run": name, "accuracy": metrics["test_accuracy"], "macro_f1": metrics["test_macro_f1"],
            "training_s": metrics["fit_seconds"], "wall_s": timed.seconds}


def part_accuracy(args, work):
    paths, sizes = write_split(os.path.join(work, "data"), args)
    rows = []
    for name, extra in (("1 process, float32", []), ("1 process, mixed_bfloat16", ["--dtype", "mixed_bfloat16"])):
        if name in args.skip:
            continue
        out = os.path.join(work, name.split(",")[1].strip())
        print(f"[accuracy] {name}", flush=True)
        rows.append(accuracy_row(name, out, Timed(finetune_argv(paths, out, extra), environment()).wait()))
    name = "2 workers on 127.0.0.1, float32"
    if name not in args.skip:
        print(f"[accuracy] {name}", flush=True)
        out = os.path.join(work, "multi-worker")
        argv = finetune_argv(paths, out, ["--strategy", "multi-worker"])
        workers = [Timed(argv, environment(TF_CONFIG=config)) for config in local_tf_configs(2)]
        for worker in workers[1:]:
            worker.wait()
        rows.append(accuracy_row(name, out, workers[0].wait()))
    return rows, sizes


# --- part 2: scaling ---------------------------------------------------------------------------------------


def scaling_worker(args):
    """One process of the scaling runs: times training steps (and, on 2 workers, the all-reduce); prints JSON."""
    import math

    import numpy as np
    import tensorflow as tf

    from bert_keras.training.strategy import is_multi_worker, make_strategy

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    strategy = make_strategy("multi-worker" if os.environ.get("TF_CONFIG") else "default")
    import keras

    from bert_keras.demo import DemoConfig, load_tweet_splits
    from bert_keras.training import Harness, text_dataset
    from bert_keras.optimization import bert_optimizer
    from bert_keras.tasks import BertClassifier
    from bert_keras.text.corpora import minilm_vocab_path

    train = load_tweet_splits(DemoConfig(train_size=2000, validation_size=10, test_size=10), report=lambda text: None)[0]
    steps = args.warmup + args.steps
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = BertClassifier.from_checkpoint(os.path.dirname(minilm_vocab_path()), num_classes=3, seq_length=64)
        model.compile(optimizer=bert_optimizer(2e-5, steps), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class StepTimes(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = []

        def on_train_batch_begin(self, batch, logs=None):
            self.began = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter() - self.began)

    timer = StepTimes()
    # The harness splits each global batch among the replicas and makes Keras' fit work under them (keras#20585).
    Harness(strategy, batch_size=args.batch_size, verbose=0).fit(model, text_dataset(train, args.batch_size, shuffle_seed=0),
                                                                 epochs=1, steps_per_epoch=steps, callbacks=[timer])
    result = {"step_s": statistics.median(timer.times[args.warmup:]), "steps": len(timer.times) - args.warmup}
    if is_multi_worker(strategy):
        tensors = [tf.zeros(v.shape, v.dtype) for v in model.trainable_variables]

        @tf.function
        def all_reduce():
            return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("SUM", tensors))

        times = []
        for _ in range(args.warmup + args.steps):
            began = time.perf_counter()
            out = all_reduce()
            _ = strategy.experimental_local_results(out)[0][0].numpy()
            times.append(time.perf_counter() - began)
        result["all_reduce_s"] = statistics.median(times[args.warmup:])
        result["all_reduce_floats"] = int(sum(math.prod(v.shape) for v in model.trainable_variables))
    print("RESULT " + json.dumps(result), flush=True)


def _result(timed):
    line = next(line for _, line in reversed(timed.lines) if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def part_scaling(args):
    worker = [sys.executable, os.path.abspath(__file__), "--scaling-worker", "--batch-size", str(args.batch_size),
              "--steps", str(args.steps), "--warmup", str(args.warmup)]
    rows = []
    for threads in (1, 2):
        print(f"[scaling] 1 process, {threads} thread(s)", flush=True)
        result = _result(Timed(worker + ["--threads", str(threads)], environment()).wait())
        rows.append({"run": f"1 process, {threads} thread{'s' if threads > 1 else ''}", **result})
    print("[scaling] 2 workers, 1 thread each", flush=True)
    workers = [Timed(worker + ["--threads", "1"], environment(TF_CONFIG=config)) for config in local_tf_configs(2)]
    results = [_result(w.wait()) for w in workers]
    rows.append({"run": "2 workers on 127.0.0.1, 1 thread each", "step_s": max(r["step_s"] for r in results),
                 "steps": results[0]["steps"], "all_reduce_s": statistics.median(r["all_reduce_s"] for r in results),
                 "all_reduce_floats": results[0]["all_reduce_floats"]})
    for row in rows:
        row["sequences_per_s"] = args.batch_size / row["step_s"]
    return rows


def markdown(args, accuracy, sizes, scaling, started):
    lines = [
        "# Training on more than one worker",
        "",
        f"Written by `python benchmarks/distributed.py {' '.join(sys.argv[1:])}` on {started:%Y-%m-%d}. "
        f"CPU: {cpu_description()}, {os.cpu_count()} cores; Python {platform.python_version()}; load average at the end "
        f"{', '.join(f'{v:.1f}' for v in os.getloadavg())} (the machine is shared: read the figures as ratios within one run).",
        "",
    ]
    if accuracy:
        lines += [
            "## Accuracy: `bert-keras finetune` on MiniLM-L6 and the demo's tweets",
            "",
            f"Split: {sizes['train']} train / {sizes['validation']} validation / {sizes['test']} test tweets; seq 64, "
            "global batch 32, 1 head epoch + 2 unfrozen (AdamW 5e-5), seed 0.",
            "",
            "| run | test accuracy | macro-F1 | training + validation s | command wall s |",
            "|---|---|---|---|---|",
        ]
        lines += [f"| {r['run']} | {r['accuracy']:.4f} | {r['macro_f1']:.4f} | {r['training_s']:.0f} | {r['wall_s']:.0f} |"
                  for r in accuracy]
        lines.append("")
    if scaling:
        one = scaling[0]["sequences_per_s"]
        lines += [
            "## Scaling: training steps of the MiniLM-L6 classifier",
            "",
            f"Global batch {args.batch_size} raw tweets, seq 64, AdamW; median of {args.steps} steps after {args.warmup}.",
            "",
            "| run | step ms | sequences/s | vs 1 process, 1 thread | all-reduce ms (share of the step) |",
            "|---|---|---|---|---|",
        ]
        for r in scaling:
            reduce = "-"
            if "all_reduce_s" in r:
                reduce = (f"{1000 * r['all_reduce_s']:.0f} ({100 * r['all_reduce_s'] / r['step_s']:.0f}%, "
                          f"{r['all_reduce_floats'] / 1e6:.1f} M floats)")
            lines.append(f"| {r['run']} | {1000 * r['step_s']:.0f} | {r['sequences_per_s']:.1f} | "
                         f"{r['sequences_per_s'] / one:.2f}x | {reduce} |")
        lines += ["", "GPU figures: not measured (no GPU was available to these runs).", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("accuracy", "scaling", "both"), default="both")
    parser.add_argument("--train-size", type=int, default=5000)
    parser.add_argument("--validation-size", type=int, default=500)
    parser.add_argument("--test-size", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip", action="append", default=[], help="a run of the accuracy part to leave out (by name)")
    parser.add_argument("--work", default="/tmp/bert_keras_distributed_benchmark")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "distributed.md"))
    parser.add_argument("--scaling-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scaling_worker:
        return scaling_worker(args)
    started = datetime.datetime.now()
    accuracy, sizes = part_accuracy(args, args.work) if args.part in ("accuracy", "both") else ([], {})
    scaling = part_scaling(args) if args.part in ("scaling", "both") else []
    text = markdown(args, accuracy, sizes, scaling, started)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
