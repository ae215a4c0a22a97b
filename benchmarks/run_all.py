"""All speed comparisons of bert_keras against its peers, in one run, as one markdown table.

Peers: our `BertEncoder`, keras-nlp (keras-hub) `BertBackbone` and transformers'
`BertModel` on torch, on the same architecture, batch, sequence length and
inputs. Every measurement runs in its own process (`worker.py`); the peers
alternate within each round (the order rotates from round to round), so that
other load on the machine hits all of them alike. Reported: the median over
all timed steps of all rounds, the spread (lowest and highest per-process
median), ratios as the median of the per-round paired ratios, the achieved
GFLOP/s (FLOPs of the matrix products the peer computes / time; a training
step counts 3x the forward FLOPs) and its share of this machine's fp32 GEMM
peak, measured in the same run. Our encoder packs the real tokens
(`BertEncoder(pack_tokens=True)`, the default), so its dense layers compute
fewer token rows than the padded peers; `ours (padded)` is the same encoder
with `pack_tokens=False`.

Sections: fp32 and bf16 GEMM peaks; MiniLM-L6 inference (batch 32, seq 128) on ragged
rows (lengths uniform in 64-128, the first row full), on rows without padding
(fp32, and bf16: Keras `mixed_bfloat16` against torch at its best, autocast or
bf16 weights with either attention, the best per round taken as torch's
figure), and on the first 32 tweets of the corpus; BERT-Base inference (batch 8, seq
128, ragged); training step (MiniLM-L6 + 2-class head, Adam, batch 32, seq 128,
ragged); our exported Hub SavedModel vs the in-memory model; tokenisation
(`tokenize_benchmark.py`).

Run from the repository root (about 25 minutes on 2 cores):

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/run_all.py --output benchmarks/results/benchmarks.md

or only some sections: the encoder-speed targets (about 20 minutes; `--quiet 0.1` counts only the timed
steps during which other processes used at most 10% of the cores, `--baseline-tree` adds our encoder from
another source tree, here the one before the speed work):

    git archive 8e29a9c bert_keras | tar -x -C /tmp/base
    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/run_all.py --sections gemm gemm-bf16 minilm-full minilm-full-bf16 \
        --lengths-peers ours keras-nlp torch --rounds 3 --repeats 8 --quiet 0.1 --wait-idle 5 \
        --baseline-tree /tmp/base --output benchmarks/results/encoder_speed.md

Each worker records the share of the cores other processes used during each timed step (from /proc/stat
and its own CPU time); the tables report it, since on a shared machine it decides the absolute figures.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "worker.py")
sys.path.insert(0, HERE)
from worker import busy_cpu_seconds  # noqa: E402 - the one /proc/stat reader (worker.py imports numpy only at the top)

MODELS = {
    "minilm": dict(layers=6, hidden=384, intermediate=1536),
    "base": dict(layers=12, hidden=768, intermediate=3072),
}

# Variants: label -> (worker peer, extra worker args, TF_ENABLE_ONEDNN_OPTS or None for unset).
VARIANTS = {
    "ours": ("ours", [], None),
    "ours (padded)": ("ours", ["--no-pack"], None),
    "ours, oneDNN off": ("ours", [], "0"),
    "ours + XLA": ("ours", ["--jit"], None),
    "keras-nlp": ("kerasnlp", [], None),
    "keras-nlp, oneDNN off": ("kerasnlp", [], "0"),
    "keras-nlp + XLA": ("kerasnlp", ["--jit"], None),
    "torch": ("torch", [], None),
    # bf16 sections: torch at its best, by autocast ("torch") or with bf16 weights, either attention.
    "torch, bf16 weights": ("torch", ["--torch-bf16-weights"], None),
    "torch, bf16 weights, eager attention": ("torch", ["--torch-bf16-weights", "--torch-attention", "eager"], None),
}
TORCH_BF16 = ["torch", "torch, bf16 weights", "torch, bf16 weights, eager attention"]
BEST_TORCH = "torch (best of its variants, per round)"

BASELINE = "ours @ baseline tree"

TARGETS = {  # section -> [(ours label, peer label, target ratio)]
    "minilm": [("ours", "keras-nlp", 1.4), ("ours", "torch", 1.2)],
    "minilm-full": [("ours", "keras-nlp", 1.15), ("ours", "torch", 1.15)],
    "minilm-full-bf16": [("ours", "keras-nlp", 1.2), ("ours", BEST_TORCH, 1.2)],
    "train": [("ours", "keras-nlp", 1.3)],
}


def forward_flops(model, batch, seq, tokens=None):
    """Multiply-adds x 2 of the encoder's matrix products (embedding lookups and elementwise ops excluded).

    `tokens`: the token rows the dense layers compute (default every position);
    the attention products always cover the padded `batch x seq x seq`.
    """
    c = MODELS[model]
    tokens = batch * seq if tokens is None else tokens
    dense = 2 * tokens * (4 * c["hidden"] ** 2 + 2 * c["hidden"] * c["intermediate"])
    attention = 2 * 2 * batch * seq * seq * c["hidden"]
    pooler = 2 * batch * c["hidden"] ** 2
    return c["layers"] * (dense + attention) + pooler


def run_worker(args, onednn, timeout=1200, worker=WORKER):
    env = dict(os.environ)
    env.pop("TF_ENABLE_ONEDNN_OPTS", None)
    if onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = onednn
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    command = [sys.executable, worker] + [str(a) for a in args]
    cwd = os.path.dirname(os.path.dirname(worker))
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    for line in result.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")


def cpu_description():
    """The CPU model name and its AVX-512 flags (what the absolute figures depend on)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = {flag for flag in value.split() if flag.startswith("avx512")}
    except OSError:
        pass
    return f"{model}; {' '.join(sorted(flags)) or 'no AVX-512'}"


