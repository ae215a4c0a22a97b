"""Our models, built from what a reader returns: the encoder, the heads, the pretrainer."""

import dataclasses

import keras

from bert_keras.encoder import BertEncoder
from bert_keras.formats import ConversionSummary, build_and_load, tables
from bert_keras.heads import MaskedLMHead, NextSentenceHead
from bert_keras.pretrainer import BertPretrainer


@dataclasses.dataclass
class LoadedCheckpoint:
    """The result of a conversion.

    Attributes:
        encoder: `BertEncoder` holding the converted weights.
        heads: dict of converted heads: `"mlm"` (`MaskedLMHead`, tied to the
            encoder's word embeddings) and/or `"nsp"` (`NextSentenceHead`).
        pretrainer: `BertPretrainer` or None. Built when both heads are present;
            its `.encoder`, `.mlm_head` and `.nsp_head` are the objects above.
        vocab_file: str or None. Path of the WordPiece vocabulary.
        do_lower_case: bool. Whether the vocabulary expects lower-cased text.
        summary: `ConversionSummary`.
    """

    encoder: object
    heads: dict
    pretrainer: object
    vocab_file: object
    do_lower_case: bool
    summary: ConversionSummary


def build_models(encoder_config, heads, mlm_activation, dtype=None):
    """Builds the encoder and the requested heads. Returns `(roots, pretrainer)`."""
    encoder = BertEncoder(**encoder_config, dtype=dtype)
    roots = {"encoder": encoder}
    pretrainer = None
    if tables.MLM in heads and tables.NSP in heads:
        pretrainer = BertPretrainer(encoder, mlm_activation=mlm_activation)
        roots["mlm"], roots["nsp"] = pretrainer.mlm_head, pretrainer.nsp_head
    elif tables.MLM in heads:
        head = MaskedLMHead(
            vocab_size=encoder.vocab_size,
            embedding=encoder.embeddings.word_embeddings,
            activation=mlm_activation,
            layer_norm_epsilon=encoder.layer_norm_epsilon,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.initializer_range),
            dtype=encoder.dtype_policy,
            name="mlm",
        )
        head.build((None, None, encoder.hidden_size))
        roots["mlm"] = head
    elif tables.NSP in heads:
        head = NextSentenceHead(
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.initializer_range),
            dtype=encoder.dtype_policy,
            name="nsp",
        )
        head.build((None, encoder.hidden_size))
        roots["nsp"] = head
    return roots, pretrainer


def load(weights, dtype=None):
    """Builds our models for `weights` (`CheckpointWeights`) and assigns them. Returns `LoadedCheckpoint`."""
    pretrainer = None

    def make_roots(config):
        nonlocal pretrainer
        roots, pretrainer = build_models(config, weights.heads, weights.mlm_activation, dtype=dtype)
        return roots

    roots = build_and_load(weights, make_roots)
    return LoadedCheckpoint(
        encoder=roots["encoder"],
        heads={key: roots[key] for key in (tables.MLM, tables.NSP) if key in roots},
        pretrainer=pretrainer,
        vocab_file=weights.vocab_file,
        do_lower_case=weights.do_lower_case,
        summary=weights.summary,
    )
