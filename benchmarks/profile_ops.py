"""Where a MiniLM-L6 step spends its time, by TensorFlow op type (from the TF profiler).

Builds the model of `worker.py` (our encoder, or keras-nlp's backbone, with the
2-class head for `train`), runs warm-up steps, profiles `--steps` steps with
`tf.profiler`, and prints a markdown table of the time per step summed over
the executor threads for each op type (ops of different threads overlap, so
the column adds up to more than the wall time).

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/profile_ops.py infer ours
    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/profile_ops.py train kerasnlp --lengths full
    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/profile_ops.py infer ours --lengths full --dtype mixed_bfloat16
"""

import argparse
import collections
import glob
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from worker import LENGTHS, keras_inputs, keras_model, make_inputs  # noqa: E402


def op_times(logdir, steps):
    """op type -> milliseconds per step, summed over the executor threads."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    totals = collections.Counter()
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = names.get(event.metadata_id, "?")
                totals[name.rsplit(":", 1)[-1]] += event.duration_ps / 1e9 / steps
    totals.pop("Process", None)  # the executor's whole-graph event
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["infer", "train"])
    parser.add_argument("peer", choices=["ours", "kerasnlp"])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--lengths", choices=LENGTHS, default="ragged")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--no-pack", action="store_true")
    parser.add_argument("--dtype", default="float32", choices=["float32", "mixed_bfloat16"], help="Keras dtype policy")
    args = parser.parse_args()
    args.jit, args.random_weights = False, True

    import tensorflow as tf

    training = args.task == "train"
    ids, mask, types, labels = make_inputs(args.batch, args.seq, lengths=args.lengths)
    model = keras_model(args, training)
    x = {k: tf.constant(v) for k, v in keras_inputs(args.peer, ids, mask, types).items()}
    y = tf.constant(labels)
    step = (lambda: model.train_on_batch(x, y)) if training else (lambda: model.predict_on_batch(x))
    for _ in range(3):
        step()
    logdir = tempfile.mkdtemp(prefix="bert_keras_profile_")
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    wall = (time.perf_counter() - start) / args.steps * 1000
    tf.profiler.experimental.stop()
    totals = op_times(logdir, args.steps)
    busy = sum(totals.values())
    print(f"{args.task} {args.peer} ({args.dtype}, {args.lengths} rows, batch {args.batch}, seq {args.seq}): "
          f"{wall:.0f} ms per step (profiled), op time {busy:.0f} ms summed over threads\n")
    print("| op type | ms per step | share of op time |")
    print("|---|---:|---:|")
    for name, ms in totals.most_common(args.top):
        print(f"| {name} | {ms:.1f} | {100 * ms / busy:.0f}% |")


if __name__ == "__main__":
    main()