def rotate(items, shift):
    shift %= len(items)
    return items[shift:] + items[:shift]


WAIT_IDLE = [0.0]  # --wait-idle: seconds to wait for a quiet machine before each process


def run_rounds(name, labels, make_args, rounds, log):
    """Runs every label once per round, rotating the order; returns label -> list of per-round results."""
    results = {label: [] for label in labels}
    for r in range(rounds):
        for label in rotate(list(labels), r):
            if WAIT_IDLE[0] > 0:
                wait_for_idle(WAIT_IDLE[0], log=log)
            args, onednn, worker = make_args(label)
            result = run_worker(args, onednn, worker=worker)
            results[label].append(result)
            median = statistics.median(result["seconds"])
            log(f"[{name}] round {r + 1}/{rounds} {label}: median {median:.3f} s/step")
    return results


QUIET = [None]  # --quiet: the largest share of the cores other processes may use during a step that counts


def quiet_steps(result):
    """The timed steps of one process during which other processes stayed under `--quiet` (all without it)."""
    seconds, others = result["seconds"], result.get("step_others")
    if QUIET[0] is None or not others:
        return seconds
    return [s for s, share in zip(seconds, others) if share <= QUIET[0]]


def summarise(results):
    """label -> dict(median over all (quiet) steps, per-round medians, the first result's extras, others' shares)."""
    summary = {}
    for label, per_round in results.items():
        steps = [quiet_steps(result) for result in per_round]
        counted = [s for kept in steps for s in kept] or [s for result in per_round for s in result["seconds"]]
        summary[label] = {
            "median": statistics.median(counted),
            # A round without a quiet step is nan: it drops out of the paired ratios.
            "rounds": [statistics.median(kept) if kept else float("nan") for kept in steps],
            "extra": {k: v for k, v in per_round[0].items()
                      if k not in ("seconds", "process_seconds", "step_others")},
            "others": [result.get("others_cpu_share", float("nan")) for result in per_round],
            "quiet": (sum(sum(share <= (QUIET[0] or 1.0) for share in result.get("step_others", []))
                          for result in per_round),
                      sum(len(result["seconds"]) for result in per_round)),
        }
    return summary


