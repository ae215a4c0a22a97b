"""Encode speed of XLM-RoBERTa, DeBERTa-v3 and ModernBERT: ours against transformers on torch, in the same run (issue 57).

Per family, a model of MiniLM's size (6 layers, hidden 384, 12 heads, intermediate 1536; ModernBERT: GeGLU 2 x 1536,
a full-attention layer every third from the first, 128-token windows between; DeBERTa-v3: 256 log buckets over 512
relative positions, shared keys, as the real v3 configs) of transformers' own classes with seeded random weights
(perturbed: LayerNorms not ones), beside a tokenizer of the family's real kind trained here on tweets (the
XLM-RoBERTa Unigram and the DeBERTa-v3 SentencePiece of 8,000 pieces, ModernBERT's byte-level BPE of the tests),
saved with `save_pretrained` into one temporary folder that both contenders read.

The clock: raw strings in, mean-pooled embeddings out, every text at least 128 tokens and cut to 128 (tweets joined;
no padding), batch 1 and batch 32.
- ours: `SentenceEncoder.from_checkpoint(folder, pooling="mean", max_seq_length=128).encode(texts, batch_size=B)`
  (in-graph tokenization, the encoder, the pooling);
- transformers: `AutoTokenizer` (the `tokenizers` library on the same tokenizer.json) with `truncation=True,
  max_length=128`, `AutoModel` (default attention), mean pooling, under `torch.inference_mode()`,
  `torch.set_num_threads(2)` (and a second run with 1 thread).
Each contender runs in its own worker process per family and round (which goes first alternates with the round):
warm-up calls, then `--repeats` timed calls of batch 32 and four times as many of batch 1. Reported: the median
seconds per call and the faster transformers / ours (> 1: ours is faster; transformers with 2 threads and with 1,
since two spinning threads collapse on a loaded 2-core machine), the median of the per-round ratios with their
range, and the largest difference of the embeddings (a check that both computed the same thing).

Run (from the repository root; needs the test extras):

    TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=. python benchmarks/family_encode.py [--rounds 2] [--repeats 3]

puts its section on top of benchmarks/results/family_encode.md (earlier runs stay below it).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from run_all import cpu_description  # noqa: E402 - the one description of the CPU the benchmarks print

FAMILIES = ("xlm-roberta", "deberta-v3", "modernbert")
# "transformers, 1 thread" beside the 2 threads asked for: on a shared 2-core machine two spinning OpenMP threads
# collapse whenever another job holds a core (benchmarks/long_documents.py saw the same).
CONTENDERS = ("ours", "transformers", "transformers, 1 thread")
SEQ = 128
BATCHES = (1, 32)
TORCH_THREADS = 2
MINILM = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)


def _tweets():
    from bert_keras.text.corpora import load_tweets

    return list(load_tweets()[0])


def save_family(name, folder, tweets, seed=0):
    """The family's tokenizer and a seeded random model of transformers' own class, saved into `folder`."""
    import torch
    import transformers

    from tests.checkpoints._models import perturb_torch
    from tests.test_family_workflows import ACCENTED

    torch.manual_seed(seed)
    if name == "xlm-roberta":
        from tests.test_family_workflows import write_unigram_tokenizer

        vocab_size = write_unigram_tokenizer(folder, tweets, size=8000)
        model = transformers.XLMRobertaModel(transformers.XLMRobertaConfig(
            **MINILM, vocab_size=vocab_size, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
            layer_norm_eps=1e-5))
    elif name == "deberta-v3":
        from tests.text.deberta_tokenizers import write_deberta_tokenizer

        vocab_size = write_deberta_tokenizer(folder, tweets[:3000] + ACCENTED * 20, size=8000)
        model = transformers.DebertaV2Model(transformers.DebertaV2Config(
            **MINILM, vocab_size=vocab_size, relative_attention=True, position_buckets=256,
            max_relative_positions=512, pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm",
            position_biased_input=False, type_vocab_size=0, max_position_embeddings=512, hidden_act="gelu",
            layer_norm_eps=1e-7, pad_token_id=0))
    else:
        from tests.checkpoints.test_modernbert import save_modernbert_tokenizer

        vocab_size, vocab = save_modernbert_tokenizer(folder)
        specials = dict(pad_token_id=vocab["[PAD]"], cls_token_id=vocab["[CLS]"], sep_token_id=vocab["[SEP]"],
                        bos_token_id=vocab["[CLS]"], eos_token_id=vocab["[SEP]"])
        model = transformers.ModernBertModel(transformers.ModernBertConfig(
            **MINILM, vocab_size=vocab_size, global_attn_every_n_layers=3, local_attention=128,
            max_position_embeddings=8192, **specials))
    perturb_torch(model, seed=seed)
    model.save_pretrained(str(folder))


def long_texts(folder, tweets, count):
    """`count` texts of consecutive tweets joined until each is at least SEQ tokens long (cut to SEQ: no padding)."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    texts, start = [], 0
    while len(texts) < count:
        end = start + 1
        while len(tokenizer(" ".join(tweets[start:end]))["input_ids"]) < SEQ:
            end += 1
        texts.append(" ".join(tweets[start:end]))
        start = end
    return texts


