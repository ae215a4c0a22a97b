"""Our models, built from what a reader returns: the encoder and its heads.

The heads come built and assigned, not put together into a task: the tasks sit above the checkpoints
(a checkpoint's `BertPretrainer`: `bert_keras.tasks.checkpoint_pretrainer`).
"""

import dataclasses

import keras

from bert_keras.encoder import BertEncoder
from bert_keras.formats import Candidates, ConversionSummary, assign_arrays, tables
from bert_keras.models import DebertaV3Encoder
from bert_keras.models.modernbert import ModernBertEncoder
from bert_keras.heads import (
    ClassificationHead,
    DiscriminatorHead,
    MaskedLMHead,
    NextSentenceHead,
    SpanHead,
    TokenClassificationHead,
)
from bert_keras.text.folders import tokenizer_assets, tokenizer_from_folder


@dataclasses.dataclass
class LoadedCheckpoint:
    """The result of a conversion.

    Attributes:
        encoder: `BertEncoder` holding the converted weights.
        heads: dict of converted heads: `"mlm"` (`MaskedLMHead`, tied to the
            encoder's word embeddings: BERT's and the family's masked LM, an
            ELECTRA generator's; for ALBERT and ELECTRA its transform ends at
            the embeddings' width) and/or `"nsp"` (`NextSentenceHead`);
            a task's, where asked for (`with_heads=["token_classifier"]`):
            `"classifier"` (`ClassificationHead`), `"token_classifier"`
            (`TokenClassificationHead`), `"span"` (`SpanHead`); ELECTRA's
            `"discriminator"` (`DiscriminatorHead`, with the encoder's activation).
        vocab_file: str or None. Path of the WordPiece vocabulary.
        do_lower_case: bool. Whether the vocabulary expects lower-cased text.
        summary: `ConversionSummary`.
        architectures: list of str. The model classes the checkpoint's config
            names (e.g. `["BertForTokenClassification"]`).
        label_names: list of str or None. The classes of a classifier head,
            in the order of its outputs (the config's `id2label`).
        tokenizer_kind: str. The family's tokenizer: `"wordpiece"` (BERT,
            ELECTRA, DistilBERT), `"sentencepiece"` (ALBERT) or `"byte_bpe"`
            (RoBERTa).
        tokenizer_folder: str or None. The folder its files are read from.
    """

    encoder: object
    heads: dict
    vocab_file: object
    do_lower_case: bool
    summary: ConversionSummary
    architectures: list = dataclasses.field(default_factory=list)
    label_names: object = None
    tokenizer_kind: str = "wordpiece"
    tokenizer_folder: object = None

    def tokenizer(self, path=None, name="tokenizer"):
        """The checkpoint's tokenizer: `WordPieceTokenizer` (`vocab.txt`), `SentencePieceTokenizer` (ALBERT's
        `spiece.model`) or `BytePairTokenizer` (RoBERTa's `vocab.json` and `merges.txt`), cased as the checkpoint.

        Args:
            path: optional str. The checkpoint's path, named in the error where
                no folder of tokenizer files is known.
            name: str. The layer's name. Defaults to `"tokenizer"`.

        Raises:
            ValueError: the checkpoint lacks the files of its tokenizer (named).
        """
        return tokenizer_from_folder(self.tokenizer_folder, self.tokenizer_kind, lower_case=self.do_lower_case,
                                     vocab_file=self.vocab_file, name=name, source=path)

    def tokenizer_files(self):
        """The tokenizer's files by the Hub module attribute that carries each (`vocab_file`, `sp_model_file`, ...)."""
        return tokenizer_assets(self.tokenizer_folder, self.tokenizer_kind, self.vocab_file)

    @property
    def unused_task_head(self):
        """The tensors of a task head the checkpoint holds but that were not read (another task's head, say)."""
        prefixes = tuple(tables.HF_PART_PREFIXES[part] for part in tables.TASK_HEADS)
        return [name for name in self.summary.unused if name.startswith(prefixes)]


# `CheckpointWeights.encoder_kind` -> the encoder class its config is for.
ENCODER_CLASSES = {"bert": BertEncoder, "modernbert": ModernBertEncoder, "deberta": DebertaV3Encoder}


