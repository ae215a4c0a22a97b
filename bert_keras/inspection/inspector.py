"""Attention probabilities and every layer's hidden states of a `BertEncoder`, with its tokens.

The tokens are the family's pieces, as its tokenizer's vocabulary spells
them: WordPiece (`##ing`), ALBERT's SentencePiece (`▁the`), RoBERTa's
byte-level BPE (`Ġthe`, `<s>` and `</s>`).
"""

import dataclasses
import logging

import numpy as np
import tensorflow as tf

from bert_keras.checkpoints import load_pretrained
from bert_keras.encoder import INPUT_KEYS, BertEncoder
from bert_keras.models.deberta import DebertaV3Encoder
from bert_keras.models.modernbert import ModernBertEncoder
from bert_keras.text import BertPreprocessor, load_vocabulary

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Inspection:
    """What the encoder did with one text (or text pair), at its real positions.

    Attributes:
        tokens: list of str. The pieces as the tokenizer's vocabulary spells
            them, the special tokens included (`[CLS]` and `[SEP]`; RoBERTa's
            `<s>` and `</s>`).
        type_ids: list of int. The segment of each token (0: A, 1: B); all 0
            for a model without token types (DistilBERT, RoBERTa).
        attention: float32 array `(num_layers, num_heads, n, n)`: row `i` of
            `attention[l, h]` is how query token `i` spreads its attention over
            the keys. Each row sums to 1 (padding gets none).
        hidden_states: float32 array `(num_layers + 1, n, hidden_size)` or None:
            the embeddings output, then each Transformer block's output (the
            layout of transformers' `output_hidden_states`).
        num_wordpieces: int. Pieces of the text(s) before truncation.
        truncated: bool. Whether pieces were cut to fit `seq_length`.
    """

    tokens: list
    type_ids: list
    attention: np.ndarray
    hidden_states: np.ndarray
    num_wordpieces: int
    truncated: bool


