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
    import transformers

    config = transformers.BertConfig(**TINY_HF, hidden_act=hidden_act)
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
