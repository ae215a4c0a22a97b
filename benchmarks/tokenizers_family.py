"""Speed of the family's in-graph tokenizers (SentencePiece for ALBERT, byte-level BPE for RoBERTa) against the references.

Tiny tokenizers are trained on the first 10,000 tweets (as in tests/text/test_sentencepiece.py and
test_byte_bpe.py); the last 20,000 tweets are tokenized, in batches of `--batch` texts, once each (one run, after
one warm-up batch that traces the functions). Contenders: `BytePairTokenizer` against transformers'
`RobertaTokenizerFast` (Rust, batch call) on the same vocab.json / merges.txt; `SentencePieceTokenizer` against
ALBERT's definition run in Python (its preprocessing, then the `sentencepiece` library's `encode`; transformers 5
cannot read a spiece.model in this environment). Prints a markdown table: texts/s and the share of ids equal.

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
    """Tokenizes in the graph; the ids come back as lists by splitting the flat values (`RaggedTensor.to_list()`
    of the nested `(batch, words, pieces)` took 30 times as long as the tokenization)."""

    def run(batch):
        ids = tokenizer.tokenize(tf.constant(batch)).merge_dims(1, 2)
        return [row.tolist() for row in np.split(ids.flat_values.numpy(), ids.row_splits.numpy()[1:-1])]

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--texts", type=int, default=20_000)
    args = parser.parse_args()
    tweets = load_tweets()[0]
    train, texts = tweets[:10_000], tweets[-args.texts:]
    batches = [texts[i:i + args.batch] for i in range(0, len(texts), args.batch)]
    rows = []
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
        equal = sum(a == b for a, b in zip(ours_ids, ref_ids)) / len(texts)
        rows.append(("RoBERTa byte-level BPE", "bert_keras BytePairTokenizer (graph)", ours_time, equal))
        rows.append(("", "transformers RobertaTokenizerFast", ref_time, 1.0))
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
    equal = sum(a == b for a, b in zip(ours_ids, ref_ids)) / len(texts)
    rows.append(("ALBERT SentencePiece", "bert_keras SentencePieceTokenizer (graph)", ours_time, equal))
    rows.append(("", "ALBERT's Python preprocessing + sentencepiece", ref_time, 1.0))

    cpu = subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True, text=True).stdout.split(":")[-1]
    print(f"{len(texts):,} tweets, batches of {args.batch}, one run; CPU: {cpu.strip()}, {os.cpu_count()} cores\n")
    print("| tokenizer | implementation | texts/s | ids equal to the reference |")
    print("|---|---|---:|---:|")
    for family, name, seconds, share in rows:
        print(f"| {family} | {name} | {len(texts) / seconds:,.0f} | {share:.2%} |")


if __name__ == "__main__":
    main()
