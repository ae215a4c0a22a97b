"""LoRA vs full fine-tuning: MiniLM-L6 on the demo's tweet split, through the one fine-tune pipeline.

Every run goes through `bert_keras.training.finetune_classifier` from the installed all-MiniLM-L6-v2
checkpoint (native `BertEncoder` + `BertPreprocessor`, the same seed, split and head phase):

- full fine-tuning: phase 1 trains the head (encoder frozen), phase 2 everything, AdamW at
  `--learning-rate` (the recipe's 5e-5);
- LoRA: the same phase 1, then adapters of rank `--lora-rank` on `--lora-targets` and the head
  only, at `--lora-learning-rate` (both default to the recipe's, `FineTuneConfig`); merged into the
  kernels before the test scores. `--sweep` runs several LoRA settings in one go (the sweep that
  chose the recipe's defaults: benchmarks/results/lora_sweep.md).

The data is the demo's: `bert_keras.demo.load_tweet_splits` (stratified 80/10/10 split of the 38,158
tweets, seed 0, subsampled to `--train-size` / `--validation-size` / `--test-size`). Reported per run:
trainable parameters in phase 2 (and their share of the encoder's), seconds per phase-2 epoch (its
training and validation passes; timed from the pipeline's "Phase 2" log line to the end of
training; the first epoch also traces the training step, tens of seconds on 2 cores, alike for both methods),
phase-1 seconds, test accuracy and macro-F1. The runs are made one after the other; the
machine's load average is recorded with them.

Run from the repository root (the figures in benchmarks/results/lora.md; tens of minutes on 2 cores):

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/lora.py

The sweep (benchmarks/results/lora_sweep.md; 33 minutes on 2 cores of an AVX-512 Xeon):

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/lora.py --skip-exports --verbose 0 \\
        --sweep "query,value:5e-4 query,value:2e-3 all:1e-3 all:2e-3" --out benchmarks/results/lora_sweep.md

A quick check of the script on a tiny slice (its figures mean nothing):

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/lora.py --train-size 64 --validation-size 32 \\
        --test-size 64 --head-epochs 1 --epochs 1 --out /tmp/lora.md
"""

import argparse
import dataclasses
import datetime
import os
import platform
import shlex
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository's bert_keras, when run as a script

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_keras import lora  # noqa: E402
from bert_keras.demo import DemoConfig, load_tweet_splits  # noqa: E402
from bert_keras.training import FineTuneConfig, finetune_classifier  # noqa: E402
from bert_keras.tasks import BertClassifier  # noqa: E402
from bert_keras.text.corpora import minilm_vocab_path  # noqa: E402
from run_all import cpu_description  # noqa: E402 - benchmarks/ is this script's directory

RESULTS = os.path.join(HERE, "results", "lora.md")
PHASE_2_LOG = "Phase 2 of 2"  # how the pipeline's report announces phase 2


@dataclasses.dataclass
class Run:
    method: str
    learning_rate: float
    epochs: int
    trainable_parameters: int
    share: float
    phase1_seconds: float | None
    seconds_per_epoch: float | None
    fit_seconds: float
    accuracy: float
    macro_f1: float


@dataclasses.dataclass(frozen=True)
class Setting:
    """One run of the table: full fine-tuning, or LoRA on `targets` at `learning_rate` for `epochs`."""

    method: str
    learning_rate: float
    epochs: int
    targets: tuple = ()

    @property
    def name(self):
        if self.method == "full":
            return "full"
        targets = "all six" if set(self.targets) == set(lora.LORA_TARGETS) else ", ".join(self.targets)
        return f"LoRA ({targets})"


def parse_sweep(text, epochs):
    """`"query,value:5e-4 all:1e-3:3"` -> LoRA settings (targets: names or `all`; rate; epochs, default `epochs`)."""
    settings = []
    for entry in text.split():
        parts = entry.split(":")
        if len(parts) not in (2, 3):
            raise SystemExit(f"--sweep: expected TARGETS:RATE[:EPOCHS], received {entry!r}")
        targets = lora.LORA_TARGETS if parts[0] == "all" else lora.check_lora_targets(parts[0])
        targets = tuple(t for t in lora.LORA_TARGETS if t in targets)
        settings.append(Setting("lora", float(parts[1]), int(parts[2]) if len(parts) == 3 else epochs, targets))
    return settings


