"""Long documents: one ModernBERT document of 512 to 8,192 tokens, ours against transformers' ModernBertModel (issue 59).

The model: a ModernBERT of MiniLM's width (6 layers, hidden 384, 6 heads, GeGLU intermediate 1152: transformers'
`Wi` is 384 -> 2 x 1152, a full-attention layer every third from the first, 128-token sliding windows between,
8,192 positions), random weights seeded and perturbed (LayerNorms not ones), saved by transformers 5's
`save_pretrained` and read by both contenders from that folder.

Per length, one worker process per contender (alternated: which goes first changes with each length and round),
each: the model loaded, the document's ids built, then one warm-up call and `--runs` timed calls. Reported: the
median time, the peak resident memory the document costs (the process' high-water mark, reset after loading,
minus its resident memory then: activations, workspace and, for ours, the traced graph), and the largest
difference of the two `last_hidden_state`s and of their mean-pooled embeddings.
- ours: `ModernBertEncoder.from_checkpoint` called through a `tf.function` of unknown batch and length
  (`autograph=False`), as `SentenceEncoder.encode` runs it: the local layers attend in bands from
  `BANDED_MIN_LENGTH` tokens on, the global ones over the whole document;
- transformers: `ModernBertModel.from_pretrained` with its default attention (sdpa on CPU: the window as a
  mask over full attention), `torch.set_num_threads(os.cpu_count())`, under `torch.inference_mode()`; and the
  same with one thread.

Run (from the repository root; needs the test extras):

    TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=. python benchmarks/long_documents.py [--runs 3] [--rounds 1]

writes benchmarks/results/long_documents.md.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from run_all import cpu_description  # noqa: E402 - the one description of the CPU the benchmarks print

LENGTHS = (512, 1024, 2048, 4096, 8192)
CONFIG = dict(vocab_size=50368, hidden_size=384, intermediate_size=1152, num_hidden_layers=6, num_attention_heads=6,
              global_attn_every_n_layers=3, local_attention=128, max_position_embeddings=8192, pad_token_id=50283,
              bos_token_id=50281, eos_token_id=50282, cls_token_id=50281, sep_token_id=50282)
# "transformers, 1 thread": beside the brief's all-cores run, since on a shared 2-core machine two spinning OpenMP
# threads collapse whenever another job holds a core (benchmarks/serving_engines.py saw the same).
CONTENDERS = ("ours", "transformers", "transformers, 1 thread")


def save_model(folder, seed=0):
    import torch
    import transformers

    from tests.checkpoints._models import perturb_torch

    torch.manual_seed(seed)
    model = transformers.ModernBertModel(transformers.ModernBertConfig(**CONFIG))
    perturb_torch(model, seed=seed)
    model.save_pretrained(folder)


def document(length, seed=0):
    """One document's ids `(1, length)`: [CLS], random pieces, [SEP]."""
    ids = np.random.default_rng(seed).integers(5, 50000, (1, length)).astype("int32")
    ids[0, 0], ids[0, -1] = CONFIG["cls_token_id"], CONFIG["sep_token_id"]
    return ids


def _status(key):
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024  # bytes
    raise KeyError(key)


def _reset_peak():
    with open("/proc/self/clear_refs", "w", encoding="utf-8") as f:
        f.write("5")  # resets VmHWM to the current resident size


def _ours(folder):
    import tensorflow as tf

    from bert_keras.models.modernbert import ModernBertEncoder

    encoder = ModernBertEncoder.from_checkpoint(folder)
    spec = tf.TensorSpec((None, None), tf.int32)

    def forward(ids, mask):
        return encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": tf.zeros_like(ids)},
                       training=False)["sequence_output"]

    traced = tf.function(forward, input_signature=[spec, spec], autograph=False)
    return lambda ids: traced(tf.constant(ids), tf.ones_like(tf.constant(ids))).numpy()


def _transformers(folder, threads):
    import torch
    import transformers

    torch.set_num_threads(threads)
    model = transformers.ModernBertModel.from_pretrained(folder).eval()

    def run(ids):
        with torch.inference_mode():
            ids = torch.tensor(ids, dtype=torch.long)
            return model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state.numpy()

    return run