class Inspector:
    """Runs texts through a `BertEncoder` and returns its attention and hidden states.

    Any encoder of the family: give a WordPiece `vocab_file`, or the
    `preprocessor` of the model (ALBERT's SentencePiece, RoBERTa's
    byte-level BPE, or WordPiece), as `from_checkpoint` does for a folder.

    Args:
        encoder: `BertEncoder`. One built without `return_attention_probs`
            is rebuilt once with it and its weights are copied over.
        vocab_file: str or list of str. The encoder's WordPiece `vocab.txt`
            (or its tokens). Give this or `preprocessor`.
        do_lower_case: bool. Whether the vocabulary is uncased; used with
            `vocab_file`. Defaults to `True`.
        seq_length: int. Longest input in tokens, special tokens included;
            longer texts are truncated (round robin for pairs, as TF Hub's
            preprocessing). Defaults to `None`: 128 (the `preprocessor`'s
            `seq_length` when one is given), or the encoder's
            `max_sequence_length` if shorter.
        preprocessor: optional `BertPreprocessor`. The model's own
            preprocessing: its tokenizer gives the ids and the tokens, its
            packing the special tokens (RoBERTa: `<s> A </s></s> B </s>`).

    Attributes:
        tokenizer: the preprocessor's tokenizer; `vocabulary` its pieces by id.
        vocab_file: the WordPiece `vocab.txt` (or tokens) where there is one:
            `vocab_file`, or the checkpoint's in `from_checkpoint`; else None.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    >>> encoder = BertEncoder(vocab_size=8, num_layers=2, hidden_size=8, num_heads=2,
    ...                       intermediate_size=16)
    >>> result = Inspector(encoder, vocab, seq_length=16).inspect(["The cat sat"])[0]
    >>> result.tokens
    ['[CLS]', 'the', 'cat', 'sat', '[SEP]']
    >>> result.attention.shape, result.hidden_states.shape
    ((2, 2, 5, 5), (3, 5, 8))
    """

    def __init__(self, encoder, vocab_file=None, do_lower_case=True, seq_length=None, preprocessor=None):
        if not isinstance(encoder, (BertEncoder, ModernBertEncoder, DebertaV3Encoder)):
            raise TypeError(
                "Cannot read attention probabilities from a "
                f"{type(encoder).__name__}: expected a bert_keras BertEncoder, ModernBertEncoder or DebertaV3Encoder. "
                "Convert the checkpoint or Hub module with `bert_keras.checkpoints.load_checkpoint` first."
            )
        if preprocessor is not None and vocab_file is not None:
            raise ValueError(
                "Expected exactly one of the arguments `vocab_file` and `preprocessor`. Received both: "
                f"vocab_file={vocab_file!r:.80}, preprocessor={preprocessor!r}"
            )
        if preprocessor is not None and not isinstance(preprocessor, BertPreprocessor):
            raise TypeError(
                "Received an invalid value for argument `preprocessor`, expected a bert_keras BertPreprocessor. "
                f"Received: preprocessor of type {type(preprocessor).__name__}"
            )
        if seq_length is None:
            seq_length = 128 if preprocessor is None else preprocessor.seq_length
            seq_length = min(seq_length, encoder.max_sequence_length)
        _check_seq_length(seq_length, encoder.max_sequence_length)
        if preprocessor is None:
            if vocab_file is None:
                raise ValueError(
                    "Received no vocabulary (`vocab_file=None`); the tokens of an inspection come from "
                    "the WordPiece vocab.txt of the encoder's checkpoint or Hub module, or from the model's "
                    "`preprocessor` (`Inspector.from_checkpoint` builds it for any of the family)."
                )
            vocabulary = load_vocabulary(vocab_file)
            _check_vocabulary_size(vocabulary, encoder, f"The vocabulary {vocab_file}")
            preprocessor = BertPreprocessor(vocabulary, lower_case=do_lower_case, seq_length=seq_length)
        else:
            _check_vocabulary_size(preprocessor.tokenizer.vocabulary, encoder,
                                   f"The vocabulary of the preprocessor's {type(preprocessor.tokenizer).__name__}")
        self.encoder = encoder
        self.vocab_file = vocab_file
        self.seq_length = seq_length
        self.preprocessor = preprocessor
        self.tokenizer = preprocessor.tokenizer
        self.vocabulary = list(self.tokenizer.vocabulary)
        self._model = _with_attention_probs(encoder)
        spec = {key: tf.TensorSpec([None, None], tf.int32) for key in INPUT_KEYS}
        self._forward = tf.function(self._forward_fn, input_signature=[spec])

    @classmethod
    def from_checkpoint(cls, path, seq_length=None):
        """An inspector for anything `load_checkpoint` reads: Hugging Face folders of the family (BERT,
        ALBERT, ELECTRA, DistilBERT, RoBERTa), Google BERT, keras-nlp, TF Hub / Model Garden BERT
        encoder modules; with the checkpoint's own tokenizer (WordPiece, ALBERT's SentencePiece or
        RoBERTa's byte-level BPE), read as the tasks read it (`bert_keras.checkpoints.load_pretrained`).
        `seq_length` defaults to 128, or the encoder's `max_sequence_length` if shorter."""
        pretrained = load_pretrained(path, seq_length=seq_length)
        inspector = cls(pretrained.encoder, seq_length=pretrained.seq_length, preprocessor=pretrained.preprocessor)
        inspector.vocab_file = pretrained.loaded.vocab_file  # a WordPiece checkpoint's vocab.txt; None for the others
        return inspector

    @property
    def tokenizer_kind(self):
        """`"wordpiece"`, `"sentencepiece"` or `"byte_bpe"`: how the pieces spell their text (`is_punctuation`)."""
        return self.tokenizer.kind

    @property
    def special_tokens(self):
        """The start and end-of-segment tokens: `{"cls": "[CLS]", "sep": "[SEP]"}` (RoBERTa: `<s>`, `</s>`)."""
        return {"cls": self.vocabulary[self.tokenizer.cls_id], "sep": self.vocabulary[self.tokenizer.sep_id]}

    def num_special_tokens(self, num_segments):
        """Special tokens packed around `num_segments` segments: `[CLS]` and a `[SEP]` per segment, and
        RoBERTa's second `</s>` before each later one (`Tokenizer.num_special_tokens`)."""
        return self.tokenizer.num_special_tokens(num_segments)

    @property
    def num_layers(self):
        return self.encoder.num_layers

    @property
    def num_heads(self):
        return self.encoder.num_heads

    def _forward_fn(self, inputs):
        outputs = self._model(inputs, training=False)
        embeddings = self._model.embeddings(inputs["input_word_ids"], inputs["input_type_ids"], training=False)
        hidden = tf.stack([embeddings] + list(outputs["encoder_outputs"]))  # (layers + 1, batch, seq, hidden)
        probs = tf.stack(outputs["attention_probs"])  # (layers, batch, heads, seq, seq)
        return tf.cast(probs, tf.float32), tf.cast(hidden, tf.float32)

    def encode(self, texts, text_pairs=None):
        """Packs texts into encoder inputs, cut to the batch's longest row.

        The ids are the preprocessor's (`BertPreprocessor.tokenize`, then
        `bert_pack_inputs` at `seq_length`); `input_type_ids` are all 0 for an
        encoder without token types (`type_vocab_size` 0 or 1: DistilBERT,
        RoBERTa), whose embeddings do not read them.

        Returns:
            `(inputs, num_wordpieces)`: the dict of int32 numpy arrays
            `(batch, seq)` and the pieces of each example before truncation.
        """
        texts = _check_texts("texts", texts)
        segments = [texts] if text_pairs is None else [texts, _check_texts("text_pairs", text_pairs)]
        if len(segments) == 2 and len(segments[1]) != len(texts):
            raise ValueError(
                f"Expected one text pair per text. Received: {len(texts)} texts and {len(segments[1])} text_pairs"
            )
        tokenized = [self.preprocessor.tokenize(tf.constant(segment)).merge_dims(-2, -1) for segment in segments]
        counts = sum(piece.row_lengths().numpy() for piece in tokenized)
        packed = self.preprocessor.bert_pack_inputs(tokenized, seq_length=self.seq_length)
        length = int(np.max(np.sum(packed["input_mask"].numpy(), axis=1)))
        inputs = {key: packed[key].numpy()[:, :length] for key in INPUT_KEYS}
        if self.encoder.type_vocab_size <= 1:  # no segment table, or one row: segment B is no different
            inputs["input_type_ids"] = np.zeros_like(inputs["input_type_ids"])
        return inputs, counts

    def run(self, inputs):
        """Runs packed inputs. Returns numpy `(attention, hidden_states)`:
        `(layers, batch, heads, seq, seq)` and `(layers + 1, batch, seq, hidden)`."""
        probs, hidden = self._forward({key: tf.constant(inputs[key], tf.int32) for key in INPUT_KEYS})
        return probs.numpy(), hidden.numpy()

    def inspect(self, texts, text_pairs=None, hidden_states=True):
        """Returns one `Inspection` per text (or pair), at the real positions only.

        Args:
            texts: list of str. Non-empty texts.
            text_pairs: optional list of str. A second segment per text.
            hidden_states: bool. Keep every layer's hidden states. Defaults to `True`.
        """
        inputs, counts = self.encode(texts, text_pairs)
        probs, hidden = self.run(inputs)
        special = self.num_special_tokens(1 if text_pairs is None else 2)
        results = []
        for b in range(len(counts)):
            n = int(inputs["input_mask"][b].sum())
            results.append(
                Inspection(
                    tokens=[self.vocabulary[i] for i in inputs["input_word_ids"][b, :n]],
                    type_ids=inputs["input_type_ids"][b, :n].tolist(),
                    attention=probs[:, b, :, :n, :n],
                    hidden_states=hidden[:, b, :n] if hidden_states else None,
                    num_wordpieces=int(counts[b]),
                    truncated=bool(counts[b] + special > self.seq_length),
                )
            )
        return results


