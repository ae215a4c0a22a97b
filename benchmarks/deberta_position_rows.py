"""DeBERTa-v3's position terms before and after they were cut to the relative table's reached rows, in one process.

`DisentangledSelfAttention.position_scores` once projected all `2 * position_buckets` rows of the relative table in
every layer and multiplied the queries and keys with each of them, although a text of `n` tokens only reaches the
rows of distances below `n`. This script builds one `DebertaV3Encoder` (MiniLM's size by default: 6 layers, 384
wide, 12 heads, 256 buckets over 512 positions; random weights), traces it twice, once with the method of revision
`--before` (read with `git show`) and once with the working tree's, and calls the two alternately on the same ids:
median time per call, the median and range of the per-pair ratios (before / now: above 1, now is faster), and the
largest difference of their outputs. It also checks that XLA compiles the current method.

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/deberta_position_rows.py [--before 9421118] [--pairs 10 2]
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
MODULE = "bert_keras/layers/disentangled_attention.py"
KEYS = ("input_word_ids", "input_mask", "input_type_ids")


def method_at(revision):
    """`DisentangledSelfAttention.position_scores` as the module was at `revision`."""
    source = subprocess.run(["git", "show", f"{revision}:{MODULE}"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("disentangled_attention_before", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.unlink(f.name)
    return module.DisentangledSelfAttention.position_scores


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="9421118", help="the revision whose method is compared (default: the "
                        "last one with the whole table)")
    parser.add_argument("--pairs", type=int, nargs=2, default=(10, 2), help="timed pairs at batch 1 and at batch 32")
    parser.add_argument("--seq-length", type=int, default=128)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from bert_keras.layers import disentangled_attention
    from bert_keras.models.deberta import DebertaV3Encoder

    attention = disentangled_attention.DisentangledSelfAttention
    methods = {"before": method_at(args.before), "now": attention.position_scores}
    encoder = DebertaV3Encoder(vocab_size=8000, num_layers=6, hidden_size=384, num_heads=12, intermediate_size=1536,
                               position_buckets=256, max_relative_positions=512)
    spec = {key: tf.TensorSpec([None, None], tf.int32) for key in KEYS}
    functions = {}
    for name, method in methods.items():
        attention.position_scores = method  # read when traced
        functions[name] = tf.function(lambda x: encoder(x, training=False)["sequence_output"])
        functions[name].get_concrete_function(spec)
    attention.position_scores = methods["now"]

    def ids(batch, length):
        rng = np.random.default_rng(0)
        return {"input_word_ids": tf.constant(rng.integers(5, 8000, (batch, length)), tf.int32),
                "input_mask": tf.ones((batch, length), tf.int32), "input_type_ids": tf.zeros((batch, length), tf.int32)}

    xla = tf.function(lambda x: encoder(x, training=False)["sequence_output"], jit_compile=True)
    x = ids(2, 40)
    print(f"XLA compiles the current method: max abs difference to the graph {float(tf.reduce_max(tf.abs(xla(x) - functions['before'](x)))):.1e}")
    for batch, pairs in zip((1, 32), args.pairs):
        x = ids(batch, args.seq_length)
        difference = float(tf.reduce_max(tf.abs(functions["before"](x) - functions["now"](x))))
        times = {"before": [], "now": []}
        for pair in range(pairs):
            for name in ("before", "now") if pair % 2 else ("now", "before"):
                start = time.perf_counter()
                functions[name](x).numpy()
                times[name].append(time.perf_counter() - start)
        ratios = [b / n for b, n in zip(times["before"], times["now"])]
        print(f"batch {batch}, {args.seq_length} tokens: before {statistics.median(times['before']) * 1e3:.1f} ms, "
              f"now {statistics.median(times['now']) * 1e3:.1f} ms; before/now {statistics.median(ratios):.2f}x "
              f"(range {min(ratios):.2f}-{max(ratios):.2f}, {pairs} pairs); outputs differ by {difference:.1e}")


if __name__ == "__main__":
    main()
