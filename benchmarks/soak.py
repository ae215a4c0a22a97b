"""Serving soak: an exported classifier called from many threads with normal and hostile text.

Loads a classifier export with `bert_keras.export.load_classifier` (a tiny one it exports first,
or `--model DIR`), computes every request once on one thread (the reference), then calls it from
`--threads` threads for `--seconds` seconds, each thread drawing requests in its own seeded order, and
checks that:

- every call ends as its reference did: the same probabilities, bit for bit, or the same exception
  (strings with lone surrogates cannot be encoded as UTF-8 and are refused; every other text is
  classified);
- the resident memory (VmRSS of /proc/self/status, sampled every 0.2 s) grows by less than
  `--rss-bound-mb` over its level after the reference pass.

A request is one text or a batch of 2-8 texts. Hostile texts: empty strings, 100,000-character
strings (one word, or many), lone surrogates, control characters, NUL bytes, terminal escape codes,
right-to-left and zero-width characters, combining marks, emoji sequences, very long words.

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/soak.py                       # tiny model, 8 threads, 60 s
    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/soak.py --model saved_models/tweet_sentiment_classifier

`--report PATH` appends the figures, with the command, to a Markdown file (benchmarks/results/soak.md).
"""

import argparse
import dataclasses
import datetime
import os
import platform
import random
import re
import shlex
import sys
import tempfile
import threading
import time

import keras
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository's bert_keras, when run as a script

from bert_keras import BertEncoder  # noqa: E402
from bert_keras.export import export_classifier, load_classifier  # noqa: E402
from bert_keras.tasks import BertClassifier  # noqa: E402
from bert_keras.text import BertPreprocessor  # noqa: E402

WORDS = ["the", "a", "movie", "film", "was", "is", "good", "great", "fun", "bad", "awful", "boring", "plot",
         "actor", "really", "not", "very", "i", "loved", "hated", "it", "!", "?", ".", ",", "#", "@"]
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["##s", "##ing", "##ed"]
RSS_BOUND_MB = 100
SAMPLE_S = 0.2


def hostile_texts():
    """`(name, text)` pairs that a server taking text from anyone receives sooner or later."""
    return [
        ("empty", ""),
        ("spaces only", " \t \n "),
        ("100k characters, one word", "a" * 100_000),
        ("100k characters, many words", "good movie " * 10_000),
        ("very long word", "supercalifragilistic" * 500),
        ("lone high surrogate", "\ud800"),
        ("lone low surrogate inside text", "good \udfff movie"),
        ("NUL bytes", "\x00" * 1_000),
        ("NUL inside text", "good\x00movie"),
        ("C0 and C1 controls", "".join(map(chr, range(1, 32))) + "\x7f\x85\x9b"),
        ("terminal escapes", "\x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b[2J\x1b[H \x1b[6n"),
        ("right-to-left override", "good \u202eeivom\u202c plot"),
        ("zero-width characters", "go\u200bod \u200c\u200d\ufeff movie\u2060"),
        ("Hebrew and Arabic", "סרט טוב جدا فيلم"),
        ("combining marks", "e" + "\u0301" * 2_000),
        ("emoji sequences", "😀🔥👍🏽👨‍👩‍👧‍👦🏳️‍🌈🇺🇸" * 50),
        ("noncharacters and private use", "\uffff\ufffe\U0010ffff\ue000\U000f0000"),
        ("unpaired brackets and quotes", "\"'([{<" * 100),
        ("line and paragraph separators", "good\u2028movie\u2029bad\r\n\r"),
        ("mixed scripts and digits", "Ｇｏｏｄ ＭＯＶＩＥ ① ½ 𝔤𝔬𝔬𝔡 ΜΟΒΙΕ ǅ ß"),
    ]


def normal_texts(count=40, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 25))) for _ in range(count)]


def make_requests(texts, seed=0):
    """Each text alone, then 30 batches of 2-8 texts drawn from all of them."""
    rng = random.Random(seed)
    batches = [[text] for text in texts]
    batches += [[rng.choice(texts) for _ in range(rng.randrange(2, 9))] for _ in range(30)]
    return batches


def export_tiny_classifier(directory, seed=0):
    """A 2-layer classifier (hidden 32, 3 classes, sequences of 128) on `VOCABULARY`, exported to `directory`."""
    keras.utils.set_random_seed(seed)
    encoder = BertEncoder(vocab_size=len(VOCABULARY), num_layers=2, hidden_size=32, num_heads=2,
                          intermediate_size=64, max_sequence_length=128)
    classifier = BertClassifier(encoder, 3, preprocessor=BertPreprocessor(VOCABULARY, seq_length=128))
    return export_classifier(classifier, directory, ["negative", "neutral", "positive"])


def rss_mb():
    """This process's resident memory (VmRSS), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("/proc/self/status has no VmRSS line")


def cpu_flags():
    """The AVX-512 flags of this CPU (`grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u`)."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return "unknown"
    return " ".join(sorted(set(re.findall(r"avx512[a-z_0-9]*", text)))) or "none"


