"""The examples in the docstrings of bert_keras.text run and show what they claim."""

import doctest

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras.text import BertPreprocessor, data, packer, preprocessor, tokenizer


@pytest.mark.parametrize("module", [tokenizer, packer, preprocessor, data], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    example_preprocessor = BertPreprocessor(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad"])
    globs = dict(vars(module), tf=tf, keras=keras, np=np, preprocessor=example_preprocessor)
    results = doctest.testmod(module, globs=globs, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert results.failed == 0 and results.attempted >= 2
