"""Encoders of other families than BERT's, each its own functional Keras model with the Hub contract.

`DebertaV3Encoder` (`models.deberta`): DeBERTa-v3's disentangled attention over log-bucketed relative positions.
"""

from bert_keras.models.deberta import DebertaV3Encoder

__all__ = ["DebertaV3Encoder"]
