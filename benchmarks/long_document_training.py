"""Fine-tuning ModernBERT on long documents: the memory and time of a classifier's training steps at 512 to 4,096
tokens (issue 59).

The model: benchmarks/long_document_serving.py's `ModernBertForSequenceClassification` folder (MiniLM's width,
8,192 positions, 128-token windows), read with `BertClassifier.from_checkpoint(folder, seq_length=LENGTH)` and
trained with `fit` (AdamW, sparse cross-entropy) on `--batch` documents of LENGTH pieces, from raw strings. One
worker process per length: one step to build and trace, then `--steps` timed steps. Reported: the median step time
and the peak resident memory the training adds (the process' high-water mark, reset after loading, minus the
resident memory then: gradients, optimizer slots, activations kept for the backward pass, the traced graph).

Run (from the repository root; needs the test extras):

    TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=. python benchmarks/long_document_training.py [--lengths 512 2048 4096]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from long_document_serving import build, documents  # noqa: E402 - the same model and documents
from long_documents import _reset_peak, _status  # noqa: E402
from run_all import cpu_description  # noqa: E402


def worker(args):
    import time

    import keras

    from bert_keras.tasks import BertClassifier

    texts = documents(args.folder, [args.length] * args.batch)
    classifier = BertClassifier.from_checkpoint(args.folder, seq_length=args.length)
    classifier.compile(optimizer=keras.optimizers.AdamW(2e-5),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = np.array(texts), np.arange(args.batch) % 3
    _reset_peak()
    base = _status("VmRSS")
    classifier.fit(x, y, batch_size=args.batch, epochs=1, verbose=0)  # build and trace
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = classifier.fit(x, y, batch_size=args.batch, epochs=1, verbose=0).history["loss"][-1]
        times.append(time.perf_counter() - start)
    print(json.dumps({"times": times, "peak": _status("VmHWM") - base, "loss": float(loss)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 4096])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--length", type=int)
    parser.add_argument("--folder")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = os.path.join(scratch, "model")
        build(folder)
        for length in args.lengths:
            command = [sys.executable, os.path.abspath(__file__), "--worker", "--folder", folder, "--length",
                       str(length), "--batch", str(args.batch), "--steps", str(args.steps)]
            result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                                    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT))
            if result.returncode:
                raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
            report = json.loads(result.stdout.strip().splitlines()[-1])
            rows.append(f"| {length} | {statistics.median(report['times']):.1f} | {report['peak'] / 2**20:.0f} |")
            print(length, report, flush=True)
    print(f"CPU: {cpu_description()}; batch {args.batch}; median of {args.steps} steps\n\n"
          "| tokens | step (s) | peak memory (MiB) |\n|---|---|---|\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
