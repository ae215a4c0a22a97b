"""Reusable Keras 3 layers that BERT and ModernBERT are built from."""

from bert_keras.layers.attention import MultiHeadSelfAttention, attention_bias_from_mask
from bert_keras.layers.deberta_block import DebertaBlock, DebertaEmbeddings
from bert_keras.layers.disentangled_attention import DisentangledSelfAttention
from bert_keras.layers.dropout import Dropout
from bert_keras.layers.embeddings import BertEmbeddings, SinusoidalPositionEncoding
from bert_keras.layers.encoder_block import TransformerEncoderBlock
from bert_keras.layers.feed_forward import FeedForward
from bert_keras.layers.geglu import GatedFeedForward
from bert_keras.layers.modernbert_block import (
    ModernBertBlock,
    ModernBertEmbeddings,
    RotarySelfAttention,
    SlidingWindowBias,
    sliding_window_bias,
)
from bert_keras.layers.packing import PackedTokenIndex, PackTokens, UnpackTokens
from bert_keras.layers.prediction_transform import PredictionTransform
from bert_keras.layers.relative_positions import RelativeEmbeddings, RelativePositionBuckets, log_bucket_positions
from bert_keras.layers.rotary import RotaryEmbedding

__all__ = [
    "DebertaBlock", "DebertaEmbeddings", "DisentangledSelfAttention", "RelativeEmbeddings", "RelativePositionBuckets",
    "log_bucket_positions",
    "BertEmbeddings",
    "Dropout",
    "FeedForward",
    "GatedFeedForward",
    "ModernBertBlock",
    "ModernBertEmbeddings",
    "MultiHeadSelfAttention",
    "PackTokens",
    "PackedTokenIndex",
    "PredictionTransform",
    "RotaryEmbedding",
    "RotarySelfAttention",
    "SinusoidalPositionEncoding",
    "SlidingWindowBias",
    "TransformerEncoderBlock",
    "UnpackTokens",
    "attention_bias_from_mask",
    "sliding_window_bias",
]