def outcome(classifier, request):
    """What one call gives: `("ok", probabilities)` or `("error", "Type: message")`."""
    try:
        return "ok", classifier.predict_proba(request)
    except Exception as error:  # noqa: BLE001 - any exception is an outcome to compare
        return "error", f"{type(error).__name__}: {error}"


def same(ours, reference):
    if ours[0] != reference[0]:
        return False
    if ours[0] == "error":
        return ours[1] == reference[1]
    return ours[1].shape == reference[1].shape and np.array_equal(ours[1], reference[1])


@dataclasses.dataclass
class SoakResult:
    """The figures of one soak (memory in MB)."""

    threads: int
    seconds: float
    calls: int
    texts: int
    refused: int
    errors: list
    calls_per_thread: list
    rss_before_mb: float
    rss_peak_mb: float
    rss_end_mb: float
    refused_kinds: list
    refused_requests: list

    @property
    def rss_growth_mb(self):
        return self.rss_peak_mb - self.rss_before_mb


def soak(classifier, requests, threads=8, seconds=60.0, seed=0):
    """Calls `classifier` from `threads` threads for `seconds`; see the module docstring."""
    first = [outcome(classifier, request) for request in requests]  # every shape traced once
    reference = [outcome(classifier, request) for request in requests]
    errors = [f"request {number}: two single-threaded calls differ" for number, (a, b) in enumerate(zip(first, reference))
              if not same(a, b)]
    refused_kinds = sorted({result[1] for result in reference if result[0] == "error"})
    refused_requests = [number for number, result in enumerate(reference) if result[0] == "error"]
    before = rss_mb()
    peak = [before]
    stop = threading.Event()
    lock = threading.Lock()
    calls, texts, refused = [0] * threads, [0], [0]

    def sample():
        while not stop.wait(SAMPLE_S):
            peak[0] = max(peak[0], rss_mb())

    def worker(index):
        rng = random.Random(seed * 1000 + index)
        while not stop.is_set():
            number = rng.randrange(len(requests))
            result = outcome(classifier, requests[number])
            calls[index] += 1
            with lock:
                texts[0] += len(requests[number])
                refused[0] += result[0] == "error"
                if not same(result, reference[number]) and len(errors) < 20:
                    errors.append(f"thread {index}, request {number}: {result[0]} {str(result[1])[:200]} "
                                  f"(single-threaded: {reference[number][0]} {str(reference[number][1])[:200]})")

    sampler = threading.Thread(target=sample, daemon=True)
    workers = [threading.Thread(target=worker, args=(index,), daemon=True) for index in range(threads)]
    started = time.monotonic()
    sampler.start()
    for thread in workers:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in workers:
        thread.join()
    elapsed = time.monotonic() - started
    sampler.join()
    end = rss_mb()
    return SoakResult(threads, elapsed, sum(calls), texts[0], refused[0], errors, calls, before, max(peak[0], end), end,
                      refused_kinds, refused_requests)


def report(result, model, command):
    """The figures as Markdown."""
    lines = [
        f"## {model}",
        "",
        f"Command: `{command}`  ",
        f"Date: {datetime.date.today().isoformat()}; Python {platform.python_version()}; CPU: {os.cpu_count()} cores; "
        f"AVX-512: {cpu_flags()}",
        "",
        "| figure | value |",
        "|---|---|",
        f"| threads x seconds | {result.threads} x {result.seconds:.1f} |",
        f"| calls (texts) | {result.calls:,} ({result.texts:,}) |",
        f"| calls per second | {result.calls / result.seconds:.1f} |",
        f"| calls per thread | {min(result.calls_per_thread):,} to {max(result.calls_per_thread):,} |",
        f"| errors (an outcome other than the single-threaded one) | {len(result.errors)} |",
        f"| calls refused as single-threaded (lone surrogates) | {result.refused:,} |",
        f"| RSS after the reference pass | {result.rss_before_mb:.0f} MB |",
        f"| peak RSS during the soak | {result.rss_peak_mb:.0f} MB |",
        f"| RSS growth (peak - before) | {result.rss_growth_mb:.1f} MB (bound {RSS_BOUND_MB} MB) |",
        f"| RSS at the end | {result.rss_end_mb:.0f} MB |",
        "",
    ]
    if result.refused_kinds:
        lines += ["Refused inputs (the same message on every thread): " + "; ".join(f"`{kind}`" for kind in result.refused_kinds), ""]
    for error in result.errors:
        lines.append(f"- {error}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a classifier export to soak (default: a tiny one exported first)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--report", help="append the figures as Markdown to this file")
    args = parser.parse_args(argv)
    command = "python benchmarks/soak.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model or export_tiny_classifier(os.path.join(scratch, "classifier"))
        classifier = load_classifier(model, warm_up=True)  # as a server loads it: every request on the rewritten graph
        requests = make_requests(normal_texts() + [text for _, text in hostile_texts()])
        result = soak(classifier, requests, threads=args.threads, seconds=args.seconds)
    name = args.model or f"tiny classifier (2 layers, hidden 32, {len(VOCABULARY)} tokens, sequences of 128; untrained)"
    text = report(result, name, command.strip())
    print(text)
    if args.report:
        with open(args.report, "a") as f:
            f.write(text + "\n")
    ok = not result.errors and result.rss_growth_mb < RSS_BOUND_MB
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
