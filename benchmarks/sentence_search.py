"""Sentence embeddings on real data: exact search over the 38,158 tweets, and a classifier on frozen embeddings.

1. `build_index` (what `bert-keras index` runs) embeds all 38,158 tweets with
   all-MiniLM-L6-v2; the index is opened from disk and searched (what
   `bert-keras search` runs): latency of the first query after opening and of
   warm queries (embedding and search apart), and recall@10 of the index's
   search against a float64 brute force over the same vectors.
2. How far exact search goes: one query against n random unit vectors of the
   same dimension held in memory (a matrix product and a top-k), for n up to
   a few million.
3. Frozen embeddings + logistic regression on the demo's split (the 4,998
   training and 1,999 test tweets of `bert-keras demo`; the regularisation
   chosen on its validation tweets), beside TF-IDF + logistic regression on
   the same tweets, and on the whole 80% training split.

    python benchmarks/sentence_search.py --output benchmarks/results/sentence_search.md
"""

import argparse
import os
import re
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402


def _cpu():
    with open("/proc/cpuinfo") as f:
        text = f.read()
    model = re.search(r"model name\s*:\s*(.*)", text)
    flags = sorted(set(re.findall(r"avx512_bf16|avx512_vnni|avx512f|amx_bf16|avx2", text)))
    return f"{model.group(1) if model else 'unknown CPU'}, {os.cpu_count()} cores; {' '.join(flags)}"


def _ms(seconds):
    return f"{seconds * 1000:.1f}"


def search_figures(model, texts, queries, directory):
    from bert_keras.search import build_index, load_index

    started = time.perf_counter()
    build_index(model, texts, os.path.join(directory, "index"), batch_size=64)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    index = load_index(os.path.join(directory, "index"))
    open_s = time.perf_counter() - started
    started = time.perf_counter()
    index.search(model.encode([queries[0]]), top_k=10)
    first_s = time.perf_counter() - started
    embed_s, search_s = [], []
    for query in queries:
        started = time.perf_counter()
        vector = model.encode([query])
        embed_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        index.search(vector, top_k=10)
        search_s.append(time.perf_counter() - started)
    vectors = np.asarray(index.vectors, dtype="float64")
    query_vectors = model.encode(queries)
    found, _ = index.search(query_vectors, top_k=10)
    exact_scores = query_vectors.astype("float64") @ vectors.T  # (queries, count)
    tenth = -np.partition(-exact_scores, 9, axis=1)[:, 9:10]  # (queries, 1): the exact 10th best score
    # A text counts when its exact score reaches the 10th best (less 1e-6: float32 rounding); among equal scores
    # (the corpus holds duplicate tweets) any of them is a right answer.
    recall = float(np.mean(np.take_along_axis(exact_scores, found, axis=1) >= tenth - 1e-6))
    embedded = dict(zip(index.texts, np.asarray(index.vectors)))  # reused by the classifiers
    return embedded, dict(count=index.count, build_s=build_s, open_s=open_s, first_s=first_s, embed_ms=statistics.median(embed_s) * 1000,
                search_ms=statistics.median(search_s) * 1000, recall=recall, queries=len(queries))


