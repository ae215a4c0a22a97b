"""DeBERTa-v3's attention and block at a revision against the working tree's, in one process, with op profiles.

Builds one `DebertaV3Encoder` (MiniLM's size by default: 6 layers, 384 wide, 12 heads, intermediate 1536, 256 log
buckets over 512 relative positions, shared keys, as the real v3 configs; random weights) and traces it twice: once
with the methods of `DisentangledSelfAttention` and `DebertaBlock` as they were at revision `--before` (their modules
read with `git show`; their `call`, `position_scores` and helpers replace the working tree's while that trace is made)
and once with the working tree's. The two graphs run alternately on the same ids, batch 1 and batch 32 of `--seq-length` tokens without
padding: median time per call, the median and range of the per-pair ratios (before / now: above 1, now is faster),
the largest difference of their outputs. With `--profile`, `tf.profiler` records `--profile-steps` calls of each at
batch 32 and a table gives the top op types of each (milliseconds per call summed over the executor threads, as
`benchmarks/profile_ops.py` counts them: ops of different threads overlap, so a column adds up to more than the wall
time). It also checks that XLA compiles the working tree's layers.

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/deberta_attention.py --before 1c47167 [--pairs 10 4] [--profile]
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
CLASSES = {"bert_keras/layers/disentangled_attention.py": "DisentangledSelfAttention",
           "bert_keras/layers/deberta_block.py": "DebertaBlock"}
KEYS = ("input_word_ids", "input_mask", "input_type_ids")


def class_at(revision, path):
    """The class `CLASSES[path]` of the module as it was at `revision`."""
    source = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"{os.path.basename(path)[:-3]}_before", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.unlink(f.name)
    return getattr(module, CLASSES[path])


def methods_of(cls):
    """The class's own functions (what a trace reads), by name."""
    return {name: value for name, value in vars(cls).items() if callable(value) and not isinstance(value, type)
            and not name.startswith("__")}


def profile(function, x, steps):
    """op type -> milliseconds per call, summed over the executor threads."""
    import tensorflow as tf
    from profile_ops import op_times

    logdir = tempfile.mkdtemp(prefix="deberta_attention_profile_")
    tf.profiler.experimental.start(logdir)
    for _ in range(steps):
        function(x).numpy()
    tf.profiler.experimental.stop()
    return op_times(logdir, steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the revision whose attention layer is compared")
    parser.add_argument("--pairs", type=int, nargs=2, default=(10, 4), help="timed pairs at batch 1 and at batch 32")
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--profile", action="store_true", help="also profile both at batch 32")
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from bert_keras import layers
    from bert_keras.models.deberta import DebertaV3Encoder

    classes = [getattr(layers, name) for name in CLASSES.values()]
    now = [methods_of(cls) for cls in classes]
    before = [methods_of(class_at(args.before, path)) for path in CLASSES]
    encoder = DebertaV3Encoder(vocab_size=8000, num_layers=6, hidden_size=384, num_heads=12, intermediate_size=1536,
                               position_buckets=256, max_relative_positions=512)
    spec = {key: tf.TensorSpec([None, None], tf.int32) for key in KEYS}

    def install(methods):
        for cls, chosen, current, earlier in zip(classes, methods, now, before):
            for name in set(current) | set(earlier):
                if name in chosen:
                    setattr(cls, name, chosen[name])
                elif name in vars(cls):
                    delattr(cls, name)

    functions = {}
    for name, methods in (("before", before), ("now", now)):
        install(methods)  # read when traced
        functions[name] = tf.function(lambda x: encoder(x, training=False)["sequence_output"])
        functions[name].get_concrete_function(spec)
    install(now)

    def ids(batch, length):
        rng = np.random.default_rng(0)
        return {"input_word_ids": tf.constant(rng.integers(5, 8000, (batch, length)), tf.int32),
                "input_mask": tf.ones((batch, length), tf.int32), "input_type_ids": tf.zeros((batch, length), tf.int32)}

    xla = tf.function(lambda x: encoder(x, training=False)["sequence_output"], jit_compile=True)
    x = ids(2, 40)
    print(f"XLA compiles the working tree's layers: max abs difference to the graph before "
          f"{float(tf.reduce_max(tf.abs(xla(x) - functions['before'](x)))):.1e}")
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
    if args.profile:
        x = ids(32, args.seq_length)
        for name in ("before", "now"):
            totals = profile(functions[name], x, args.profile_steps)
            busy = sum(totals.values())
            print(f"\n{name} ({args.before if name == 'before' else 'working tree'}), batch 32: op time {busy:.0f} ms "
                  "per call summed over threads\n\n| op type | ms per call | share |\n|---|---:|---:|")
            for op, ms in totals.most_common(args.top):
                print(f"| {op} | {ms:.1f} | {100 * ms / busy:.0f}% |")


if __name__ == "__main__":
    main()