def worker(args):
    import time

    if args.worker == "ours":
        run = _ours(args.folder)
    else:
        run = _transformers(args.folder, 1 if args.worker.endswith("1 thread") else os.cpu_count())
    ids = document(args.length)
    _reset_peak()
    base = _status("VmRSS")
    output = run(ids)  # warm-up (for ours, the trace of this signature)
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        output = run(ids)
        times.append(time.perf_counter() - start)
    peak = _status("VmHWM") - base
    np.save(args.output, output[0])
    print(json.dumps({"times": times, "peak": peak}))


def _spawn(contender, length, folder, runs, output):
    command = [sys.executable, os.path.abspath(__file__), "--worker", contender, "--length", str(length),
               "--folder", folder, "--runs", str(runs), "--output", output]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(folder, lengths, runs, rounds, scratch):
    """Yields each length's results as they come (a table of the lengths done so far survives an interrupted run)."""
    results = {}
    for index, length in enumerate(lengths):
        times, peaks = {c: [] for c in CONTENDERS}, {c: [] for c in CONTENDERS}
        for round_ in range(rounds):
            shift = (index + round_) % len(CONTENDERS)
            for contender in CONTENDERS[shift:] + CONTENDERS[:shift]:
                name = contender.replace(",", "").replace(" ", "_")  # transformers.npy: the all-cores run
                report = _spawn(contender, length, folder, runs, os.path.join(scratch, f"{name}.npy"))
                times[contender] += report["times"]
                peaks[contender].append(report["peak"])
        ours, theirs = np.load(os.path.join(scratch, "ours.npy")), np.load(os.path.join(scratch, "transformers.npy"))
        results[length] = {
            "time": {c: statistics.median(times[c]) for c in CONTENDERS},
            "peak": {c: statistics.median(peaks[c]) for c in CONTENDERS},
            "hidden_diff": float(np.abs(ours - theirs).max()),
            "embedding_diff": float(np.abs(ours.mean(0) - theirs.mean(0)).max()),
        }
        print(f"{length}: {json.dumps(results[length])}", flush=True)
        yield results


def layer_kinds(lengths, runs):
    """One attention layer of each kind at the model's width, in one process, alternated: median seconds."""
    import time

    import tensorflow as tf

    from bert_keras.layers import RotarySelfAttention

    layers = {"local, in bands": (RotarySelfAttention(6, attention_window=128), True),
              "global, by chunks of queries": (RotarySelfAttention(6, rope_theta=160000.0), False)}
    spec = [tf.TensorSpec((None, None, 384), tf.float32), tf.TensorSpec((None, None), tf.int32)]
    calls = {name: tf.function(lambda x, m, layer=layer, local=local: layer(x, attention_mask=m) if local
                               else layer(x, attention_bias=tf.zeros_like(tf.cast(m, tf.float32))[:, None, None]),
                               input_signature=spec, autograph=False) for name, (layer, local) in layers.items()}
    rows = {}
    for length in lengths:
        x = tf.random.stateless_normal((1, length, 384), seed=(0, length))
        mask = tf.ones((1, length), tf.int32)
        times = {name: [] for name in calls}
        for name in calls:
            calls[name](x, mask)  # warm-up
        for _ in range(runs):
            for name, call in calls.items():
                start = time.perf_counter()
                call(x, mask).numpy()
                times[name].append(time.perf_counter() - start)
        rows[length] = {name: statistics.median(t) for name, t in times.items()}
        print(f"layers at {length}: {rows[length]}", flush=True)
    return rows