# --- the contenders (each in its own process) --------------------------------------------------------------------
def _ours(folder):
    from bert_keras.tasks.sentence_encoder import SentenceEncoder

    encoder = SentenceEncoder.from_checkpoint(folder, pooling="mean", max_seq_length=SEQ)
    return lambda texts: np.asarray(encoder.encode(texts, batch_size=len(texts)))


def _transformers(folder, threads):
    import torch
    import transformers

    torch.set_num_threads(threads)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModel.from_pretrained(folder).eval()

    def encode(texts):
        with torch.inference_mode():
            batch = tokenizer(texts, padding=True, truncation=True, max_length=SEQ, return_tensors="pt")
            hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            return ((hidden * mask).sum(1) / mask.sum(1)).numpy()

    return encode


def worker(args):
    with open(args.texts, encoding="utf-8") as f:
        texts = json.load(f)
    if args.worker == "ours":
        encode = _ours(args.folder)
    else:
        encode = _transformers(args.folder, 1 if args.worker.endswith("1 thread") else TORCH_THREADS)
    result = {"seconds": {}}
    for batch in BATCHES:
        chunk = texts[:batch]
        for _ in range(args.warmup):
            encode(chunk)
        times = []
        for i in range(args.repeats * (4 if batch == 1 else 1)):
            chunk = [texts[(i * batch + j) % len(texts)] for j in range(batch)]
            start = time.perf_counter()
            encode(chunk)
            times.append(time.perf_counter() - start)
        result["seconds"][str(batch)] = times
    result["embeddings"] = encode(texts[:32]).tolist()
    print("RESULT " + json.dumps(result), flush=True)


