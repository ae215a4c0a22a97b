"""BERT configurations as plain data.

Each preset is the set of `BertEncoder` arguments of a published model, plus
`do_lower_case` (how its vocabulary was built) and a one-line description.
Building a preset gives random weights; real weights come from
`bert_keras.checkpoints`.
"""

import os

_UNCASED_VOCAB = 30522
_CASED_VOCAB = 28996


def _bert(num_layers, hidden_size, num_heads, vocab_size, do_lower_case, description):
    return {
        "config": {
            "vocab_size": vocab_size,
            "num_layers": num_layers,
            "hidden_size": hidden_size,
            "num_heads": num_heads,
            "intermediate_size": 4 * hidden_size,
            "activation": "gelu",
            "max_sequence_length": 512,
            "type_vocab_size": 2,
        },
        "do_lower_case": do_lower_case,
        "description": description,
    }


PRESETS = {
    "bert_base_en_uncased": _bert(12, 768, 12, _UNCASED_VOCAB, True, "BERT-Base, English, uncased (L-12 H-768 A-12)."),
    "bert_base_en_cased": _bert(12, 768, 12, _CASED_VOCAB, False, "BERT-Base, English, cased (L-12 H-768 A-12)."),
    "bert_large_en_uncased": _bert(24, 1024, 16, _UNCASED_VOCAB, True, "BERT-Large, English, uncased (L-24 H-1024 A-16)."),
    "bert_large_en_cased": _bert(24, 1024, 16, _CASED_VOCAB, False, "BERT-Large, English, cased (L-24 H-1024 A-16)."),
    "minilm_l6_h384_uncased": {
        "config": {
            "vocab_size": _UNCASED_VOCAB,
            "num_layers": 6,
            "hidden_size": 384,
            "num_heads": 12,
            "intermediate_size": 1536,
            "activation": "gelu",
            "max_sequence_length": 512,
            "type_vocab_size": 2,
        },
        "do_lower_case": True,
        "description": "all-MiniLM-L6-v2 (sentence-transformers), a BERT of L-6 H-384 A-12, uncased.",
    },
}


def _family(num_layers, hidden_size, num_heads, vocab_size, do_lower_case, description, **options):
    """A model of BERT's family: BERT's sizes plus the options that make it ALBERT, ELECTRA, DistilBERT or RoBERTa."""
    preset = _bert(num_layers, hidden_size, num_heads, vocab_size, do_lower_case, description)
    preset["config"].update(options)
    return preset


# BERT's family, as in keras-hub's preset names; the sizes of the Hugging Face models of the same name
# (albert-base-v2, google/electra-{base,small}-discriminator, distilbert-base-uncased, roberta-base,
# xlm-roberta-base).
PRESETS.update({
    "albert_base_en_uncased": _family(
        12, 768, 12, 30000, True, "ALBERT-Base v2, English, uncased (L-12 H-768 A-12, E-128, one shared block).",
        embedding_size=128, shared_layers=True, activation="gelu_approximate"),
    "electra_base_discriminator_uncased_en": _family(
        12, 768, 12, _UNCASED_VOCAB, True, "ELECTRA-Base discriminator, English, uncased (L-12 H-768 A-12, no pooler).",
        use_pooler=False),
    "electra_small_discriminator_uncased_en": _family(
        12, 256, 4, _UNCASED_VOCAB, True, "ELECTRA-Small discriminator, English, uncased (L-12 H-256 A-4, E-128, no "
        "pooler).", embedding_size=128, use_pooler=False),
    "distil_bert_base_en_uncased": _family(
        6, 768, 12, _UNCASED_VOCAB, True, "DistilBERT-Base, English, uncased (L-6 H-768 A-12, no token types, no "
        "pooler).", type_vocab_size=0, use_pooler=False),
    "roberta_base_en": _family(
        12, 768, 12, 50265, False, "RoBERTa-Base, English, cased byte-level BPE (L-12 H-768 A-12, positions from 2).",
        type_vocab_size=1, position_offset=2, layer_norm_epsilon=1e-5),
    # FacebookAI/xlm-roberta-base: RoBERTa-Base's encoder over a 250,002-piece SentencePiece Unigram vocabulary.
    "xlm_roberta_base_multi": _family(
        12, 768, 12, 250002, False, "XLM-RoBERTa-Base, 100 languages, cased SentencePiece Unigram (L-12 H-768 A-12, "
        "positions from 2).", type_vocab_size=1, position_offset=2, layer_norm_epsilon=1e-5),
})

# The 24 "small BERTs" of Turc et al. (2019): uncased, heads = hidden / 64.
for _layers in (2, 4, 6, 8, 10, 12):
    for _hidden in (128, 256, 512, 768):
        _heads = _hidden // 64
        PRESETS[f"small_bert_en_uncased_L-{_layers}_H-{_hidden}_A-{_heads}"] = _bert(
            _layers,
            _hidden,
            _heads,
            _UNCASED_VOCAB,
            True,
            f"Small BERT, English, uncased (L-{_layers} H-{_hidden} A-{_heads}).",
        )


def preset_names():
    """The names of all presets, sorted."""
    return sorted(PRESETS)


def get_preset(name):
    """Returns the preset entry for `name`, or raises a `ValueError` listing the names."""
    if name not in PRESETS:
        raise ValueError(
            f"Unknown preset {name!r}. Available presets: {', '.join(preset_names())}."
        )
    return PRESETS[name]


def checkpoint_name_hint(path):
    """What to do instead, when a checkpoint `path` does not exist and reads like a name: a preset, or a model hub's
    id ('' otherwise). Checked by the readers and by the command line before TensorFlow loads."""
    name = os.fspath(path)
    if os.path.exists(name) or os.path.isabs(name) or name.startswith((".", "~")):
        return ""
    if name in PRESETS:
        return (f" {name!r} is a bert_keras preset: an architecture (sizes, no weights). For pretrained weights pass "
                "a checkpoint folder; for this architecture with random weights use BertEncoder.from_architecture("
                f"{name!r}) (or `bert-keras pretrain --preset {name}`).")
    if name.count("/") <= 1 and not name.endswith((".json", ".bin", ".h5", ".safetensors", ".ckpt")):
        return (" Checkpoints are read from local folders; nothing is downloaded. If this names a model of a model "
                "hub, download its folder first (e.g. `huggingface-cli download NAME --local-dir DIR` where there is "
                "network) and pass DIR. The MiniLM checkpoint installed with bert_keras is the folder of "
                "`bert_keras.text.corpora.minilm_vocab_path()`.")
    return ""
