"""Parity of ModernBertEncoder and ModernBERT's raw-string workflow against transformers (docs/family.md).

The tiny random `ModernBertModel` of tests/checkpoints/test_modernbert.py (3 layers, width 64, a global layer then
two local ones, windows of 8 tokens, 512 positions), saved by transformers 5:
1. ids: a padded batch of lengths 5, 23, 40, 12, and rows of 512 and 300 tokens; `sequence_output` and every
   block's output against `last_hidden_state` / `hidden_states`, eager and sdpa attention, over real tokens;
2. raw strings: the same model with a ModernBERT-kind tokenizer trained on 3,000 tweets (byte-level BPE, NFC,
   `[CLS] $A [SEP]`), the last 1,000 tweets and the edge cases of tests/text/test_modernbert_tokenizer.py through
   `SentenceEncoder.from_checkpoint(pooling="mean", max_seq_length=64)` against transformers' tokenizer and model;
3. one text of ~1,400 tokens with ModernBERT's own 128-token windows and 2,048 positions.

Run (from the repository root; needs the test extras):

    TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=. python benchmarks/modernbert_parity.py
"""

import pathlib
import tempfile

import numpy as np
import torch
import transformers

from bert_keras.models.modernbert import ModernBertEncoder
from bert_keras.tasks.sentence_encoder import SentenceEncoder
from bert_keras.text.corpora import load_tweets
from tests.checkpoints.test_modernbert import ours, padded_batch, reference, save_modernbert, save_modernbert_tokenizer
from tests.text.test_modernbert_tokenizer import EDGE_CASES

root = pathlib.Path(tempfile.mkdtemp())
save_modernbert(root / "ids")
encoder = ModernBertEncoder.from_checkpoint(str(root / "ids"))
for name, lengths, seed in (("lengths 5/23/40/12", [5, 23, 40, 12], 0), ("512 and 300 tokens", [512, 300], 1)):
    ids, mask = padded_batch(lengths, seed=seed)
    got, real = ours(encoder, ids, mask), mask.astype(bool)
    for implementation in ("eager", "sdpa"):
        expected = reference(root / "ids", ids, mask, implementation)
        sequence = np.abs(np.asarray(got["sequence_output"]) - expected.last_hidden_state.numpy())[real].max()
        blocks = max(np.abs(np.asarray(h) - expected.hidden_states[i + 1].numpy())[real].max()
                     for i, h in enumerate(got["encoder_outputs"][:-1]))
        print(f"{name}, {implementation}: sequence_output {sequence:.1e}, blocks {blocks:.1e}")


def mean_pooled(model, tokenizer, texts, max_length):
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return ((hidden * mask).sum(1) / mask.sum(1)).numpy(), batch["input_ids"].numpy()


tweets = load_tweets()[0]
size, vocab = save_modernbert_tokenizer(root / "text")
specials = dict(pad_token_id=vocab["[PAD]"], cls_token_id=vocab["[CLS]"], sep_token_id=vocab["[SEP]"])
model = save_modernbert(root / "text", vocab_size=size + 11, **specials).eval()
tokenizer = transformers.AutoTokenizer.from_pretrained(str(root / "text"))
texts = [t for t in tweets[-1000:] + EDGE_CASES if t]  # the reference cannot mean-pool an empty row of no tokens
sentence_encoder = SentenceEncoder.from_checkpoint(str(root / "text"), pooling="mean", max_seq_length=64)
got = np.concatenate([np.asarray(sentence_encoder(np.array(texts[i:i + 100]))) for i in range(0, len(texts), 100)])
expected, expected_ids = mean_pooled(model, tokenizer, texts, 64)
packed = sentence_encoder.preprocessor(np.array(texts))["input_word_ids"].numpy()[:, :expected_ids.shape[1]]
print(f"{len(texts)} texts: ids equal {np.mean(np.all(packed == expected_ids, axis=1)):.1%}, "
      f"mean-pooled max abs difference {np.abs(got - expected).max():.1e}")

long_model = save_modernbert(root / "long", vocab_size=size, local_attention=128, max_position_embeddings=2048,
                             **specials).eval()
transformers.AutoTokenizer.from_pretrained(str(root / "text")).save_pretrained(str(root / "long"))
text = " ".join(tweets[5000:5024])
expected, ids = mean_pooled(long_model, tokenizer, [text], 2048)
got = np.asarray(SentenceEncoder.from_checkpoint(str(root / "long"), pooling="mean", max_seq_length=2048)([text]))
print(f"one text of {ids.shape[1]} tokens, 128-token windows: mean-pooled max abs difference "
      f"{np.abs(got - expected).max():.1e}")
