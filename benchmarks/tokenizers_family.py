"""Speed of the family's in-graph tokenizers (SentencePiece for ALBERT, byte-level BPE for RoBERTa) against the references.

Tiny tokenizers are trained on the first 10,000 tweets (as in tests/text/test_sentencepiece.py and
test_byte_bpe.py); the last 20,000 tweets are tokenized, in batches of `--batch` texts, once each (one run, after
one warm-up batch that traces the functions). Contenders: `BytePairTokenizer` against transformers'
`RobertaTokenizerFast` (Rust, batch call) on the same vocab.json / merges.txt; `SentencePieceTokenizer` against
ALBERT's definition run in Python (its preprocessing, then the `sentencepiece` library's `encode`; transformers 5
cannot read a spiece.model in this environment). keras-hub's `RobertaTokenizer` and `AlbertTokenizer` on the same
files run twice, as a keras-hub user meets them: in a graph (`tf.function`, which is what `tf.data.Dataset.map` or a
Keras model runs: its TensorFlow path) and eagerly (since keras-hub 0.32 an eager call takes its Python path:
`tokenizers` for BPE, `sentencepiece` for SentencePiece); keras-hub's rows read "not installed" without it. Prints a
markdown table: texts/s and the share of ids equal. keras-hub's `AlbertTokenizer` leaves out ALBERT's preprocessing
(lower-casing, accents): a last row gives it the text preprocessed beforehand, to compare its segmentation.

Run (from the repository root; needs the test extras):

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/tokenizers_family.py
"""

import argparse
import io
import os
import subprocess
import tempfile
import time
import unicodedata

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import sentencepiece as spm  # noqa: E402
import tensorflow as tf  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402

from bert_keras.text import BytePairTokenizer, SentencePieceTokenizer  # noqa: E402
from bert_keras.text.corpora import load_tweets  # noqa: E402

try:  # optional contender (installed with keras-nlp); the benchmark runs without it
    import keras_hub  # noqa: E402
except ImportError:
    keras_hub = None

SPECIAL_BPE = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def albert_reference_text(text):
    """ALBERT's `preprocess_text`, uncased (as tests/text/test_sentencepiece.py's reference)."""
    text = " ".join(text.strip().split()).replace("``", '"').replace("''", '"')
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).lower()


def timed(function, batches):
    started = time.perf_counter()
    ids = [row for batch in batches for row in function(batch)]
    return time.perf_counter() - started, ids


def ours(tokenizer):
    """Tokenizes in the graph; the ids come back as lists by splitting the flat values at each text's first piece,
    read from the two levels of row splits with numpy (`RaggedTensor.to_list()` of the nested `(batch, words,
    pieces)` took 30 times as long as the tokenization, and an eager `merge_dims(1, 2)` 1.4 ms a call, more than
    the tokenization of one text)."""

    def run(batch):
        ids = tokenizer.tokenize(tf.constant(batch))
        text_starts = ids.values.row_splits.numpy()[ids.row_splits.numpy()]
        return [row.tolist() for row in np.split(ids.flat_values.numpy(), text_starts[1:-1])]

    return run


def keras_hub_graph(tokenizer):
    """keras-hub's TensorFlow path: the layer called inside a `tf.function` (an eager call takes its Python path)."""
    graph = tf.function(tokenizer, input_signature=[tf.TensorSpec([None], tf.string)])

    def run(batch):
        ids = graph(tf.constant(batch))
        return [row.tolist() for row in np.split(ids.flat_values.numpy(), ids.row_splits.numpy()[1:-1])]

    return run


def keras_hub_eager(tokenizer):
    """keras-hub's eager call on a string tensor; it returns the ids as lists."""
    return lambda batch: tokenizer(tf.constant(batch))


def keras_hub_rows(make_tokenizer, name, batches, ref_ids):
    """Two rows (graph, eager) for one keras-hub tokenizer, or "not installed" rows; one warm-up call each."""
    if keras_hub is None:
        return [("", f"keras-hub {name} (graph)", None, None), ("", f"keras-hub {name} (eager)", None, None)]
    rows = []
    for mode, wrap in (("graph", keras_hub_graph), ("eager", keras_hub_eager)):
        run = wrap(make_tokenizer())
        run(batches[0][:8])
        seconds, ids = timed(run, batches)
        rows.append(("", f"keras-hub {name} ({mode})", seconds, share_equal(ids, ref_ids)))
    return rows


def latency(make_run, texts):
    """One text at a time: `(first call after construction, median of the others)` in milliseconds."""
    run = make_run()
    started = time.perf_counter()
    run([texts[0]])
    first = time.perf_counter() - started
    times = []
    for text in texts[1:]:
        started = time.perf_counter()
        run([text])
        times.append(time.perf_counter() - started)
    return 1000 * first, 1000 * float(np.median(times))