def build_models(encoder_config, heads, mlm_activation, dtype=None, num_labels=None, encoder_class=BertEncoder,
                 head_options=None):
    """Builds the encoder and the requested heads (`num_labels`: a classifier head's outputs; `head_options`: head name
    -> its class's further arguments). Returns them by root name."""
    head_options = head_options or {}
    encoder = encoder_class(**encoder_config, dtype=dtype)
    roots = {"encoder": encoder}
    if tables.MLM in heads:
        head = MaskedLMHead(
            vocab_size=encoder.vocab_size,
            embedding=encoder.embeddings.word_embeddings,
            activation=mlm_activation,
            layer_norm_epsilon=encoder.layer_norm_epsilon,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.initializer_range),
            dtype=encoder.dtype_policy,
            name="mlm",
            **head_options.get(tables.MLM, {}),
        )
        head.build((None, None, encoder.hidden_size))
        roots["mlm"] = head
    if tables.NSP in heads:
        head = NextSentenceHead(
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.initializer_range),
            dtype=encoder.dtype_policy,
            name="nsp",
        )
        head.build((None, encoder.hidden_size))
        roots["nsp"] = head
    roots.update(_task_heads(encoder, heads, num_labels, head_options))
    return roots


def _task_heads(encoder, heads, num_labels, head_options):
    """The task heads and ELECTRA's discriminator among `heads`, built on the hidden size, named as their roots."""
    kwargs = dict(kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.initializer_range),
                  dtype=encoder.dtype_policy)
    built = {}
    dropout = getattr(encoder, "dropout", 0.0)  # ModernBERT's dropouts are per part; its classifier's is 0
    if tables.CLASSIFIER in heads:
        built[tables.CLASSIFIER] = ClassificationHead(num_labels, dropout=dropout, name="classifier", **kwargs,
                                                      **head_options.get(tables.CLASSIFIER, {}))
        built[tables.CLASSIFIER].build((None, encoder.hidden_size))
    if tables.TOKEN_CLASSIFIER in heads:
        options = dict(dict(dropout=dropout), **head_options.get(tables.TOKEN_CLASSIFIER, {}))
        built[tables.TOKEN_CLASSIFIER] = TokenClassificationHead(num_labels, name="classifier", **kwargs, **options)
        built[tables.TOKEN_CLASSIFIER].build((None, None, encoder.hidden_size))
    if tables.SPAN in heads:
        built[tables.SPAN] = SpanHead(name="span", **kwargs, **head_options.get(tables.SPAN, {}))
        built[tables.SPAN].build((None, None, encoder.hidden_size))
    if tables.DISCRIMINATOR in heads:  # ElectraDiscriminatorPredictions applies the config's hidden_act, as the encoder
        built[tables.DISCRIMINATOR] = DiscriminatorHead(activation=encoder.activation, name="discriminator", **kwargs)
        built[tables.DISCRIMINATOR].build((None, None, encoder.hidden_size))
    return built


def load(weights, dtype=None):
    """Builds our models for `weights` (`CheckpointWeights`) and assigns them. Returns `LoadedCheckpoint`.

    Built here, each candidate in turn (`formats.Candidates`: one candidate, unless a Hub module leaves its
    architecture open), so that the readers, below the models, never call back up into what builds them
    (`formats.build_and_load`, which calls a builder back, serves only the encoder classes' own `from_checkpoint`).
    """
    candidates = Candidates(weights)
    for config in candidates:
        roots = build_models(config, weights.heads, weights.mlm_activation, dtype=dtype, num_labels=weights.num_labels,
                             encoder_class=ENCODER_CLASSES[weights.encoder_kind], head_options=weights.head_options)
        assign_arrays(weights, roots)
        if candidates.fits(roots["encoder"]):
            break
    return LoadedCheckpoint(
        encoder=roots["encoder"],
        heads={key: roots[key] for key in tables.HEADS if key in roots},
        vocab_file=weights.vocab_file,
        do_lower_case=weights.do_lower_case,
        summary=weights.summary,
        architectures=list(weights.architectures),
        label_names=weights.label_names,
        tokenizer_kind=weights.tokenizer_kind,
        tokenizer_folder=weights.tokenizer_folder,
    )
