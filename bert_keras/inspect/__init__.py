"""Inside BERT: attention maps, per-layer statistics and probes, and a page to look at them.

`Inspector` runs texts through a `BertEncoder` (from any checkpoint or Hub
module `load_checkpoint` reads) and returns the attention probabilities of
every head and the hidden states of every layer, with the WordPiece tokens.
`AttentionStatistics` and `probe` measure where attention goes and what each
layer encodes; `bert_keras.inspect.page` and `bert_keras.inspect.plots` write
the HTML page and the PNGs (matplotlib and scikit-learn: the `inspect` extra,
imported only where used).
"""

from bert_keras.inspect.inspector import Inspection, Inspector
from bert_keras.inspect.probing import linear_probes, pooled_features, probe
from bert_keras.inspect.statistics import STATISTICS, AttentionStatistics, is_punctuation

__all__ = [
    "STATISTICS",
    "AttentionStatistics",
    "Inspection",
    "Inspector",
    "is_punctuation",
    "linear_probes",
    "pooled_features",
    "probe",
]
