"""Sentence embeddings: bert_keras' SentenceEncoder against sentence-transformers and keras-hub's BertTextEmbedder.

All three read the same all-MiniLM-L6-v2 folder (installed by the demo / test
extra) and embed the same tweets at the same batch size, in one process,
alternating round by round. For each: the time to load, the first pass after
loading (tracing included: what a user waits for), the warm passes
(texts/s, median of the rounds), and the largest difference of its vectors
from sentence-transformers'. The machine's speed can drift within a run, so
the table also gives each round's seconds and the ratio to the faster peer
taken round by round (each model's pass beside the peers' passes of the same
round), whose median does not move with a drift between rounds.

    python benchmarks/sentence_embeddings.py --texts 2000 --batch-size 32 --rounds 3 \
        --output benchmarks/results/sentence_embeddings.md
"""

import argparse
import os
import platform
import re
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402


def _cpu():
    with open("/proc/cpuinfo") as f:
        text = f.read()
    model = re.search(r"model name\s*:\s*(.*)", text)
    flags = sorted(set(re.findall(r"avx512_bf16|avx512_vnni|avx512f|amx_bf16|avx2", text)))
    return f"{model.group(1) if model else platform.processor()}, {os.cpu_count()} cores; {' '.join(flags)}"


def _peers(folder, batch_size):
    """name -> (load() -> model, encode(model, texts) -> float32 array)."""

    def sentence_transformers():
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(os.cpu_count())
        return SentenceTransformer(folder, device="cpu")

    def keras_hub():
        import keras_hub

        return keras_hub.models.BertTextEmbedder.from_preset(folder)

    def ours(dtype):
        def load():
            from bert_keras.tasks.sentence_encoder import SentenceEncoder

            return SentenceEncoder.from_checkpoint(folder, dtype=dtype)

        return load

    def one_batch_at_a_time(model, texts):
        from bert_keras import embedder

        embedder.BATCHES_PER_CALL = 1
        try:
            return model.encode(texts, batch_size=batch_size)
        finally:
            embedder.BATCHES_PER_CALL = 2

    return {
        "sentence-transformers 6 (torch)": (sentence_transformers, lambda m, t: m.encode(t, batch_size=batch_size)),
        "keras-hub BertTextEmbedder": (keras_hub, lambda m, t: np.asarray(m.encode_documents(t, batch_size=batch_size, verbose=0))),
        "bert_keras SentenceEncoder float32": (ours(None), lambda m, t: m.encode(t, batch_size=batch_size)),
        "bert_keras SentenceEncoder float32, one batch at a time": (ours(None), one_batch_at_a_time),
        "bert_keras SentenceEncoder bfloat16": (ours("mixed_bfloat16"), lambda m, t: m.encode(t, batch_size=batch_size)),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default="benchmarks/results/sentence_embeddings.md")
    args = parser.parse_args()

    from bert_keras.text.corpora import load_tweets, minilm_vocab_path

    folder = os.path.dirname(minilm_vocab_path())
    texts = load_tweets()[0][: args.texts]
    peers = _peers(folder, args.batch_size)
    models, load_s, first_s, warm_s, vectors = {}, {}, {}, {name: [] for name in peers}, {}
    for name, (load, encode) in peers.items():
        started = time.perf_counter()
        models[name] = load()
        load_s[name] = time.perf_counter() - started
        started = time.perf_counter()
        vectors[name] = np.asarray(encode(models[name], texts), dtype="float32")
        first_s[name] = time.perf_counter() - started
        print(f"{name}: loaded in {load_s[name]:.1f} s, first pass {first_s[name]:.1f} s", flush=True)
    for round_ in range(args.rounds):
        for name, (_, encode) in peers.items():
            started = time.perf_counter()
            encode(models[name], texts)
            warm_s[name].append(time.perf_counter() - started)
            print(f"round {round_ + 1}: {name} {warm_s[name][-1]:.2f} s", flush=True)

    reference = vectors["sentence-transformers 6 (torch)"]
    speed = {name: len(texts) / statistics.median(values) for name, values in warm_s.items()}
    peer_names = [name for name in peers if not name.startswith("bert_keras")]
    peer_best = max(speed[name] for name in peer_names)
    faster_peer_s = [min(warm_s[name][r] for name in peer_names) for r in range(args.rounds)]  # per round
    round_ratio = {name: statistics.median(faster_peer_s[r] / warm_s[name][r] for r in range(args.rounds)) for name in peers}
    lines = [
        "# Sentence embeddings: speed and agreement",
        "",
        f"`python benchmarks/sentence_embeddings.py --texts {args.texts} --batch-size {args.batch_size} --rounds {args.rounds}`;",
        f"{_cpu()}. all-MiniLM-L6-v2 on the first {len(texts)} tweets of the demo's data, batch {args.batch_size},",
        "one process, the models alternating round by round. *first pass*: the first `encode` of all texts after",
        "loading (tracing included); *texts/s*: the median of the warm rounds; *vs faster peer*: texts/s over the",
        "faster of sentence-transformers and keras-hub; *per round*: the median over the rounds of the faster",
        "peer's seconds in that round over this model's (robust to the machine's speed drifting between rounds);",
        "*max abs diff*: the largest difference of any vector component from sentence-transformers' (the vectors",
        "are L2-normalised). Every batch holds the batch size's texts; `SentenceEncoder.encode` runs two batches",
        "at once (`BATCHES_PER_CALL`), the *one batch at a time* row one after the other, as the peers do.",
        "",
        "| model | load s | first pass s | warm rounds s | texts/s (warm) | vs faster peer | per round | max abs diff from sentence-transformers |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in peers:
        difference = float(np.max(np.abs(vectors[name] - reference)))
        rounds = " / ".join(f"{seconds:.1f}" for seconds in warm_s[name])
        lines.append(f"| {name} | {load_s[name]:.1f} | {first_s[name]:.1f} | {rounds} | {speed[name]:.0f} | "
                     f"{speed[name] / peer_best:.2f}x | {round_ratio[name]:.2f}x | {difference:.2e} |")
    float32, bfloat16 = vectors["bert_keras SentenceEncoder float32"], vectors["bert_keras SentenceEncoder bfloat16"]
    lines += ["", f"bfloat16 against float32 (both bert_keras, the same texts): max abs diff "
                  f"{float(np.max(np.abs(bfloat16 - float32))):.2e}, smallest cosine similarity of a text's two vectors "
                  f"{float(np.min(np.sum(bfloat16 * float32, axis=1))):.6f}."]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