def scale_figures(sizes, dimension, repeats=5):
    rng = np.random.default_rng(0)
    rows = []
    for size in sizes:
        vectors = rng.standard_normal((size, dimension), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        query = vectors[:1] + 0.01
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            scores = (query @ vectors.T)[0]  # (size,)
            top = np.argpartition(-scores, 10)[:10]
            top[np.argsort(-scores[top])]
            times.append(time.perf_counter() - started)
        rows.append((size, vectors.nbytes / 2 ** 30, statistics.median(times) * 1000))
        del vectors
    return rows


def classification_figures(embedded):
    from sklearn.linear_model import LogisticRegression

    from bert_keras.demo import DemoConfig, baselines, load_tweet_splits
    from bert_keras.evaluate import classification_scores

    results, vectors = {}, embedded
    for name, config in (("demo split", DemoConfig()), ("whole 80% training split", DemoConfig(full=True))):
        train, validation, test = load_tweet_splits(config, print)
        embedded = {part: np.stack([vectors[text] for text in data.texts]) for part, data in
                    (("train", train), ("validation", validation), ("test", test))}
        best = max((LogisticRegression(max_iter=3000, C=c).fit(embedded["train"], train.labels).score(embedded["validation"], validation.labels), c)
                   for c in (0.1, 1.0, 10.0))
        classifier = LogisticRegression(max_iter=3000, C=best[1]).fit(embedded["train"], train.labels)
        one_hot = np.eye(len(train.label_names))[classifier.predict(embedded["test"])]
        results[name] = dict(sizes=(len(train), len(test)), C=best[1], frozen=classification_scores(test.labels, one_hot, len(train.label_names)),
                             tfidf=baselines(train, test)["TF-IDF 1-2 grams + logistic regression"])
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--sizes", default="38158,100000,1000000,4000000")
    parser.add_argument("--output", default="benchmarks/results/sentence_search.md")
    args = parser.parse_args()

    from bert_keras.tasks.sentence_encoder import SentenceEncoder
    from bert_keras.text.corpora import load_tweets, minilm_vocab_path

    folder = os.path.dirname(minilm_vocab_path())
    model = SentenceEncoder.from_checkpoint(folder)
    texts, _ = load_tweets()
    rng = np.random.default_rng(1)
    queries = [texts[i] for i in rng.choice(len(texts), args.queries, replace=False)]
    with tempfile.TemporaryDirectory() as directory:
        embedded, search = search_figures(model, texts, queries, directory)
    print(search, flush=True)
    scale = scale_figures([int(size) for size in args.sizes.split(",")], model.embedding_dim)
    print(scale, flush=True)
    classes = classification_figures(embedded)
    print(classes, flush=True)

    lines = [
        "# Sentence embeddings on real data: search and frozen-embedding classification",
        "",
        f"`python benchmarks/sentence_search.py --queries {args.queries} --sizes {args.sizes}`; {_cpu()}.",
        "all-MiniLM-L6-v2 (`SentenceEncoder.from_checkpoint`, float32) on the demo's tweets.",
        "",
        "## Exact search over the 38,158 tweets",
        "",
        f"The index built by `build_index` (`bert-keras index`), opened from disk; {search['queries']} tweets of the corpus as",
        "queries. recall@10: the share of the index's 10 results whose float64 brute-force score reaches the exact",
        "10th best (duplicate tweets tie: any of them counts).",
        "",
        "| tweets | build (embed + write) s | open s | first query after opening ms | embed one query ms (median) | search ms (median) | recall@10 |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {search['count']:,} | {search['build_s']:.0f} | {search['open_s']:.2f} | {_ms(search['first_s'])} | "
        f"{search['embed_ms']:.1f} | {search['search_ms']:.1f} | {search['recall']:.3f} |",
        "",
        "## How far exact search goes",
        "",
        "One query against n random unit vectors of dimension 384 in memory: one matrix product and a top-10",
        "(median of 5).",
        "",
        "| vectors | memory GB | ms per query |",
        "| ---: | ---: | ---: |",
    ]
    lines += [f"| {size:,} | {gigabytes:.2f} | {milliseconds:.1f} |" for size, gigabytes, milliseconds in scale]
    lines += [
        "",
        "## A classifier on frozen embeddings",
        "",
        "Logistic regression on the embeddings (C chosen among 0.1, 1, 10 on the split's validation tweets) and",
        "TF-IDF word 1-2 grams + logistic regression (the demo's baseline), trained and scored on the same tweets.",
        "",
        "| split (train / test tweets) | model | test accuracy | macro-F1 |",
        "| --- | --- | ---: | ---: |",
    ]
    for name, result in classes.items():
        split = f"{name} ({result['sizes'][0]:,} / {result['sizes'][1]:,})"
        lines.append(f"| {split} | frozen MiniLM embeddings + logistic regression (C={result['C']:g}) | "
                     f"{result['frozen']['accuracy']:.4f} | {result['frozen']['macro_f1']:.4f} |")
        lines.append(f"| {split} | TF-IDF + logistic regression | {result['tfidf']['accuracy']:.4f} | {result['tfidf']['macro_f1']:.4f} |")
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
