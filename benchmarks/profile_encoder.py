"""Where the time of one MiniLM-L6 encoder block goes (batch 32, seq 128, fp32 or bf16 inference).

Times, in one process, each part of our `TransformerEncoderBlock` on its own
(a `tf.function` per part, median of `--repeats` calls after warm-up) next to
the plain GEMMs of the same shapes, and prints a markdown table: milliseconds,
GFLOP and GFLOP/s per part, and the sum of the parts against the whole block.
TensorFlow 2.21 uses its oneDNN kernels by default on this CPU; run it with
`TF_ENABLE_ONEDNN_OPTS=0` (read when TensorFlow is imported) to see Eigen's:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/profile_encoder.py
    TF_ENABLE_ONEDNN_OPTS=0 TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/profile_encoder.py
    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/profile_encoder.py --dtype mixed_bfloat16
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_keras.layers import TransformerEncoderBlock, attention_bias_from_mask  # noqa: E402
from bert_keras.layers._utils import gelu_exact  # noqa: E402


def median_ms(function, repeats, *args):
    function(*args)
    function(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function(*args)
        (result[0] if isinstance(result, (tuple, list)) else result).numpy()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--jit", action="store_true", help="compile every part with XLA")
    parser.add_argument("--dtype", default="float32", choices=["float32", "mixed_bfloat16"],
                        help="dtype policy of the block; the parts run in its compute dtype")
    args = parser.parse_args()
    b, s, h, heads, i = args.batch, args.seq, args.hidden, args.heads, args.intermediate
    tokens = b * s
    compute = "bfloat16" if args.dtype == "mixed_bfloat16" else "float32"

    rng = np.random.default_rng(0)

    def tensor(*shape):
        return tf.cast(rng.normal(size=shape).astype("float32"), compute)

    x = tensor(b, s, h)
    bias = tf.cast(attention_bias_from_mask(tf.ones((b, s), tf.int32)), compute)
    block = TransformerEncoderBlock(num_heads=heads, intermediate_size=i, dtype=args.dtype)
    block(x, attention_bias=bias)
    attention, ffn = block.attention, block.feed_forward
    x2 = tf.reshape(x, (tokens, h))
    inter = tensor(tokens, i)
    scores = tensor(b, heads, s, s)
    q = tensor(b, heads, s, h // heads)
    w_qkv, w_o, w_1, w_2 = tensor(h, 3 * h), tensor(h, h), tensor(h, i), tensor(i, h)
    b_1 = tensor(i)
    scale = tf.cast(1.0 / (h // heads) ** 0.5, compute)

    def fn(f):
        return tf.function(f, jit_compile=args.jit)

    parts = [
        ("GEMM qkv (tokens x H x 3H)", fn(lambda: tf.matmul(x2, w_qkv)), 2 * tokens * h * 3 * h),
        ("batched matmul q k^T, scale, mask bias (fused)", fn(lambda: tf.matmul(q, q, transpose_b=True) * scale + bias),
         2 * b * heads * s * s * (h // heads)),
        ("softmax", fn(lambda: tf.nn.softmax(scores)), 0),
        ("batched matmul probs v", fn(lambda: tf.matmul(scores, q)), 2 * b * heads * s * s * (h // heads)),
        ("GEMM attention output (tokens x H x H)", fn(lambda: tf.matmul(x2, w_o)), 2 * tokens * h * h),
        # oneDNN fuses bias + exact GELU into the GEMM (as in the block: `Gelu/mul_2:_MklNativeFusedMatMul`).
        ("GEMM FFN in + bias + exact GELU (fused)", fn(lambda: gelu_exact(tf.nn.bias_add(tf.matmul(x2, w_1), b_1))), 2 * tokens * h * i),
        ("GEMM FFN out (tokens x I x H)", fn(lambda: tf.matmul(inter, w_2)), 2 * tokens * i * h),
        ("2 x (residual add + LayerNorm)", fn(lambda: block.feed_forward_layer_norm(block.attention_layer_norm(x + x) + x)), 0),
    ]
    whole = [
        ("attention layer (ours)", fn(lambda: attention(x, attention_bias=bias)), 0),
        ("feed-forward layer (ours)", fn(lambda: ffn(x)), 0),
        ("whole block (ours)", fn(lambda: block(x, attention_bias=bias)), 0),
    ]
    rows, total, total_flops = [], 0.0, 0
    for name, f, flops in parts:
        ms = median_ms(f, args.repeats)
        total += ms
        total_flops += flops
        rows.append((name, ms, flops))
    rows.append(("sum of the parts", total, total_flops))
    for name, f, flops in whole:
        rows.append((name, median_ms(f, args.repeats), total_flops if name.startswith("whole") else 0))

    print(f"TF {tf.__version__}, {args.dtype}, TF_ENABLE_ONEDNN_OPTS={os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'unset')}, "
          f"XLA={'on' if args.jit else 'off'}; batch {b}, seq {s}, hidden {h}, heads {heads}, intermediate {i}")
    print()
    print("| part | ms | GFLOP | GFLOP/s |")
    print("|---|---:|---:|---:|")
    for name, ms, flops in rows:
        rate = f"{flops / ms / 1e6:.0f}" if flops else ""
        print(f"| {name} | {ms:.1f} | {flops / 1e9:.2f} | {rate} |")


if __name__ == "__main__":
    main()
