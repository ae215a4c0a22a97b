"""Where exact search gives way to an approximate index: bert_keras' exact search against faiss on the same vectors.

1. The tweets: all-MiniLM-L6-v2 embeds the 38,158 tweets; 500 of them,
   drawn at random, are the queries and the other 37,658 the index
   (`bert_keras.search.build_index`, what `bert-keras index` writes).
   For each method: the time to build it, the median latency of one query
   (a vector in, ten rows out; the query's embedding, the same for all, is not
   counted), and recall@10 against a float64 brute force (a row counts when
   its exact score reaches the exact 10th best, less 1e-6: the corpus holds
   duplicate tweets). Methods: `SentenceIndex.search` (exact, matrix products),
   faiss' `IndexFlatIP` (exact), `IndexHNSWFlat` (M 32) at several efSearch,
   `IndexIVFFlat` at several nprobe.
2. One million random unit vectors of the same dimension: exact search (one
   matrix product and a top-k, as `SentenceIndex.search` does) against an IVF
   index. Random vectors have no clusters, the worst case for IVF: its recall
   here is a lower bound for real embeddings, whose recall part 1 gives.

With `--scann-python PYTHON`, ScaNN (a tree of partitions, asymmetric hashing
and exact reordering) is measured on the same vectors too, in a process of
that interpreter: ScaNN 1.4.2 loads its TensorFlow ops on import, built for
TensorFlow 2.20, and fails beside TensorFlow 2.21 (an undefined absl symbol),
so it runs from an environment of its own without TensorFlow
(`python3 -m venv scann && scann/bin/pip install numpy protobuf && scann/bin/pip install --no-deps scann`).

faiss is not a dependency of bert_keras: `pip install faiss-cpu` to run this.

    python benchmarks/approximate_search.py --scann-python scann/bin/python \
        --output benchmarks/results/approximate_search.md
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

QUERIES = 500
K = 10


def _cpu():
    with open("/proc/cpuinfo") as f:
        text = f.read()
    model = re.search(r"model name\s*:\s*(.*)", text)
    flags = sorted(set(re.findall(r"avx512_bf16|avx512_vnni|avx512f|amx_bf16|avx2", text)))
    return f"{model.group(1) if model else 'unknown CPU'}, {os.cpu_count()} cores; {' '.join(flags)}"


def recall_at_k(found, queries, vectors):
    """Share of the `found` rows (q, K) whose exact float64 score reaches the exact K-th best (ties count)."""
    exact = queries.astype("float64") @ vectors.astype("float64").T  # (q, n)
    kth = -np.partition(-exact, K - 1, axis=1)[:, K - 1 : K]  # (q, 1)
    return float(np.mean(np.take_along_axis(exact, found, axis=1) >= kth - 1e-6))


def median_ms(search, queries):
    """Median milliseconds of `search(one query (1, dim))` over the queries (the first, a warm-up, left out)."""
    search(queries[:1])
    times = []
    for row in range(len(queries)):
        started = time.perf_counter()
        search(queries[row : row + 1])
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def faiss_rows(faiss, vectors, queries, label):
    """[(method, build s, median ms, recall@10)] of faiss' exact, HNSW and IVF indexes over `vectors`."""
    dimension = vectors.shape[1]
    rows = []

    def measure(name, index, build_s, settings=((None, None),)):
        for setting, apply in settings:
            if apply is not None:
                apply(index, setting)
            found = index.search(queries, K)[1]
            shown = name if setting is None else f"{name}, {setting}"
            rows.append((label, shown, build_s, median_ms(lambda q: index.search(q, K), queries), recall_at_k(found, queries, vectors)))

    started = time.perf_counter()
    flat = faiss.IndexFlatIP(dimension)
    flat.add(vectors)
    measure("faiss IndexFlatIP (exact)", flat, time.perf_counter() - started)

    if len(vectors) <= 100_000:  # HNSW's build over a million vectors takes longer on 2 cores than this script should
        started = time.perf_counter()
        hnsw = faiss.IndexHNSWFlat(dimension, 32, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = 80
        hnsw.add(vectors)
        build_s = time.perf_counter() - started
        efs = [(f"efSearch {ef}", lambda index, s: setattr(index.hnsw, "efSearch", int(s.split()[-1]))) for ef in (16, 64, 256)]
        measure("faiss IndexHNSWFlat (M 32)", hnsw, build_s, efs)

    lists = int(4 * np.sqrt(len(vectors)))
    started = time.perf_counter()
    quantizer = faiss.IndexFlatIP(dimension)
    ivf = faiss.IndexIVFFlat(quantizer, dimension, lists, faiss.METRIC_INNER_PRODUCT)
    sample = vectors[np.random.default_rng(0).permutation(len(vectors))[: min(len(vectors), 64 * lists)]]
    ivf.train(sample)
    ivf.add(vectors)
    build_s = time.perf_counter() - started
    probes = [(f"nprobe {p}", lambda index, s: setattr(index, "nprobe", int(s.split()[-1]))) for p in (4, 16, 64)]
    measure(f"faiss IndexIVFFlat ({lists} lists)", ivf, build_s, probes)
    return rows


# Run by `--scann-python`: builds ScaNN's index over VECTORS, times one query at a time, saves the rows it found.
SCANN_CHILD = """
import json, statistics, sys, time
import numpy as np
import scann

vectors, queries, out, k, leaves = np.load(sys.argv[1]), np.load(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
started = time.perf_counter()
searcher = (scann.scann_ops_pybind.builder(vectors, k, "dot_product")
            .tree(num_leaves=leaves, num_leaves_to_search=max(1, leaves // 12), training_sample_size=min(len(vectors), 250000))
            .score_ah(2, anisotropic_quantization_threshold=0.2).reorder(10 * k).build())
build_s = time.perf_counter() - started
results = []
for search_leaves in (max(1, leaves // 50), max(1, leaves // 12), max(1, leaves // 4)):
    searcher.search(queries[0], leaves_to_search=search_leaves)
    times, found = [], []
    for row in range(len(queries)):
        started = time.perf_counter()
        neighbours, _ = searcher.search(queries[row], leaves_to_search=search_leaves)
        times.append(time.perf_counter() - started)
        found.append(np.asarray(neighbours, dtype=np.int64)[:k])
    np.save(f"{out}-{search_leaves}.npy", np.stack(found))
    results.append(dict(search_leaves=search_leaves, build_s=build_s, ms=statistics.median(times) * 1000))
print(json.dumps(dict(version=getattr(scann, "__version__", "1.4.2"), results=results)))
"""


def scann_rows(python, vectors, queries, label, directory):
    """[(method, build s, median ms, recall@10)] of ScaNN over `vectors`, run by the interpreter `python`."""
    paths = [os.path.join(directory, name) for name in ("scann-vectors.npy", "scann-queries.npy")]
    np.save(paths[0], vectors)
    np.save(paths[1], queries)
    leaves = int(np.sqrt(len(vectors)))
    out = os.path.join(directory, "scann-found")
    done = subprocess.run([python, "-c", SCANN_CHILD, *paths, out, str(K), str(leaves)], capture_output=True, text=True,
                          check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    rows = []
    for result in report["results"]:
        found = np.load(f"{out}-{result['search_leaves']}.npy")
        rows.append((label, f"ScaNN {report['version']} (tree {leaves} leaves, AH, reorder {10 * K}), "
                     f"{result['search_leaves']} leaves searched", result["build_s"], result["ms"],
                     recall_at_k(found, queries, vectors)))
    return rows


def tweet_rows(faiss, directory, scann_python=None):
    from bert_keras.search import build_index, load_index
    from bert_keras.tasks.sentence_encoder import SentenceEncoder
    from bert_keras.text.corpora import load_tweets, minilm_vocab_path

    model = SentenceEncoder.from_checkpoint(os.path.dirname(minilm_vocab_path()))
    texts, _ = load_tweets()
    order = np.random.default_rng(0).permutation(len(texts))
    query_texts = [texts[i] for i in order[:QUERIES]]
    indexed = [texts[i] for i in sorted(order[QUERIES:])]
    started = time.perf_counter()
    build_index(model, indexed, os.path.join(directory, "index"), batch_size=64)
    embed_s = time.perf_counter() - started
    index = load_index(os.path.join(directory, "index"))
    vectors = np.array(index.vectors, dtype="float32")  # a copy: the index maps its file read-only
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = np.ascontiguousarray(model.encode(query_texts).astype("float32"))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    label = f"{len(indexed):,} tweets"
    found = index.search(queries, top_k=K)[0]
    rows = [(label, "bert_keras SentenceIndex.search (exact)", embed_s,
             median_ms(lambda q: index.search(q, top_k=K), queries), recall_at_k(found, queries, vectors))]
    rows += faiss_rows(faiss, vectors, queries, label)
    if scann_python:
        rows += scann_rows(scann_python, vectors, queries, label, directory)
    return rows, len(indexed)


def random_rows(faiss, size, dimension, scann_python=None):
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((size, dimension), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((100, dimension), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    label = f"{size:,} random vectors"

    def exact(query):  # what SentenceIndex.search computes: one matrix product, a partition, a sort of the K best
        scores = (query @ vectors.T)[0]
        top = np.argpartition(-scores, K)[:K]
        return top[np.argsort(-scores[top])]

    found = np.stack([exact(queries[i : i + 1]) for i in range(len(queries))])
    rows = [(label, "exact (matrix product + top-k, numpy)", 0.0, median_ms(exact, queries), recall_at_k(found, queries, vectors))]
    rows += [row for row in faiss_rows(faiss, vectors, queries, label) if "IVF" in row[1]]
    if scann_python:
        with tempfile.TemporaryDirectory() as directory:
            rows += scann_rows(scann_python, vectors, queries, label, directory)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", help="write the Markdown table here (default: print it)")
    parser.add_argument("--random-size", type=int, default=1_000_000)
    parser.add_argument("--scann-python", help="an interpreter with ScaNN installed (see the docstring): measure ScaNN too")
    args = parser.parse_args()
    try:
        import faiss
    except ImportError:
        parser.error("faiss is not installed: pip install faiss-cpu")
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as directory:
        rows, indexed = tweet_rows(faiss, directory, args.scann_python)
    rows += random_rows(faiss, args.random_size, 384, args.scann_python)
    lines = [
        "# Exact search, faiss and ScaNN on the same vectors",
        "",
        f"`python benchmarks/approximate_search.py{' --scann-python ...' if args.scann_python else ''}` on {_cpu()}; "
        f"faiss {faiss.__version__}, {os.cpu_count()} threads.",
        f"{QUERIES} tweets drawn at random are the queries, the other {indexed:,} the index (all-MiniLM-L6-v2, float32);",
        "one query at a time, its embedding not counted; recall@10 against a float64 brute force. Build: for",
        "bert_keras, embedding the tweets and writing the index; for faiss and ScaNN, adding (and training) over the vectors.",
        "Random vectors have no clusters, the worst case for IVF (and for ScaNN's tree)."
        + (" ScaNN ran in its own environment (no TensorFlow), one query at a time, single-threaded." if args.scann_python else ""),
        "",
        "| vectors | method | build s | median ms per query | recall@10 |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [f"| {data} | {method} | {build:.1f} | {ms:.2f} | {recall:.4f} |" for data, method, build, ms, recall in rows]
    table = "\n".join(lines) + "\n"
    if args.output:
        with open(args.output, "w") as f:
            f.write(table)
    print(table)


if __name__ == "__main__":
    main()
