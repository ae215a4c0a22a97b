"""The first requests after a load, with and without the export's warm-up, and `bert-keras predict` end to end.

One MiniLM-L6-H384 classifier export (built as benchmarks/serving.py builds it: the installed checkpoint
converted into a Hub module pair, an untrained 3-class head, seq_length 64; latency does not depend on the
weights' values). Each trial is a fresh process, alternating the variants:

- `load_classifier(d, warm_up=False)` and `load_classifier(d)` (replays `assets.extra/tf_serving_warmup_requests`):
  the load's wall time, then one single text per XLA length bucket (8 to 64 tokens), each the first request
  of its bucket, then the same texts again (warm);
- `bert-keras predict --model d "what a great day"` (which loads without warm-up: one command, one length),
  wall time of the whole command.

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/warmup.py --trials 3 --output benchmarks/results/warmup.md
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

WORKER = """
import json, sys, time
started = time.perf_counter()
from bert_keras.export import load_classifier
imported = time.perf_counter()
classifier = load_classifier(sys.argv[1], warm_up=sys.argv[2] == "warm")
loaded = time.perf_counter()
texts = json.loads(sys.argv[3])
first = []
for text in texts:
    t = time.perf_counter(); classifier.predict(text); first.append(time.perf_counter() - t)
again = []
for text in texts:
    t = time.perf_counter(); classifier.predict(text); again.append(time.perf_counter() - t)
print(json.dumps({"import": imported - started, "load": loaded - imported, "first": first, "again": again}))
"""


def bucket_texts(export_dir):
    """One text per length bucket: the warm-up file's own single texts (8, 16, ..., 64 tokens)."""
    from bert_keras.export import warmup

    requests = warmup.read_warmup_requests(os.path.join(export_dir, "assets.extra", warmup.WARMUP_FILE))
    return [r["text"][0].decode() for r in requests if len(r["text"]) == 1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--output", default="benchmarks/results/warmup.md")
    args = parser.parse_args()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    from serving import LABELS, build_exports, cpu_description

    work = tempfile.mkdtemp(prefix="warmup_bench_")
    try:
        export_dir = build_exports(work, 64, ["float32"], lambda line: print(line, file=sys.stderr))["float32"]
        texts = bucket_texts(export_dir)
        results = {"cold": [], "warm": [], "cli": []}
        for trial in range(args.trials):
            for variant in ("cold", "warm"):
                done = subprocess.run([sys.executable, "-c", WORKER, export_dir, variant, json.dumps(texts)],
                                      capture_output=True, text=True, env=env, check=True)
                results[variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
            started = time.perf_counter()
            subprocess.run([shutil.which("bert-keras") or "bert-keras", "predict", "--model", export_dir, "what a great day"],
                           capture_output=True, env=env, check=True)
            results["cli"].append(time.perf_counter() - started)
            print(f"trial {trial + 1}/{args.trials} done", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(values):
        return statistics.median(values)

    rows = []
    for variant, name in (("cold", "`load_classifier(d, warm_up=False)`"), ("warm", "`load_classifier(d)` (warm-up)")):
        trials = results[variant]
        firsts = [med([t["first"][i] for t in trials]) for i in range(len(texts))]
        rows.append(f"| {name} | {med([t['load'] for t in trials]):.2f} s | "
                    + " | ".join(f"{1000 * v:.0f}" for v in firsts)
                    + f" | {1000 * med([med(t['again']) for t in trials]):.1f} |")
    header = " | ".join(f"{8 * (i + 1)}" for i in range(len(texts)))
    lines = [
        "# Warm-up: the first request of each length after a load",
        "",
        f"`TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/warmup.py --trials {args.trials}`; {cpu_description()}.",
        f"MiniLM-L6-H384 classifier export (seq_length 64, {len(LABELS)} classes), a fresh process per trial; medians"
        f" of {args.trials} trials. Load: `load_classifier`'s wall time (the warm-up included). Columns 8-64: the",
        "first request of one text of that many tokens after the load, in ms; warm: the same texts again (median).",
        "",
        f"| load | load time | {header} | warm (ms) |",
        "|---|---" + "|---" * len(texts) + "|---|",
        *rows,
        "",
        f"`bert-keras predict --model d \"what a great day\"` (the whole command: imports, load without warm-up, one "
        f"prediction): median {med(results['cli']):.1f} s (min {min(results['cli']):.1f}, max {max(results['cli']):.1f}).",
        "The command loads without warm-up: it classifies its own texts once, so compiling every length ahead",
        "would only add to its time.",
    ]
    with open(args.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
