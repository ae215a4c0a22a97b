"""Reusable Keras 3 layers that BERT is built from."""

from bert_keras.layers.attention import MultiHeadSelfAttention, attention_bias_from_mask
from bert_keras.layers.dropout import Dropout
from bert_keras.layers.embeddings import BertEmbeddings, SinusoidalPositionEncoding
from bert_keras.layers.encoder_block import TransformerEncoderBlock
from bert_keras.layers.feed_forward import FeedForward
from bert_keras.layers.packing import PackedTokenIndex, PackTokens, UnpackTokens

__all__ = [
    "BertEmbeddings",
    "Dropout",
    "FeedForward",
    "MultiHeadSelfAttention",
    "PackTokens",
    "PackedTokenIndex",
    "SinusoidalPositionEncoding",
    "TransformerEncoderBlock",
    "UnpackTokens",
    "attention_bias_from_mask",
]
