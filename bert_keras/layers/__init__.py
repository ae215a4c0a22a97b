"""Reusable Keras 3 layers that BERT is built from."""

from bert_keras.layers.attention import MultiHeadSelfAttention, attention_bias_from_mask
from bert_keras.layers.embeddings import BertEmbeddings, SinusoidalPositionEncoding
from bert_keras.layers.encoder_block import TransformerEncoderBlock
from bert_keras.layers.feed_forward import FeedForward

__all__ = [
    "BertEmbeddings",
    "FeedForward",
    "MultiHeadSelfAttention",
    "SinusoidalPositionEncoding",
    "TransformerEncoderBlock",
    "attention_bias_from_mask",
]