def _with_attention_probs(encoder):
    """The encoder itself if it outputs `attention_probs`, else a twin that shares its weights."""
    if encoder.return_attention_probs:
        return encoder
    config = dict(encoder.get_config(), return_attention_probs=True, name=f"{encoder.name}_with_attention")
    twin = type(encoder).from_config(config)
    for theirs, ours in zip(encoder.weights, twin.weights):
        if theirs.path.split("/", 1)[-1] != ours.path.split("/", 1)[-1]:
            raise RuntimeError(f"weight order differs: {theirs.path} vs {ours.path}")
        ours.assign(theirs)
    return twin


def _check_seq_length(seq_length, max_length):
    if isinstance(seq_length, bool) or not isinstance(seq_length, int) or not 3 <= seq_length <= max_length:
        raise ValueError(
            "Received an invalid value for argument `seq_length`, expected an integer from 3 to "
            f"the encoder's max_sequence_length={max_length}. Received: seq_length={seq_length!r}"
        )


def _check_vocabulary_size(vocabulary, encoder, what):
    # ModernBERT's and DeBERTa-v3's tables have rows past their tokenizers' tokens (50,368 for 50,285: a multiple of
    # 64; 128,100 for 128,000).
    padded = isinstance(encoder, (ModernBertEncoder, DebertaV3Encoder))
    if len(vocabulary) > encoder.vocab_size or (len(vocabulary) < encoder.vocab_size and not padded):
        raise ValueError(
            f"{what} has {len(vocabulary)} tokens but the encoder's vocab_size is {encoder.vocab_size}; "
            "it belongs to another model."
        )


def _check_texts(argument, texts):
    if isinstance(texts, (str, bytes)):
        texts = [texts]
    texts = [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else t for t in texts]
    if not texts:
        raise ValueError(f"Received an empty list for argument `{argument}`; give at least one text.")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"Expected `{argument}` to hold strings. Received: {argument}[{i}]={text!r}")
        if not text.strip():
            raise ValueError(
                f"Received an empty text in `{argument}` (item {i}); BERT needs at least one word to attend over."
            )
    return texts
