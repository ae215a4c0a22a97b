"""Parity of the family's raw-string workflows against transformers (docs/family.md).

Per family, the tiny random transformers model of tests/test_family_workflows.py, saved with its tokenizer (trained
on 3,000 tweets), takes the last 1,000 tweets and the tests' edge cases as raw strings: `BertClassifier.from_checkpoint`'s
preprocessor and encoder, and `SentenceEncoder.from_checkpoint(pooling="mean")`. Reference: transformers' model fed
transformers' tokenizer's ids (ALBERT: ALBERT's definition with the sentencepiece library). Prints one line a family.

Run (from the repository root; needs the test extras):

    TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=. python benchmarks/family_parity.py
"""

import pathlib
import sys
import tempfile

import numpy as np

from tests import test_family_workflows as t
from bert_keras.tasks import BertClassifier
from bert_keras.tasks.sentence_encoder import SentenceEncoder
from bert_keras.text.corpora import load_tweets

tweets = [x.decode("utf-8", errors="replace") for x in load_tweets(raw=True)[0]]
texts = tweets[-1000:] + t.EDGE_CASES
root = pathlib.Path(tempfile.mkdtemp())
for name in sys.argv[1:] or sorted(t.FAMILIES):
    model = t.make_family_folder(name, root / name, tweets)
    folder = str(root / name)
    classifier = BertClassifier.from_checkpoint(folder, num_classes=2, seq_length=t.SEQ)
    packed = classifier.preprocessor(np.array(texts))
    ids, mask = t.reference_ids(name, folder, texts)
    equal = (np.asarray(packed["input_word_ids"]) == ids).all(1)
    seq = np.asarray(classifier.encoder(packed)["sequence_output"])
    ref = t.reference_outputs(model, ids, mask)
    # Outputs compared where the ids are equal (ALBERT's others are equal-score reorders of the same pieces).
    real = mask.astype(bool) & equal[:, None]
    emb = np.asarray(SentenceEncoder.from_checkpoint(folder, pooling="mean", max_seq_length=t.SEQ).encode(texts))
    print(f"{name}: ids equal {equal.mean():.2%} of {len(texts)}; on those, sequence_output max diff "
          f"{np.abs(seq[real] - ref[real]).max():.1e}, mean-pooled (SentenceEncoder) "
          f"{np.abs(emb[equal] - t.mean_pool(ref, mask)[equal]).max():.1e}", flush=True)
