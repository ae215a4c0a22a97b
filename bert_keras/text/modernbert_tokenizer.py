"""ModernBERT's tokenizer: byte-level BPE (GPT-NeoX / OLMo's kind) with NFC, BERT's special tokens and packing."""

import keras
import tensorflow_text as tf_text

from bert_keras._checks import check_choice
from bert_keras.text.byte_bpe import BytePairTokenizer

NORMALIZATIONS = (None, "NFC")


@keras.saving.register_keras_serializable(package="bert_keras")
class ModernBertTokenizer(BytePairTokenizer):
    """ModernBERT's byte-level BPE tokenizer: strings to token ids, in the graph.

    `BytePairTokenizer` (GPT-2's pre-tokenization and byte-level merges, as
    ModernBERT's `tokenizer.json`: a `ByteLevel` pre-tokenizer without a
    prefix space), with what ModernBERT's file adds: the text normalized to
    NFC first (its `normalizer`), BERT's special tokens (`[CLS]`, `[SEP]`,
    `[PAD]`, `[MASK]`, `[UNK]`) and BERT's packing (`[CLS] A [SEP] B [SEP]`,
    its `TemplateProcessing`, which trims no offsets: a piece "Ġword" spans its
    space, as the tokenizers library gives it). Character offsets count code points of the
    normalized text (the raw text's wherever it is NFC already, as nearly
    all text is).

    Args:
        vocabulary: a `vocab.json` path, a dict token -> id, or a list of
            tokens in id order.
        merges: a `merges.txt` path or a list of `"left right"` strings.
        normalization: `"NFC"` or None. Defaults to `"NFC"`.
        add_prefix_space: bool. Defaults to `False`, as ModernBERT.
        unknown_token, cls_token, sep_token, pad_token, mask_token: str.
            Default to `"[UNK]"`, `"[CLS]"`, `"[SEP]"`, `"[PAD]"`, `"[MASK]"`.
        **kwargs: other `Tokenizer` arguments (`name`).

    Call arguments:
        inputs: string tensor `(batch,)` (or a scalar, or `(batch, 1)`).

    Returns:
        An int32 `tf.RaggedTensor` `(batch, words, pieces)`.

    Example:
    >>> tokenizer = ModernBertTokenizer(  # "Ã©" is the bytes of "é"
    ...     ["a", "b", "Ã", "©", "Ã©", "Ġ", "Ġb", "ab", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"],
    ...     ["Ġ b", "a b", "Ã ©"])
    >>> tokenizer(["ab b", "e" + chr(0x301)]).to_list()  # "e" and a combining accent: "é" once normalized
    [[[7], [6]], [[4]]]
    >>> tokenizer.cls_id, tokenizer.pad_id, tokenizer.packing
    (9, 11, 'bert')
    """

    kind = "modernbert_bpe"
    # Its tokenizer.json's post-processor is a TemplateProcessing, which trims no offsets: "Ġword" spans its space.
    trim_offsets = False
    packing = "bert"

    def __init__(self, vocabulary, merges, normalization="NFC", add_prefix_space=False, unknown_token="[UNK]",
                 cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]", **kwargs):
        check_choice("normalization", normalization, NORMALIZATIONS)
        super().__init__(vocabulary, merges, add_prefix_space=add_prefix_space, unknown_token=unknown_token,
                         cls_token=cls_token, sep_token=sep_token, pad_token=pad_token, mask_token=mask_token, **kwargs)
        self.normalization = normalization

    @classmethod
    def arguments_from_tokenizer_json(cls, tokenizer, path):
        """The arguments of ModernBERT's `tokenizer.json`: `BytePairTokenizer`'s, with its NFC normalizer (the one
        normalizer taken) and its special tokens (`[UNK]`, `[PAD]`, `[MASK]` where it adds them)."""
        normalizer = tokenizer.get("normalizer") if isinstance(tokenizer, dict) else None
        nfc = isinstance(normalizer, dict) and normalizer.get("type") == "NFC" and len(normalizer) == 1
        arguments = super().arguments_from_tokenizer_json(dict(tokenizer, normalizer=None) if nfc else tokenizer, path)
        added = {entry.get("content") for entry in tokenizer.get("added_tokens") or [] if isinstance(entry, dict)}
        for argument, token in (("unknown_token", "[UNK]"), ("pad_token", "[PAD]"), ("mask_token", "[MASK]")):
            if token not in added and "<" + token[1:-1].lower() + ">" in added:  # "<unk>", "<pad>", "<mask>"
                arguments[argument] = "<" + token[1:-1].lower() + ">"
        return dict(arguments, normalization="NFC" if nfc else None)

    def _normalized(self, strings):
        return strings if self.normalization is None else tf_text.normalize_utf8(strings, self.normalization)

    def _tokenize_rows(self, strings):
        return super()._tokenize_rows(self._normalized(strings))

    def _tokenize_rows_with_char_offsets(self, strings):
        return super()._tokenize_rows_with_char_offsets(self._normalized(strings))

    def get_config(self):
        config = super().get_config()
        config["normalization"] = self.normalization
        return config