def trainable_counts(source, args, num_classes, targets):
    """`(full, lora, encoder)` phase-2 trainable parameters, counted on the model the pipeline builds."""
    model = BertClassifier.from_checkpoint(source, seq_length=args.seq_length, num_classes=num_classes)
    head = sum(int(w.numpy().size) for w in model.classifier_head.trainable_weights)
    encoder = model.encoder.count_params()
    summary = lora.enable_lora(model, rank=args.lora_rank, targets=targets)
    model.encoder.trainable = True  # as phase 2
    trained = sum(int(w.numpy().size) for w in model.trainable_weights)
    assert trained == summary.adapter_parameters + head, (trained, summary)
    return encoder + head, trained, encoder


def run_one(setting, source, splits, args, report):
    train, validation, test = splits
    method = setting.name
    extra = ({"learning_rate": setting.learning_rate} if setting.method == "full" else
             {"lora_rank": args.lora_rank, "lora_targets": setting.targets, "lora_learning_rate": setting.learning_rate})
    started = {}

    def timed_report(text):
        if text.startswith("Fine-tuning ("):  # the pipeline's last line before training starts
            started["fit"] = time.monotonic()
        if text.startswith(PHASE_2_LOG):
            started["phase2"] = time.monotonic()
        report(f"  [{method}] {text}")

    result = finetune_classifier(
        source, train, validation, test, None,
        seq_length=args.seq_length, batch_size=args.batch_size, head_epochs=args.head_epochs,
        head_learning_rate=args.head_learning_rate, epochs=setting.epochs,
        seed=args.seed, verbose=args.verbose, report=timed_report, **extra,
    )
    phase1 = per_epoch = None
    if "phase2" in started and "fit" in started:
        phase1 = started["phase2"] - started["fit"]
        per_epoch = (result.fit_seconds - phase1) / setting.epochs
    return result, phase1, per_epoch


def score_exports(model, test, label_names):
    """Exports `model` in float32 and bfloat16 compute and scores both exports on `test`: {dtype: (acc, F1, texts/s)}."""
    import tempfile

    from bert_keras.evaluate import classification_report
    from bert_keras.export import export_classifier, load_classifier

    scores = {}
    with tempfile.TemporaryDirectory() as work:
        for dtype in ("float32", "bfloat16"):
            path = os.path.join(work, dtype)
            export_classifier(model, path, label_names, dtype=dtype)
            classifier = load_classifier(path, warm_up=False)  # batches only
            classifier.predict_proba(test.texts[:64], batch_size=32)  # warm up
            started = time.perf_counter()
            probabilities = classifier.predict_proba(test.texts, batch_size=32)
            seconds = time.perf_counter() - started
            report = classification_report(test.labels, probabilities, label_names)
            scores[dtype] = (report["accuracy"], report["macro_f1"], len(test) / seconds)
    return scores


def exports_markdown(exports):
    if not exports:
        return []
    rows = [f"| {method} | {dtype} | {accuracy:.4f} | {f1:.4f} | {rate:.0f} |"
            for method, scores in exports for dtype, (accuracy, f1, rate) in scores.items()]
    return [
        "## The fine-tuned classifiers exported in float32 and bfloat16 compute",
        "",
        "Each model above exported with `export_classifier(..., dtype=...)`, reloaded with `load_classifier` and",
        "scored on the same test tweets (batches of 32 raw strings, in one process, after a warm-up).",
        "",
        "| model | export dtype | test accuracy | test macro-F1 | texts/s |",
        "|---|---|---:|---:|---:|",
        *rows,
        "",
    ]


