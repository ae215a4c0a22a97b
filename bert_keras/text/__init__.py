"""In-graph text preprocessing with tensorflow-text: tokenizers (WordPiece, SentencePiece, byte-level BPE: one
`Tokenizer` base, `tokenizer_class(kind)` the one registry), packer, preprocessor, tf.data.

The names below load on first use: `bert_keras.text.corpora` (paths of the
offline vocabulary and tweets) imports without TensorFlow.
"""

import importlib

_HOMES = {
    "preprocess_dataset": "bert_keras.text.data",
    "BertPacker": "bert_keras.text.packer",
    "pack_inputs": "bert_keras.text.packer",
    "BertPreprocessor": "bert_keras.text.preprocessor",
    "BytePairTokenizer": "bert_keras.text.byte_bpe",
    "DebertaV3Tokenizer": "bert_keras.text.deberta_tokenizer",
    "SentencePieceTokenizer": "bert_keras.text.sentencepiece",
    "TOKENIZER_KINDS": "bert_keras.text.kinds",
    "Tokenizer": "bert_keras.text.base",
    "tokenizer_class": "bert_keras.text.kinds",
    "preprocess_albert_text": "bert_keras.text.sentencepiece",
    "UnigramTokenizer": "bert_keras.text.unigram_tokenizer",
    "WordPieceTokenizer": "bert_keras.text.tokenizer",
    "tokenizer_from_folder": "bert_keras.text.folders",
    "load_vocabulary": "bert_keras.text.tokenizer",
    "normalize_text": "bert_keras.text.tokenizer",
}

__all__ = sorted(_HOMES)


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module 'bert_keras.text' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__():
    return sorted(set(globals()) | set(_HOMES))
