"""Serving long documents: a ModernBERT classifier's SavedModel export on one ~8,000-token document, against
transformers' text-classification pipeline; and a batch of uneven documents, padded or not (issue 59).

The model: `ModernBertForSequenceClassification` of MiniLM's width (benchmarks/long_documents.py's CONFIG: 6 layers,
hidden 384, a full layer every third, 128-token windows, 8,192 positions; mean pooling), random seeded weights,
with a byte-level BPE tokenizer of ModernBERT's kind trained here on tweets (tests/checkpoints/test_modernbert.py),
saved by transformers 5. The document: tweets joined until the tokenizers library gives it `--tokens` pieces.
- ours: `BertClassifier.from_checkpoint(folder, seq_length=8192)` exported with `export_classifier` (raw strings
  in; the padding after the batch's longest text is cut), loaded with `load_classifier` and called with
  `predict_proba`;
- transformers: `pipeline("text-classification", model=folder, truncation=True, max_length=8192, top_k=None)`,
  default attention (sdpa), all cores, `torch.inference_mode()` by the pipeline.
Each in its own worker process, alternated (`--rounds`); reported: the median time of `--runs` calls after a
warm-up, and the peak resident memory the calls add (the process' high-water mark reset after loading, minus the
resident memory then).

Then the batch: documents of uneven lengths (`UNEVEN`) through our export, each way in its own worker process: as
one padded batch (the export's `serve` on all of them at once), one by one, and as `predict_proba` batches them
(`export.kinds._batches.length_batches`: longest first, a document padded to less than twice its length).

Run (from the repository root; needs the test extras):

    TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=. python benchmarks/long_document_serving.py [--runs 2] [--rounds 1]

writes benchmarks/results/long_document_serving.md.
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
from long_documents import CONFIG, _reset_peak, _status  # noqa: E402 - the same model and memory probes
from run_all import cpu_description  # noqa: E402

LABELS = {0: "negative", 1: "neutral", 2: "positive"}
CONTENDERS = ("ours", "transformers")
UNEVEN = (8000, 4000, 2000, 1000, 500, 250)
SERVINGS = ("padded batch", "one by one", "predict_proba (grouped by length)")


def build(folder):
    """The classifier folder and our export of it (`folder/export`)."""
    import torch
    import transformers

    from bert_keras.export import export_classifier
    from bert_keras.tasks import BertClassifier
    from tests.checkpoints._models import perturb_torch
    from tests.checkpoints.test_modernbert import save_modernbert_tokenizer

    size, vocab = save_modernbert_tokenizer(folder)
    config = dict(CONFIG, vocab_size=size, pad_token_id=vocab["[PAD]"], cls_token_id=vocab["[CLS]"],
                  sep_token_id=vocab["[SEP]"], bos_token_id=vocab["[CLS]"], eos_token_id=vocab["[SEP]"],
                  classifier_pooling="mean", id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    torch.manual_seed(0)
    model = transformers.ModernBertForSequenceClassification(transformers.ModernBertConfig(**config))
    perturb_torch(model, seed=0)
    model.save_pretrained(folder)
    classifier = BertClassifier.from_checkpoint(folder, seq_length=CONFIG["max_position_embeddings"])
    export_classifier(classifier, os.path.join(folder, "export"))


def documents(folder, lengths):
    """Texts of tweets joined, each cut to give `length` pieces with [CLS] and [SEP] (the tokenizers library's)."""
    import tokenizers

    from bert_keras.text.corpora import load_tweets

    tokenizer = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tweets = load_tweets()[0]
    texts = []
    for index, length in enumerate(lengths):
        text, start = "", index * 50
        while len(tokenizer.encode(text).ids) < length:
            text += " ".join(tweets[start:start + 20]) + " "
            start += 20
        encoded = tokenizer.encode(text)
        cut = encoded.offsets[length - 2][0]  # [CLS] and the first length - 2 pieces, then [SEP]
        texts.append(text[:cut])
    return texts


def _classify(contender, folder):
    if contender == "transformers":
        import torch
        import transformers

        torch.set_num_threads(os.cpu_count())
        pipe = transformers.pipeline("text-classification", model=folder, truncation=True,
                                     max_length=CONFIG["max_position_embeddings"], top_k=None)
        order = list(LABELS.values())
        return lambda texts: np.array([[{d["label"]: d["score"] for d in row}[name] for name in order]
                                       for row in pipe(texts)])
    from bert_keras.export import load_classifier

    exported = load_classifier(os.path.join(folder, "export"), warm_up=False)

    def run(texts, batch_size=64, padded=False):
        if padded:  # every text in one call of the export, padded to the longest
            return np.asarray(exported._scores([texts]))
        return exported.predict_proba(texts, batch_size=batch_size)

    return run


def worker(args):
    import time

    texts = documents(args.folder, [args.tokens] if args.serving is None else UNEVEN)
    run = _classify(args.worker, args.folder)
    if args.serving == "one by one":
        call = lambda: run(texts, batch_size=1)  # noqa: E731
    elif args.serving == "padded batch":
        call = lambda: run(texts, padded=True)  # noqa: E731
    else:
        call = lambda: run(texts)  # noqa: E731
    _reset_peak()
    base = _status("VmRSS")
    output = call()  # warm-up (for ours, the trace of this signature)
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        output = call()
        times.append(time.perf_counter() - start)
    np.save(args.output, np.asarray(output, "float32"))
    print(json.dumps({"times": times, "peak": _status("VmHWM") - base}))


def _spawn(args, contender, output, serving=None):
    command = [sys.executable, os.path.abspath(__file__), "--worker", contender, "--folder", args.folder,
               "--runs", str(args.runs), "--tokens", str(args.tokens), "--output", output]
    if serving:
        command += ["--serving", serving]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=8000)
    parser.add_argument("--skip-batch", action="store_true")
    parser.add_argument("--results", default=os.path.join(HERE, "results", "long_document_serving.md"))
    parser.add_argument("--worker", choices=CONTENDERS)
    parser.add_argument("--serving", choices=SERVINGS)
    parser.add_argument("--folder")
    parser.add_argument("--output")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    with tempfile.TemporaryDirectory() as scratch:
        args.folder = os.path.join(scratch, "model")
        build(args.folder)
        one = {c: {"times": [], "peaks": []} for c in CONTENDERS}
        for round_ in range(args.rounds):
            for contender in CONTENDERS[round_ % 2:] + CONTENDERS[:round_ % 2]:
                report = _spawn(args, contender, os.path.join(scratch, f"{contender}.npy"))
                one[contender]["times"] += report["times"]
                one[contender]["peaks"].append(report["peak"])
                print(contender, report, flush=True)
        diff = float(np.abs(np.load(os.path.join(scratch, "ours.npy"))
                            - np.load(os.path.join(scratch, "transformers.npy"))).max())
        batch = {}
        if not args.skip_batch:
            for serving in SERVINGS:
                batch[serving] = _spawn(args, "ours", os.path.join(scratch, "batch.npy"), serving)
                print(serving, batch[serving], flush=True)
    lines = [
        "# Serving long documents: a ModernBERT classifier export vs transformers' pipeline",
        "",
        f"CPU: {cpu_description()} (shared with other jobs while measured: figures vary run to run).",
        f"Command: `TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=. python benchmarks/long_document_serving.py --runs {args.runs} "
        f"--rounds {args.rounds} --tokens {args.tokens}`",
        "",
        f"One document of {args.tokens} tokens (median of {args.runs * args.rounds} calls after a warm-up; peak: "
        "resident memory the calls add):",
        "",
        "| contender | time (s) | peak memory (MiB) |",
        "|---|---|---|",
    ]
    for contender in CONTENDERS:
        lines.append(f"| {contender} | {statistics.median(one[contender]['times']):.2f} | "
                     f"{statistics.median(one[contender]['peaks']) / 2**20:.0f} |")
    ratio = statistics.median(one["transformers"]["peaks"]) / max(statistics.median(one["ours"]["peaks"]), 1)
    lines += ["", f"Largest probability difference: {diff:.1e}. Memory, transformers / ours: {ratio:.1f}x.", ""]
    if batch:
        lines += [f"Our export on {len(UNEVEN)} documents of {', '.join(map(str, UNEVEN))} tokens:", "",
                  "| serving | time (s) | peak memory (MiB) |", "|---|---|---|"]
        for serving, report in batch.items():
            lines.append(f"| {serving} | {statistics.median(report['times']):.2f} | {report['peak'] / 2**20:.0f} |")
    with open(args.results, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
