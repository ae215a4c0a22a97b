"""In-graph text preprocessing with tensorflow-text: tokenizer, packer, preprocessor, tf.data."""

from bert_keras.text.data import preprocess_dataset
from bert_keras.text.packer import BertPacker, pack_inputs
from bert_keras.text.preprocessor import BertPreprocessor
from bert_keras.text.tokenizer import WordPieceTokenizer, load_vocabulary, normalize_text

__all__ = [
    "BertPacker",
    "BertPreprocessor",
    "WordPieceTokenizer",
    "load_vocabulary",
    "normalize_text",
    "pack_inputs",
    "preprocess_dataset",
]
