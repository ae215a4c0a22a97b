"""Tiny reference models and inputs shared by the checkpoint tests."""

import os

import numpy as np

from bert_keras.encoder import INPUT_KEYS
from tests.helpers import hub_inputs

TINY_HF = dict(
    vocab_size=40,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=24,
    type_vocab_size=2,
)


def random_inputs(batch=3, seq=10, vocab=40, seed=0):
    """Hub-style inputs with padding: rows of different lengths, two segments."""
    rng = np.random.default_rng(seed)
    lengths = np.array([seq, seq - 3, 4][:batch] + [seq] * max(0, batch - 3))
    inputs = hub_inputs(lengths, seq, vocab, rng=rng, segment_b_from="half")
    positions = np.stack([rng.choice(length, size=3, replace=False) for length in lengths]).astype("int32")
    return inputs, positions


def perturb_torch(model, seed=0, scale=0.05):
    """Adds noise to every parameter, so that biases and LayerNorms are not trivial."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * scale)
    model.eval()
    return model


def hf_pretraining_model(hidden_act="gelu", seed=0):
    import torch
    import transformers

    config = transformers.BertConfig(**TINY_HF, hidden_act=hidden_act)
    torch.manual_seed(seed)  # the initial weights too: the same model on every run
    return perturb_torch(transformers.BertForPreTraining(config), seed=seed)


def torch_outputs(model, inputs):
    import torch

    with torch.no_grad():
        return model(
            input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(inputs["input_type_ids"], dtype=torch.long),
        )


def write_vocab(path, size):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"tok{i}" for i in range(size - 5)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return tokens


def save_hf_directory(model, directory, vocab_size=TINY_HF["vocab_size"]):
    model.save_pretrained(directory)
    write_vocab(os.path.join(directory, "vocab.txt"), vocab_size)
    return str(directory)


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype="float64") - np.asarray(b, dtype="float64"))))


def write_training_inputs(transformers, root, num_texts):
    """A tiny Hugging Face BERT checkpoint without dropout, labelled texts and a corpus, written under `root`.

    Returns a dict of paths: `checkpoint` (folder), `vocab` (its vocab.txt: [PAD] [UNK] [CLS] [SEP] [MASK]
    tok0..tok34), `train` (`num_texts` labelled texts: label 1 when the words come from tok17..tok33),
    `corpus` (12 documents of 5 sentences). No dropout, so that runs draw no random numbers inside the
    model and can be compared exactly.
    """
    import random

    import torch

    config = transformers.BertConfig(**TINY_HF, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)  # the initial weights too: torch seeds its generator at random in each process
    checkpoint = save_hf_directory(perturb_torch(transformers.BertForPreTraining(config)), os.path.join(root, "checkpoint"))
    rng = random.Random(0)
    rows = []
    for i in range(num_texts):
        label = i % 2
        words = [f"tok{rng.randrange(17) + 17 * label}" for _ in range(rng.randrange(2, 7))]
        rows.append(f"{' '.join(words)},{'pos' if label else 'neg'}")
    train = os.path.join(root, "train.csv")
    with open(train, "w") as f:
        f.write("text,label\n" + "\n".join(rows) + "\n")
    documents = []
    for _ in range(12):
        first = rng.randrange(35)
        documents.append("\n".join(" ".join(f"tok{(first + s * 3 + j) % 35}" for j in range(4)) for s in range(5)))
    corpus = os.path.join(root, "corpus.txt")
    with open(corpus, "w") as f:
        f.write("\n\n".join(documents) + "\n")
    return {"checkpoint": str(checkpoint), "vocab": os.path.join(checkpoint, "vocab.txt"), "train": train, "corpus": corpus}