def add_best_of(summary, labels, best_label):
    """Adds `best_label`: per round, the fastest of `labels` (a peer at its best, chosen round by round)."""
    labels = [label for label in labels if label in summary]
    if len(labels) < 2:
        return
    rounds = []
    for r in range(len(summary[labels[0]]["rounds"])):
        counted = [summary[label]["rounds"][r] for label in labels if summary[label]["rounds"][r] == summary[label]["rounds"][r]]
        rounds.append(min(counted) if counted else float("nan"))
    fastest = min(labels, key=lambda label: summary[label]["median"])
    known = [r for r in rounds if r == r]
    summary[best_label] = {**summary[fastest], "rounds": rounds,
                           "median": statistics.median(known) if known else summary[fastest]["median"]}


def load_line(summary):
    """How busy other processes kept the machine while the peers were timed (by peer)."""
    parts, quiet = [], []
    for label, s in summary.items():
        shares = [share for share in s.get("others", []) if share == share]
        if shares and label != BEST_TORCH:
            parts.append(f"{label} {100 * min(shares):.0f}-{100 * max(shares):.0f}%")
            quiet.append(f"{label} {s['quiet'][0]}/{s['quiet'][1]}")
    if not parts:
        return []
    lines = ["- CPU time other processes used while each peer was timed (share of all cores, per-process "
             "range): " + "; ".join(parts)]
    if QUIET[0] is not None:
        lines.append(f"- Quiet steps (other processes at most {100 * QUIET[0]:.0f}% of the cores during the step), "
                     "the only ones counted: a round counts in a ratio only where both peers had quiet steps; "
                     "a peer without any quiet step shows the median of all its steps: " + "; ".join(quiet))
    return lines


def wait_for_idle(max_wait, threshold=0.15, log=None):
    """Waits (at most `max_wait` s) until other processes use under `threshold` of the cores over 2 s."""
    deadline = time.time() + max_wait
    while True:
        before = busy_cpu_seconds()
        time.sleep(2.0)
        if before is None:
            return
        share = (busy_cpu_seconds() - before) / (2.0 * os.cpu_count())
        if share < threshold or time.time() > deadline:
            if share >= threshold and log:
                log(f"machine still {100 * share:.0f}% busy after waiting {max_wait:.0f} s; measuring anyway")
            return


def paired_ratio(summary, ours, peer):
    """Median over rounds of (peer time / our time) in the same round, and its range (rounds where both count)."""
    ratios = [p / o for o, p in zip(summary[ours]["rounds"], summary[peer]["rounds"]) if o == o and p == p]
    if not ratios:
        return float("nan"), float("nan"), float("nan")
    return statistics.median(ratios), min(ratios), max(ratios)