def run_worker(contender, folder, texts_path, args):
    command = [sys.executable, os.path.abspath(__file__), "--worker", contender, "--folder", folder,
               "--texts", texts_path, "--repeats", str(args.repeats), "--warmup", str(args.warmup)]
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{contender} on {folder} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _load_average():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _commit():
    """The checked-out commit, and whether tracked files under bert_keras/ differ from it (what the figures measured)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "bert_keras"],
                           cwd=ROOT).returncode
    return head.strip() + (" (with uncommitted changes under bert_keras/)" if dirty else "")


TITLE = "# Encode speed of the three families: ours against transformers on torch"


def write_table(results, args, load_before, commit_before, path):
    """The run's section, put on top of the sections of earlier runs already in `path`."""
    import tensorflow as tf
    import torch
    import transformers

    families = " ".join(args.families)
    lines = [
        f"## Run of {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC at commit {commit_before}"
        + ("" if _commit() == commit_before else f" (at its end: {_commit()}; the tree is shared)"),
        "",
        f"Command: `TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=. python benchmarks/family_encode.py --rounds {args.rounds} "
        f"--repeats {args.repeats}" + ("" if list(args.families) == list(FAMILIES) else f" --families {families}") +
        f"` ({args.warmup} warm-up call(s), then {args.repeats} timed calls of batch 32 and "
        f"{4 * args.repeats} of batch 1 in "
        f"each worker process; one process per contender, family and round, which contender goes first rotating "
        f"with the round).",
        "",
        f"Machine: {cpu_description()}, {os.cpu_count()} cores, shared with other jobs (load average {load_before} "
        f"before the run, {_load_average()} after it): absolute times move with the load, the ratios of the same "
        f"round are the figures to read. Python {platform.python_version()}, TensorFlow {tf.__version__}, torch "
        f"{torch.__version__} ({TORCH_THREADS} threads), transformers {transformers.__version__}.",
        "",
        "Models: MiniLM's size (6 layers, hidden 384, 12 heads, intermediate 1536) of transformers' own classes, "
        "seeded random weights, tokenizers of each family's kind trained here on tweets (Unigram / SentencePiece "
        "8,000 pieces, ModernBERT's byte-level BPE 400), saved with `save_pretrained`. Clock: raw strings to "
        "mean-pooled embeddings, every text 128 tokens (tweets joined, cut to 128). Ours: `SentenceEncoder."
        "from_checkpoint(folder, pooling='mean', max_seq_length=128).encode`; transformers: `AutoTokenizer` + "
        "`AutoModel` (default attention) + mean pooling under `inference_mode`.",
        "",
        "| family | batch | ours (s/call) | transformers, 2 threads (s/call) | transformers, 1 thread (s/call) | "
        "best transformers / ours (rounds) | max abs diff of the embeddings |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    one = "transformers, 1 thread"
    for family, rows in results.items():
        for batch in BATCHES:
            key = str(batch)
            median = {name: statistics.median([t for r in rows[name] for t in r["seconds"][key]]) for name in CONTENDERS}
            # Per round: the faster transformers of that round against ours of that round.
            ratios = [min(statistics.median(b["seconds"][key]), statistics.median(c["seconds"][key])) /
                      statistics.median(a["seconds"][key])
                      for a, b, c in zip(rows["ours"], rows["transformers"], rows[one])]
            lines.append(f"| {family} | {batch} | {median['ours']:.4f} | {median['transformers']:.4f} | "
                         f"{median[one]:.4f} | {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) "
                         f"| {rows['diff']:.1e} |")
    lines += ["", "Ratios above 1: ours is faster (the faster transformers run of the same round over ours)."]
    earlier = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            earlier = f.read()
        earlier = earlier[len(TITLE):].strip() if earlier.startswith(TITLE) else earlier.strip()
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join([TITLE, "", "Newest run first.", ""] + lines) + "\n")
        if earlier:
            f.write("\n" + earlier + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--output", default=os.path.join(HERE, "results", "family_encode.md"))
    parser.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--texts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    load_before, commit_before = _load_average(), _commit()
    tweets = _tweets()
    root = tempfile.mkdtemp(prefix="family_encode_")
    results = {}
    for family in args.families:
        folder = os.path.join(root, family)
        os.makedirs(folder)
        save_family(family, folder, tweets)
        texts_path = os.path.join(folder, "texts.json")
        with open(texts_path, "w", encoding="utf-8") as f:
            json.dump(long_texts(folder, tweets[3000:], 64), f)
        rows = {name: [] for name in CONTENDERS}
        for round_ in range(args.rounds):
            for contender in CONTENDERS[round_ % len(CONTENDERS):] + CONTENDERS[:round_ % len(CONTENDERS)]:
                rows[contender].append(run_worker(contender, folder, texts_path, args))
                print(f"{family} round {round_ + 1} {contender}: " + ", ".join(
                    f"batch {b} {statistics.median(rows[contender][-1]['seconds'][str(b)]):.4f} s"
                    for b in BATCHES), flush=True)
        rows["diff"] = float(np.abs(np.array(rows["ours"][0]["embeddings"]) -
                                    np.array(rows["transformers"][0]["embeddings"])).max())
        results[family] = rows
    write_table(results, args, load_before, commit_before, args.output)
    print(f"Wrote {args.output}")


if __name__ == "__main__":
    main()
