"""Inside BERT: attention maps, per-layer statistics and probes, and a page to look at them.

`Inspector` runs texts through a `BertEncoder` (from any checkpoint or Hub
module `load_checkpoint` reads) and returns the attention probabilities of
every head and the hidden states of every layer, with the model's tokens
(WordPiece, ALBERT's SentencePiece or RoBERTa's byte-level BPE pieces).
`AttentionStatistics` and `probe` measure where attention goes and what each
layer encodes; `bert_keras.inspection.page` and `bert_keras.inspection.plots` write
the HTML page and the PNGs (matplotlib and scikit-learn: the `inspect` extra,
imported only where used).
"""

from bert_keras.inspection.inspector import Inspection, Inspector
from bert_keras.inspection.probing import attention_statistics, linear_probes, pooled_features, probe
from bert_keras.inspection.statistics import STATISTICS, AttentionStatistics, is_punctuation, piece_text

__all__ = [
    "STATISTICS",
    "AttentionStatistics",
    "Inspection",
    "Inspector",
    "attention_statistics",
    "is_punctuation",
    "linear_probes",
    "piece_text",
    "pooled_features",
    "probe",
]
