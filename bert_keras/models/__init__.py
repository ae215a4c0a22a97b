"""Encoders of other families than BERT's, each its own functional Keras model with the Hub contract.

`DebertaV3Encoder` (`models.deberta`): DeBERTa-v3's disentangled attention over log-bucketed relative positions.
`ModernBertEncoder` (`models.modernbert`): ModernBERT's pre-norm blocks with rotary positions, GeGLU, and
alternating global and sliding-window attention (in bands on long inputs).
"""

from bert_keras.models.deberta import DebertaV3Encoder
from bert_keras.models.modernbert import ModernBertEncoder

__all__ = ["DebertaV3Encoder", "ModernBertEncoder"]
