"""Tiny models, vocabularies and module pairs for the inspect tests."""

import os
import shutil
import subprocess

import pytest

from bert_keras.encoder import BertEncoder

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
    "the", "cat", "sat", "on", "mat", "a", "dog", "ran", ".", ",", "!", "?", "hello", "world", "bert",
    "##s", "##ing", "is", "and", "to", "of", "it", "was", "not", "good", "bad", "i", "you", "what", "look",
]
MODEL_GARDEN_MODULE = os.path.join(os.path.dirname(__file__), "data", "model_garden_tiny", "encoder")


def tiny_encoder(num_layers=2, num_heads=2, hidden_size=16, **kwargs):
    # A large initializer_range gives peaked attention, so that heads and layers look different.
    return BertEncoder(vocab_size=len(VOCAB), num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                       intermediate_size=32, max_sequence_length=64, initializer_range=kwargs.pop("initializer_range", 0.5),
                       **kwargs)


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def module_pair(tmp_path_factory):
    """`modules/encoder` written by our exporter, in `bert-keras convert`'s layout: 2 layers, 2 heads, exact GELU.

    The preprocess module is left out: the encoder carries the vocabulary, and writing one takes seconds. One
    export for the session: test_cli.py and test_hub_module.py only read it (it was written once per file).
    """
    from bert_keras.export import export_encoder

    directory = tmp_path_factory.mktemp("pair")
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    encoder = tiny_encoder()
    export_encoder(encoder, str(directory / "modules" / "encoder"), str(vocab), True)
    return str(directory / "modules"), encoder


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")


def run_chromium(url, *arguments):
    """Runs headless Chromium on `url`; returns `(stdout, console_lines)`."""
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
               "--enable-logging=stderr", "--v=0", "--window-size=1000,1000", *arguments, url]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return result.stdout, console