def markdown(runs, args, sizes, encoder_parameters, seconds, exports=()):
    command = "python benchmarks/lora.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    rows = [
        f"| {r.method} | {r.trainable_parameters:,} | {100 * r.share:.2f}% | {r.learning_rate:g} | {r.epochs} | "
        f"{'-' if r.seconds_per_epoch is None else f'{r.seconds_per_epoch:.0f}'} | "
        f"{'-' if r.phase1_seconds is None else f'{r.phase1_seconds:.0f}'} | {r.fit_seconds:.0f} | "
        f"{r.accuracy:.4f} | {r.macro_f1:.4f} |"
        for r in runs
    ]
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return "\n".join([
        "# LoRA vs full fine-tuning (MiniLM-L6, tweets)",
        "",
        "`benchmarks/lora.py` (its docstring says how each figure is made): every run through",
        "`bert_keras.training.finetune_classifier` from the installed all-MiniLM-L6-v2 checkpoint, on the",
        f"demo's split (`bert_keras.demo.load_tweet_splits`, seed {args.seed}): train {sizes['train']}, validation "
        f"{sizes['validation']}, test {sizes['test']};",
        f"sequences of {args.seq_length}, batch {args.batch_size}; {args.head_epochs} head epoch(s) (encoder frozen, Adam "
        f"{args.head_learning_rate:g}), then the epochs of phase 2 in the table.",
        f"LoRA: rank {args.lora_rank} on the projections named (all six: query, key, value, attention output, "
        "intermediate, output), alpha = rank; merged into the kernels before the test scores.",
        "",
        f"Command: `TF_CPP_MIN_LOG_LEVEL=2 {command}`  ",
        f"Date: {datetime.date.today().isoformat()}; Python {platform.python_version()}, TensorFlow {tf.__version__}, "
        f"Keras {keras.__version__}  ",
        f"CPU: {cpu_description()}, {len(os.sched_getaffinity(0))} cores  ",
        f"Load average at the end: {load}; the whole run took {seconds / 60:.0f} min.",
        "",
        f"| method | trainable parameters (phase 2) | share of the encoder's {encoder_parameters:,} | "
        "peak learning rate | phase-2 epochs | s / phase-2 epoch | phase 1 s | fit s | test accuracy | test macro-F1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        *exports_markdown(exports),
    ])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults, recipe = DemoConfig(), FineTuneConfig()
    parser.add_argument("--train-size", type=int, default=defaults.train_size)
    parser.add_argument("--validation-size", type=int, default=defaults.validation_size)
    parser.add_argument("--test-size", type=int, default=defaults.test_size)
    parser.add_argument("--seq-length", type=int, default=defaults.seq_length)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--head-epochs", type=int, default=defaults.head_epochs)
    parser.add_argument("--head-learning-rate", type=float, default=defaults.head_learning_rate)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate, help="full fine-tuning's peak rate")
    parser.add_argument("--lora-learning-rate", type=float, default=recipe.lora_learning_rate, help="LoRA's peak rate")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--lora-targets", type=lora.check_lora_targets, default=recipe.lora_targets,
                        help="comma-separated names among " + ", ".join(lora.LORA_TARGETS))
    parser.add_argument("--methods", default="full,lora", help="comma-separated: full, lora")
    parser.add_argument("--sweep", default=None, metavar="'TARGETS:RATE[:EPOCHS] ...'",
                        help="LoRA settings to run in place of the one --lora-targets / --lora-learning-rate "
                             "(TARGETS: names joined by commas, or all), e.g. 'query,value:5e-4 all:1e-3'")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--verbose", type=int, default=2, help="fit's verbosity")
    parser.add_argument("--skip-exports", action="store_true", help="no float32 / bfloat16 export scores")
    parser.add_argument("--out", default=RESULTS, help="the Markdown file written (replaced)")
    return parser.parse_args(argv)


def settings_of(args):
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods or set(methods) - {"full", "lora"}:
        raise SystemExit(f"--methods: expected names among full, lora; received {args.methods!r}")
    settings = [Setting("full", args.learning_rate, args.epochs)] if "full" in methods else []
    if "lora" in methods:
        settings += (parse_sweep(args.sweep, args.epochs) if args.sweep else
                     [Setting("lora", args.lora_learning_rate, args.epochs, tuple(args.lora_targets))])
    return settings


def main(argv=None):
    args = parse_args(argv)
    settings = settings_of(args)
    started = time.monotonic()
    source = os.path.dirname(minilm_vocab_path())
    config = DemoConfig(train_size=args.train_size, validation_size=args.validation_size, test_size=args.test_size,
                        seq_length=args.seq_length, batch_size=args.batch_size, seed=args.seed)
    splits = load_tweet_splits(config, print)
    num_classes = len(splits[0].label_names)
    runs, sizes, exports = [], None, []
    for setting in settings:
        print(f"{setting.name}, rate {setting.learning_rate:g}, {setting.epochs} epoch(s):")
        full, adapted, encoder_parameters = trainable_counts(source, args, num_classes, setting.targets or ("query",))
        trainable = full if setting.method == "full" else adapted
        result, phase1, per_epoch = run_one(setting, source, splits, args, print)
        sizes = result.sizes
        runs.append(Run(setting.name, setting.learning_rate, setting.epochs, trainable, trainable / encoder_parameters,
                        phase1, per_epoch, result.fit_seconds, result.scores["accuracy"], result.scores["macro_f1"]))
        print(f"  {runs[-1]}", flush=True)
        if not args.skip_exports:
            exports.append((runs[-1].method, score_exports(result.model, splits[2], splits[0].label_names)))
            print(f"  exports: {exports[-1][1]}")
    text = markdown(runs, args, sizes, encoder_parameters, time.monotonic() - started, exports)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