def _load_average():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def write_table(results, args, load_before, path, kinds=None):
    import tensorflow as tf
    import torch
    import transformers

    lines = [
        "# Long documents: one ModernBERT document, 512 to 8,192 tokens, ours against transformers",
        "",
        f"Command: `TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=. python benchmarks/long_documents.py --runs {args.runs} "
        f"--rounds {args.rounds}` (a warm-up call, then {args.runs} timed calls per worker process, "
        f"{args.rounds} process(es) per contender and length; median of all timed calls).",
        "",
        f"Machine: {cpu_description()}, {os.cpu_count()} cores, shared with other jobs (load average {load_before} "
        f"before the run, {_load_average()} after it); Python {platform.python_version()}, TensorFlow {tf.__version__}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), transformers {transformers.__version__}.",
        "",
        "Model: ModernBERT of MiniLM's width (6 layers, hidden 384, 6 heads, GeGLU 2 x 1152, global layers 0 and 3, "
        "128-token windows in the others, 8,192 positions), random seeded weights saved by transformers. Ours: "
        "`ModernBertEncoder` in a `tf.function` of unknown length (what `SentenceEncoder.encode` runs), local "
        "layers in bands. transformers: `ModernBertModel`, default attention (sdpa; the window a mask over full "
        "attention). Memory: the peak resident memory the call adds to the loaded process.",
        "",
        "| tokens | ours (s) | transformers, 2 threads (s) | transformers, 1 thread (s) | ours / best transformers "
        "| ours peak (MiB) | transformers peak (MiB), 2 / 1 threads | max abs diff, last_hidden_state "
        "| max abs diff, mean-pooled |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for length, r in results.items():
        t, p, one = r["time"], r["peak"], "transformers, 1 thread"
        best = min(t["transformers"], t[one])
        lines.append(f"| {length} | {t['ours']:.3f} | {t['transformers']:.3f} | {t[one]:.3f} | {t['ours'] / best:.2f} | "
                     f"{p['ours'] / 2**20:.0f} | {p['transformers'] / 2**20:.0f} / {p[one] / 2**20:.0f} | "
                     f"{r['hidden_diff']:.1e} | {r['embedding_diff']:.1e} |")
    if 2048 in results and 8192 in results:
        ratio = {c: results[8192]["time"][c] / results[2048]["time"][c] for c in CONTENDERS}
        lines += ["", f"time(8192) / time(2048): ours {ratio['ours']:.1f}x, transformers {ratio['transformers']:.1f}x "
                  f"(2 threads) / {ratio['transformers, 1 thread']:.1f}x (1 thread); linear: 4x, quadratic: 16x."]
    if kinds:
        names = list(next(iter(kinds.values())))
        lines += ["", f"One attention layer of each kind alone (`--layer-runs {args.layer_runs}`: a `tf.function`, one "
                  "process, alternated, median), seconds:", "",
                  "| tokens | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
        lines += [f"| {length} | " + " | ".join(f"{row[n]:.4f}" for n in names) + " |" for length, row in kinds.items()]
        first, last = min(kinds), max(kinds)
        lines += ["", f"time({last}) / time({first}): " + ", ".join(
            f"{n} {kinds[last][n] / kinds[first][n]:.1f}x" for n in names) + f" (linear: {last / first:.0f}x)."]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--layer-runs", type=int, default=5, help="timed calls of each layer kind alone (0: none)")
    parser.add_argument("--only-layers", action="store_true", help="time the layer kinds only (no table written)")
    parser.add_argument("--results", default=os.path.join(HERE, "results", "long_documents.md"))
    parser.add_argument("--worker", choices=CONTENDERS)  # internal: one contender's process
    parser.add_argument("--length", type=int)
    parser.add_argument("--folder")
    parser.add_argument("--output")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.only_layers:
        return layer_kinds((2048, 8192), args.layer_runs)
    load_before = _load_average()
    with tempfile.TemporaryDirectory() as scratch:
        folder = os.path.join(scratch, "modernbert")
        save_model(folder)
        for results in measure(folder, args.lengths, args.runs, args.rounds, scratch):
            write_table(results, args, load_before, args.results)
    if args.layer_runs:
        write_table(results, args, load_before, args.results, layer_kinds((2048, 8192), args.layer_runs))
    print(open(args.results, encoding="utf-8").read())


if __name__ == "__main__":
    main()
