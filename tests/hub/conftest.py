import os

import numpy as np
import pytest

from bert_keras import BertEncoder
from bert_keras.export import export_encoder, export_preprocessor
from tests.helpers import hub_inputs

WORDS = ["the", "movie", "was", "great", "bad", "good", "terrible", "fun", "boring", "i", "loved", "hated", "it", "!", "."]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["##s", "##ed", "##ing"]
TINY = dict(vocab_size=len(VOCAB), num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=64)


@pytest.fixture(scope="session")
def hub_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hub")


@pytest.fixture(scope="session")
def vocab_file(hub_dir):
    path = os.path.join(hub_dir, "vocab.txt")
    with open(path, "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    return path


@pytest.fixture(scope="session")
def tiny_encoder():
    import keras

    keras.utils.set_random_seed(7)
    return BertEncoder(**TINY, dropout=0.1, attention_dropout=0.1)


@pytest.fixture(scope="session")
def encoder_dir(hub_dir, vocab_file, tiny_encoder):
    return export_encoder(tiny_encoder, os.path.join(hub_dir, "encoder"), vocab_file, do_lower_case=True)


@pytest.fixture(scope="session")
def preprocess_dir(hub_dir, vocab_file):
    return export_preprocessor(os.path.join(hub_dir, "preprocess"), vocab_file, do_lower_case=True, seq_length=16)


def encoder_inputs(batch=4, seq=10, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, seq + 1, size=batch)
    return hub_inputs(lengths, seq, len(VOCAB), rng=rng, min_id=5, first_id=2)