def model_table(summary, batch, flops, peak, reference="ours"):
    """`flops`: a number, or a function of the peer's result extras (e.g. its computed tokens)."""
    lines = [
        f"| peer | median s/step | seq/s (median) | seq/s spread (per-process medians) | GFLOP/s computed | share of GEMM peak | {reference} vs this |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, s in summary.items():
        rate = batch / s["median"]
        known = [r for r in s["rounds"] if r == r] or [s["median"]]
        low, high = batch / max(known), batch / min(known)
        gflops = (flops(s["extra"]) if callable(flops) else flops) / s["median"] / 1e9
        ratio = ""
        if label != reference and reference in summary:
            r, lo, hi = paired_ratio(summary, reference, label)
            ratio = f"{r:.2f}x ({lo:.2f}-{hi:.2f})"
        lines.append(
            f"| {label} | {s['median']:.3f} | {rate:.1f} | {low:.1f}-{high:.1f} | {gflops:.0f} | "
            f"{100 * gflops / peak:.0f}% | {ratio} |"
        )
    return lines


def target_lines(section, summary):
    lines = []
    for ours, peer, target in TARGETS.get(section, []):
        if ours not in summary or peer not in summary:
            continue
        r, lo, hi = paired_ratio(summary, ours, peer)
        if r != r:
            lines.append(f"- target `{ours}` >= {target}x `{peer}`: **not measured** (no round where both had quiet steps)")
            continue
        verdict = "**met**" if r >= target else "**not met**"
        lines.append(f"- target `{ours}` >= {target}x `{peer}`: measured {r:.2f}x (rounds {lo:.2f}-{hi:.2f}): {verdict}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=None, help="write the markdown here as well")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the GEMM and MiniLM inference sections")
    parser.add_argument("--other-rounds", type=int, default=2, help="rounds of the other sections")
    parser.add_argument(
        "--baseline-tree", default=None,
        help="also time `ours` from this source tree (made with `git archive <commit> bert_keras | tar -x -C DIR`)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per process")
    parser.add_argument("--dtype", default="float32", choices=["float32", "mixed_bfloat16"],
                        help="dtype policy of the model sections (torch: bf16 autocast)")
    parser.add_argument("--gpu", action="store_true", help="say in the table that it was measured on a GPU")
    sections = ["gemm", "gemm-bf16", "minilm", "minilm-full", "minilm-full-bf16", "minilm-tweets", "base", "train",
                "savedmodel", "tokenize"]
    parser.add_argument("--sections", nargs="+", default=sections, choices=sections,
                        help="run only these sections (the shares of GEMM peak need `gemm` / `gemm-bf16` too)")
    parser.add_argument(
        "--bf16-peers", nargs="+", default=["ours", "keras-nlp"] + TORCH_BF16, choices=list(VARIANTS),
        help="peers of the minilm-full-bf16 section",
    )
    parser.add_argument("--minilm-peers", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument(
        "--lengths-peers", nargs="+", default=["ours", "ours (padded)", "keras-nlp", "torch"],
        choices=list(VARIANTS), help="peers of the minilm-full and minilm-tweets sections",
    )
    parser.add_argument(
        "--base-peers", nargs="+", default=["ours", "ours (padded)", "keras-nlp", "torch"],
        choices=list(VARIANTS),
    )
    parser.add_argument(
        "--train-peers", nargs="+", default=["ours", "ours (padded)", "keras-nlp", "torch"],
        choices=list(VARIANTS),
    )
    parser.add_argument(
        "--wait-idle", type=float, default=0.0,
        help="before each process, wait up to this many seconds until other processes use under 15%% of the cores",
    )
    parser.add_argument(
        "--quiet", type=float, default=None,
        help="count only the timed steps during which other processes used at most this share of the cores "
             "(e.g. 0.1; a process without such a step counts all of its steps)",
    )
    args = parser.parse_args()
    WAIT_IDLE[0] = args.wait_idle
    QUIET[0] = args.quiet
    started = time.time()

    def log(message):
        print(f"{time.time() - started:7.0f}s {message}", file=sys.stderr, flush=True)

    out = [
        "# bert_keras benchmarks",
        "",
        f"Command: `TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/run_all.py {shlex.join(sys.argv[1:])}`",
        "",
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} CPUs "
        f"({cpu_description()}), Python {platform.python_version()}. The machine is shared: other agents' jobs "
        "run on the same cores during the run (the load averages below), which is why the peers alternate and "
        "the ratios are the figures to read; absolute rates move with the load. "
        f"{args.rounds} rounds (GEMM, MiniLM inference) / {args.other_rounds} (other sections); each peer runs in its own process once per round (order rotating), "
        f"{args.repeats} timed steps per process after warm-up. Medians over all timed steps; spread = "
        "lowest-highest per-process median; ratios = median of per-round paired ratios (range). "
        "`oneDNN off`: `TF_ENABLE_ONEDNN_OPTS=0` in that process's environment (TensorFlow 2.21 turns its oneDNN "
        "kernels on by default on this AVX-512 CPU: the other peers run `_Mkl*` ops, see `benchmarks/profile_ops.py`); "
        "`+ XLA`: `model.compile(jit_compile=True)`. Keras peers time `predict_on_batch` / `train_on_batch`; "
        "torch times `model(**inputs)` under `inference_mode` / forward+backward+Adam step.",
        "",
        (f"Device: GPU (dtype {args.dtype})." if args.gpu else
         "**GPU: not yet measured** (no GPU on this machine; `benchmarks/gpu.sh` is the prepared script)."),
        "",
    ]
    def gemm_section(section, dtype):
        """The GEMM peak of `dtype`: the best per-process median of any library and shape."""
        labels = {"TF (default: oneDNN), 2048 x 2048 x 2048": ("tf", "2048,2048,2048", None)}
        if dtype == "float32":
            labels["TF, oneDNN off (Eigen), 2048 x 2048 x 2048"] = ("tf", "2048,2048,2048", "0")
        labels["TF (default: oneDNN), FFN shape 4096 x 384 x 1536"] = ("tf", "4096,384,1536", None)
        labels["torch, 2048 x 2048 x 2048"] = ("torch", "2048,2048,2048", None)
        labels["torch, FFN shape 4096 x 384 x 1536"] = ("torch", "4096,384,1536", None)
        results = run_rounds(
            section, list(labels),
            lambda label: (["gemm", labels[label][0], "--gemm-shape", labels[label][1], "--dtype", dtype,
                            "--repeats", 10, "--warmup", 3], labels[label][2], WORKER),
            args.rounds, log,
        )
        summary = summarise(results)
        name = "fp32" if dtype == "float32" else "bf16"
        lines = [f"## {name} GEMM peak", "", "| library, shape | GFLOP/s (median) | spread |", "|---|---:|---:|"]
        best = 0.0
        for label, s in summary.items():
            flops = s["extra"]["flops"]
            known = [r for r in s["rounds"] if r == r] or [s["median"]]
            best = max(best, flops / min(known) / 1e9)
            lines.append(f"| {label} | {flops / s['median'] / 1e9:.0f} | "
                         f"{flops / max(known) / 1e9:.0f}-{flops / min(known) / 1e9:.0f} |")
        lines += ["", f"{name} peak used for the shares below: **{best:.0f} GFLOP/s** (the best per-process median "
                  "of any library and shape).", *load_line(summary), ""]
        return lines, best

    peak, peak_bf16 = float("nan"), float("nan")
    if "gemm" in args.sections:
        lines, peak = gemm_section("gemm", "float32")
        out += lines
    if "gemm-bf16" in args.sections:
        lines, peak_bf16 = gemm_section("gemm-bf16", "mixed_bfloat16")
        out += lines

    baseline_worker = None
    if args.baseline_tree:
        # The same worker, importing bert_keras from another tree (e.g. `git archive <commit> bert_keras`).
        os.makedirs(os.path.join(args.baseline_tree, "benchmarks"), exist_ok=True)
        baseline_worker = os.path.join(args.baseline_tree, "benchmarks", "worker.py")
        shutil.copy(WORKER, baseline_worker)
        VARIANTS[BASELINE] = ("ours", [], None)

    def flush():  # partial results survive a later failure
        if args.output:
            os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
            with open(args.output, "w", encoding="utf-8") as f:
                f.write("\n".join(out) + "\n")

    flush()

    def model_section(section, title, model, batch, peers, task, rounds, lengths="ragged", dtype=None):
        dtype = dtype or args.dtype
        if baseline_worker and BASELINE not in peers:
            peers = [peers[0], BASELINE] + list(peers[1:])

        def make_args(label):
            peer, extra, onednn = VARIANTS[label]
            worker = baseline_worker if label == BASELINE else WORKER
            command = [task, peer, "--model", model, "--batch", batch, "--seq", 128, "--repeats", args.repeats]
            # 3 untimed steps: torch's bf16 autocast runs its first two steps 3-8x slower.
            return command + ["--dtype", dtype, "--lengths", lengths, "--warmup", 3] + extra, onednn, worker

        results = run_rounds(section, peers, make_args, rounds, log)
        summary = summarise(results)
        add_best_of(summary, TORCH_BF16, BEST_TORCH)

        def flops(extra):
            tokens = extra.get("computed_tokens")
            return forward_flops(model, batch, 128, tokens) * (3 if task == "train" else 1)

        section_peak = peak_bf16 if dtype == "mixed_bfloat16" else peak
        lines = [f"## {title}", "", *model_table(summary, batch, flops, section_peak), ""]
        if dtype == "mixed_bfloat16":
            lines.append(f"- Shares are of the **bf16** GEMM peak ({section_peak:.0f} GFLOP/s).")
        tokens = summary.get("ours", {}).get("extra", {}).get("computed_tokens")
        if tokens is not None:
            lines.append(f"- `ours` computes {tokens:,} of the {batch * 128:,} token rows "
                         f"({100 * tokens / (batch * 128):.1f}%: real tokens + the first position of each row)")
        lines += target_lines(section, summary)
        lines += load_line(summary)
        if "ours, oneDNN off" in summary and "keras-nlp, oneDNN off" in summary:
            r, lo, hi = paired_ratio(summary, "ours, oneDNN off", "keras-nlp, oneDNN off")
            lines.append(f"- `ours, oneDNN off` vs `keras-nlp, oneDNN off`: {r:.2f}x (rounds {lo:.2f}-{hi:.2f})")
        lines.append("")
        return lines

    minilm = "MiniLM-L6 (L6 H384 A12, real weights for ours and torch), fp32 inference, batch 32, seq 128"
    if "minilm" in args.sections:
        out += model_section("minilm", f"{minilm}, ragged rows",
                             "minilm", 32, args.minilm_peers, "infer", args.rounds)
        flush()
    if "minilm-full" in args.sections:
        out += model_section("minilm-full", f"{minilm}, no padding (100% real tokens)",
                             "minilm", 32, args.lengths_peers, "infer", args.rounds, lengths="full")
        flush()
    if "minilm-full-bf16" in args.sections:
        bf16 = minilm.replace("fp32 inference", "bf16 inference (Keras `mixed_bfloat16`; torch autocast or bf16 weights)")
        out += model_section("minilm-full-bf16", f"{bf16}, no padding (100% real tokens)",
                             "minilm", 32, args.bf16_peers, "infer", args.rounds, lengths="full",
                             dtype="mixed_bfloat16")
        flush()
    if "minilm-tweets" in args.sections:
        out += model_section("minilm-tweets", f"{minilm}, the first 32 tweets of the corpus padded to 128",
                             "minilm", 32, args.lengths_peers, "infer", args.other_rounds, lengths="tweets")
        flush()
    if "base" in args.sections:
        out += model_section("base", "BERT-Base (L12 H768 A12, random weights), fp32 inference, batch 8, seq 128, ragged rows",
                             "base", 8, args.base_peers, "infer", args.other_rounds)
        flush()
    if "train" in args.sections:
        out += model_section("train", "Training step: MiniLM-L6 + 2-class head, Adam, batch 32, seq 128, ragged rows (dropout 0.1)",
                             "minilm", 32, args.train_peers, "train", args.other_rounds)
        flush()
    if "savedmodel" in args.sections:
        directory = tempfile.mkdtemp(prefix="bert_keras_bench_")
        path = os.path.join(directory, "encoder")
        try:
            run_worker(["export", "ours", "--path", path], None)
            labels = {"in-memory encoder (tf.function)": "memory", "exported Hub SavedModel (hub.load)": "hub"}
            results = run_rounds(
                "savedmodel", list(labels),
                lambda label: (["savedmodel", labels[label], "--path", path, "--repeats", args.repeats], None, WORKER),
                args.other_rounds, log,
            )
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        summary = summarise(results)
        out += ["## Exported Hub SavedModel vs in-memory encoder (MiniLM-L6, batch 32, seq 128, fp32, defaults)", ""]
        out += model_table(summary, 32, lambda extra: forward_flops("minilm", 32, 128, extra.get("computed_tokens")),
                           peak, reference="in-memory encoder (tf.function)")
        out.append("")
        flush()
    if "tokenize" in args.sections:
        log("[tokenize] running tokenize_benchmark.py")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        result = subprocess.run(
            [sys.executable, os.path.join(HERE, "tokenize_benchmark.py")],
            env=env, capture_output=True, text=True, cwd=ROOT,
        )
        out += ["## Tokenisation (tweets corpus; from `benchmarks/tokenize_benchmark.py`)", ""]
        if result.returncode:
            out += ["Failed:", "", "```", result.stderr[-2000:], "```", ""]
        else:
            out += [result.stdout.strip(), ""]
    log("done")
    print("\n".join(out))
    flush()


if __name__ == "__main__":
    main()
