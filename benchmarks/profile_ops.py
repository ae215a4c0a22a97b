"""Where a MiniLM-L6 step spends its time, by TensorFlow op type (from the TF profiler).

Builds the model of `worker.py` (our encoder, or keras-nlp's backbone, with the
2-class head for `train`), runs warm-up steps, profiles `--steps` steps with
`tf.profiler`, and prints a markdown table of the time per step summed over
the executor threads for each op type (ops of different threads overlap, so
the column adds up to more than the wall time).

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/profile_ops.py infer ours
    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/profile_ops.py train kerasnlp --lengths full
    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/profile_ops.py infer ours --lengths full --dtype mixed_bfloat16 --by-part
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


# Parts of a step, by op type and name scope (first match wins), for `--by-part`.
PARTS = [
    ("dense GEMMs (fused bias, GELU, residual add)", lambda t, n: "MatMul" in t and "BatchMatMul" not in t),
    ("attention products (q k^T with fused scale + mask, probs v)", lambda t, n: "BatchMatMul" in t or t == "Einsum"),
    ("softmax", lambda t, n: "Softmax" in t),
    ("layer norms", lambda t, n: "layer_norm" in n or "layernorm" in n.lower()),
    ("casts of weights", lambda t, n: t == "Cast" and ("/Cast/Cast" in n or "ReadVariableOp" in n)),
    ("casts of activations", lambda t, n: t == "Cast"),
    ("transposes", lambda t, n: "Transpose" in t),
    ("embeddings (lookups, sums)", lambda t, n: "embedding" in n),
    ("packing (index, gathers, conds)", lambda t, n: "pack" in n),
    ("other (residual adds after attention, Q/K/V kernel concat, thread-pool events)", lambda t, n: True),
]


def part_of(op_name):
    scope, _, op_type = op_name.rpartition(":")
    return next(part for part, match in PARTS if match(op_type, scope))


def op_times(logdir, steps, key=lambda name: name.rsplit(":", 1)[-1]):
    """op type (or `key(op name)`) -> milliseconds per step, summed over the executor threads."""
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
                if name.rsplit(":", 1)[-1] in ("Process", "ExecutorDoneCallback", "StartRegion", "StopRegion",
                                               "MemoryAllocation", "MemoryDeallocation", "Record"):
                    continue  # the executor's own events, not ops
                totals[key(name)] += event.duration_ps / 1e9 / steps
    return totals


def profile_torch(args):
    """The same table for transformers' BertModel (inference), from torch.profiler's self CPU time per op."""
    import torch

    from worker import minilm_dir

    from transformers import BertModel

    model = BertModel.from_pretrained(minilm_dir(), attn_implementation=args.torch_attention).eval()
    bf16 = args.dtype == "mixed_bfloat16"
    if bf16 and args.torch_bf16_weights:
        model.to(torch.bfloat16)
    ids, mask, types, _ = make_inputs(args.batch, args.seq, lengths=args.lengths)
    x = {"input_ids": torch.from_numpy(ids.astype("int64")), "attention_mask": torch.from_numpy(mask.astype("int64")),
         "token_type_ids": torch.from_numpy(types.astype("int64"))}
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16 and not args.torch_bf16_weights)

    def step():
        with torch.inference_mode(), autocast:
            model(**x)

    for _ in range(3):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        wall = (time.perf_counter() - start) / args.steps * 1000
    totals = collections.Counter()
    for event in profiler.key_averages():
        if event.self_cpu_time_total > 0:
            totals[event.key] += event.self_cpu_time_total / 1000 / args.steps
    busy = sum(totals.values())
    variant = ("bf16 weights" if args.torch_bf16_weights else "bf16 autocast") if bf16 else "float32"
    print(f"{args.task} torch ({variant}, {args.torch_attention} attention, {args.lengths} rows, batch {args.batch}, "
          f"seq {args.seq}): {wall:.0f} ms per step (profiled), op time {busy:.0f} ms (self CPU time)\n")
    print("| op | ms per step | share of op time |")
    print("|---|---:|---:|")
    for name, ms in totals.most_common(args.top):
        print(f"| {name} | {ms:.1f} | {100 * ms / busy:.0f}% |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["infer", "train"])
    parser.add_argument("peer", choices=["ours", "kerasnlp", "torch"])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--lengths", choices=LENGTHS, default="ragged")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--no-pack", action="store_true")
    parser.add_argument("--by-part", action="store_true",
                        help="group the ops into parts of the block (GEMMs, softmax, layer norms, casts, ...)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "mixed_bfloat16"], help="Keras dtype policy")
    parser.add_argument("--torch-bf16-weights", action="store_true", help="torch: model.to(bfloat16), not autocast")
    parser.add_argument("--torch-attention", default="sdpa", choices=["sdpa", "eager"])
    args = parser.parse_args()
    args.jit, args.random_weights = False, True
    if args.peer == "torch":
        return profile_torch(args)

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
    totals = op_times(logdir, args.steps, key=part_of) if args.by_part else op_times(logdir, args.steps)
    busy = sum(totals.values())
    print(f"{args.task} {args.peer} ({args.dtype}, {args.lengths} rows, batch {args.batch}, seq {args.seq}): "
          f"{wall:.0f} ms per step (profiled), op time {busy:.0f} ms summed over threads\n")
    print(f"| {'part' if args.by_part else 'op type'} | ms per step | share of op time |")
    print("|---|---:|---:|")
    for name, ms in totals.most_common(args.top):
        print(f"| {name} | {ms:.1f} | {100 * ms / busy:.0f}% |")


if __name__ == "__main__":
    main()