def share_equal(ids, ref_ids):
    return sum(a == b for a, b in zip(ids, ref_ids, strict=True)) / len(ref_ids)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--texts", type=int, default=20_000)
    parser.add_argument("--single", type=int, default=200, help="tweets tokenized one per call, for latency")
    args = parser.parse_args()
    tweets = load_tweets()[0]
    train, texts = tweets[:10_000], tweets[-args.texts:]
    batches = [texts[i:i + args.batch] for i in range(0, len(texts), args.batch)]
    rows, latencies = [], []
    single = texts[: args.single + 1]
    with tempfile.TemporaryDirectory() as folder:
        trainer = tokenizers.ByteLevelBPETokenizer()
        trainer.train_from_iterator(train, vocab_size=2000, min_frequency=2, special_tokens=SPECIAL_BPE,
                                    show_progress=False)
        trainer.save_model(folder)
        bpe = BytePairTokenizer.from_folder(folder)
        roberta = transformers.RobertaTokenizerFast.from_pretrained(folder)
        bpe.tokenize(tf.constant(batches[0][:8]))  # traces
        ours_time, ours_ids = timed(ours(bpe), batches)
        ref_time, ref_ids = timed(
            lambda b: roberta(b, add_special_tokens=False, split_special_tokens=True)["input_ids"], batches
        )
        rows.append(("RoBERTa byte-level BPE", "bert_keras BytePairTokenizer (graph)", ours_time,
                     share_equal(ours_ids, ref_ids)))
        rows.append(("", "transformers RobertaTokenizerFast", ref_time, 1.0))
        rows += keras_hub_rows(
            lambda: keras_hub.tokenizers.RobertaTokenizer(
                vocabulary=os.path.join(folder, "vocab.json"), merges=os.path.join(folder, "merges.txt")
            ),
            "RobertaTokenizer", batches, ref_ids,
        )
        latencies.append(("bert_keras BytePairTokenizer (graph)",
                          latency(lambda: ours(BytePairTokenizer.from_folder(folder)), single)))
        latencies.append(("transformers RobertaTokenizerFast", latency(
            lambda: lambda b: roberta(b, add_special_tokens=False, split_special_tokens=True)["input_ids"], single)))
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([albert_reference_text(t) for t in train if t.strip()]), model_writer=model,
        vocab_size=2000, model_type="unigram", pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2, num_threads=1,
    )
    albert = SentencePieceTokenizer(model.getvalue())
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    albert.tokenize(tf.constant(batches[0][:8]))
    ours_time, ours_ids = timed(ours(albert), batches)
    ref_time, ref_ids = timed(lambda b: [processor.encode(albert_reference_text(t)) for t in b], batches)
    rows.append(("ALBERT SentencePiece", "bert_keras SentencePieceTokenizer (graph)", ours_time,
                 share_equal(ours_ids, ref_ids)))
    rows.append(("", "ALBERT's Python preprocessing + sentencepiece", ref_time, 1.0))
    rows += keras_hub_rows(
        lambda: keras_hub.tokenizers.AlbertTokenizer(proto=model.getvalue()), "AlbertTokenizer", batches, ref_ids
    )
    if keras_hub is not None:
        # Its segmentation alone: the text given already preprocessed as ALBERT does it (not timed).
        run = keras_hub_graph(keras_hub.tokenizers.AlbertTokenizer(proto=model.getvalue()))
        prepared = [[albert_reference_text(t) for t in batch] for batch in batches]
        run(prepared[0][:8])
        seconds, ids = timed(run, prepared)
        rows.append(("", "keras-hub AlbertTokenizer (graph), text preprocessed beforehand", seconds,
                     share_equal(ids, ref_ids)))
    latencies.append(("bert_keras SentencePieceTokenizer (graph)",
                      latency(lambda: ours(SentencePieceTokenizer(model.getvalue())), single)))
    latencies.append(("ALBERT's Python preprocessing + sentencepiece",
                      latency(lambda: lambda b: [processor.encode(albert_reference_text(t)) for t in b], single)))
    if keras_hub is not None:
        latencies.append(("keras-hub AlbertTokenizer (graph)", latency(
            lambda: keras_hub_graph(keras_hub.tokenizers.AlbertTokenizer(proto=model.getvalue())), single)))

    cpu = subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True).stdout.split(":")[-1]
    print(f"{len(texts):,} tweets, batches of {args.batch}, one run; CPU: {cpu.strip()}, {os.cpu_count()} cores\n")
    print("| tokenizer | implementation | texts/s | ids equal to the reference |")
    print("|---|---|---:|---:|")
    for family, name, seconds, share in rows:
        if seconds is None:
            print(f"| {family} | {name} | not installed | not installed |")
        else:
            print(f"| {family} | {name} | {len(texts) / seconds:,.0f} | {share:.2%} |")
    print(f"\nOne text per call ({args.single} tweets after a first call on a fresh tokenizer):\n")
    print("| implementation | first call, ms | median, ms |")
    print("|---|---:|---:|")
    for name, (first, median) in latencies:
        print(f"| {name} | {first:,.1f} | {median:.2f} |")


if __name__ == "__main__":
    main()
