"""Per-layer attention statistics in the manner of Clark et al. (2019), "What Does BERT Look At?"."""

import unicodedata

import numpy as np

from bert_keras.text.kinds import TOKENIZER_KINDS, tokenizer_class

# The statistics, in the order they are reported. Shares are averages over
# query tokens of the attention that goes to the named keys.
STATISTICS = ("cls", "sep", "punctuation", "self", "previous", "next", "entropy")
PIECE_KINDS = TOKENIZER_KINDS


def piece_text(token, kind="wordpiece"):
    """The text a vocabulary piece stands for, without its tokenizer's marks; None where it is no text alone.

    WordPiece: without the `##` of a continuation. SentencePiece: without the
    `▁` (U+2581) that starts a word. Byte-level BPE: its bytes decoded as
    UTF-8 (`Ġ` is a space), without leading spaces; None for a piece holding
    part of a character only. (`Tokenizer.piece_text` of the kind's class.)

    >>> piece_text("##ing"), piece_text("▁the", "sentencepiece"), piece_text("Ġthe", "byte_bpe")
    ('ing', 'the', 'the')
    """
    return tokenizer_class(kind).piece_text(token)


def is_punctuation(token, kind="wordpiece"):
    """Whether a vocabulary piece is made of Unicode punctuation only, its tokenizer's marks aside.

    WordPiece: `.`, `,`, `##!`, `...`; SentencePiece: `▁.` too; byte-level
    BPE: `Ġ.` and `âĢ¦` (the bytes of `…`). A piece of marks only (`▁`,
    `Ġ`) or of part of a character is not punctuation.

    Args:
        token: str. A piece as the vocabulary spells it.
        kind: str. `"wordpiece"`, `"sentencepiece"` or `"byte_bpe"` (see
            `Inspector.tokenizer_kind`). Defaults to `"wordpiece"`.
    """
    text = piece_text(token, kind)
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


class AttentionStatistics:
    """Accumulates, per layer and head, where attention goes, over batches of examples.

    For every query token at a real position: the share of its attention that
    goes to `[CLS]`, to `[SEP]` (RoBERTa's `<s>` and `</s>`: the ids given),
    to punctuation tokens, to itself, to the
    previous token and to the next token, and the entropy (in nats) of its
    attention distribution. `result()` averages over all query tokens seen
    (previous/next: over the tokens that have one).

    Args:
        num_layers: int.
        num_heads: int.
        cls_id: int. Vocabulary id of `[CLS]` (RoBERTa: `<s>`).
        sep_id: int. Vocabulary id of `[SEP]` (RoBERTa: `</s>`).
        punctuation_ids: collection of int. Ids of punctuation tokens (see
            `is_punctuation`).

    Example:
    >>> stats = AttentionStatistics(num_layers=1, num_heads=1, cls_id=2, sep_id=3, punctuation_ids=[5])
    >>> probs = np.array([[[[[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]]]])
    >>> stats.update(probs, np.array([[2, 5, 3]]), np.array([[1, 1, 1]]))
    >>> round(stats.result()["per_layer"]["cls"][0], 4), stats.result()["per_layer"]["self"][0]
    (0.5, 0.5)
    """

    def __init__(self, num_layers, num_heads, cls_id, sep_id, punctuation_ids):
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.punctuation_ids = np.asarray(sorted(punctuation_ids), dtype=np.int64)
        self._sums = {name: np.zeros((num_layers, num_heads)) for name in STATISTICS}
        self._counts = {"tokens": 0, "previous": 0, "next": 0}
        self.num_examples = 0

    def update(self, probs, word_ids, mask):
        """Adds a batch.

        Args:
            probs: array `(num_layers, batch, num_heads, seq, seq)`, zero at padded keys.
            word_ids: int array `(batch, seq)`.
            mask: int array `(batch, seq)`: 1 at real positions.
        """
        probs = np.asarray(probs, dtype=np.float64)
        query = np.asarray(mask, dtype=np.float64)  # (batch, seq)
        keys = {
            "cls": (word_ids == self.cls_id) * query,
            "sep": (word_ids == self.sep_id) * query,
            "punctuation": np.isin(word_ids, self.punctuation_ids) * query,
        }
        for name, key_mask in keys.items():
            self._sums[name] += np.einsum("lbhij,bj,bi->lh", probs, key_mask, query)
        self._sums["self"] += np.einsum("lbhii,bi->lh", probs, query)
        # diagonal(offset=-1)[..., i] is query i+1 -> key i (the previous token); offset=+1: query i -> key i+1.
        following = query[:, 1:]  # both ends real when the later one is
        self._sums["previous"] += np.einsum("lbhi,bi->lh", np.diagonal(probs, offset=-1, axis1=3, axis2=4), following)
        self._sums["next"] += np.einsum("lbhi,bi->lh", np.diagonal(probs, offset=1, axis1=3, axis2=4), following)
        logs = np.log(np.where(probs > 0, probs, 1.0))
        self._sums["entropy"] += -np.einsum("lbhij,bi->lh", probs * logs, query)
        self._counts["tokens"] += int(query.sum())
        self._counts["previous"] += int(following.sum())
        self._counts["next"] += int(following.sum())
        self.num_examples += probs.shape[1]

    def result(self):
        """A dict: `per_head` (name -> `[layer][head]`), `per_layer` (name -> list over
        layers, the mean over heads), `statistics`, `num_examples`, `num_tokens`."""
        per_head = {}
        for name in STATISTICS:
            count = self._counts.get(name, self._counts["tokens"])
            per_head[name] = self._sums[name] / max(count, 1)
        return {
            "statistics": list(STATISTICS),
            "num_examples": self.num_examples,
            "num_tokens": self._counts["tokens"],
            "per_layer": {name: values.mean(axis=1).tolist() for name, values in per_head.items()},
            "per_head": {name: values.tolist() for name, values in per_head.items()},
        }
