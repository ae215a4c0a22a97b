"""BertTokenClassifier: a tagger (named entities) on the sequence output."""

import collections.abc

import keras
from keras import ops

from bert_keras._checks import check_positive_int, check_rate
from bert_keras.tasks._task import call_encoder, check_encoder, head_dtype, head_initializer, model_inputs
from bert_keras.encoder import BertEncoder
from bert_keras.formats import tables
from bert_keras.heads import TokenClassificationHead
from bert_keras.tasks._pretrained import _PretrainedTask, _check_label_names


@keras.saving.register_keras_serializable(package="bert_keras")
class BertTokenClassifier(_PretrainedTask):
    """Token classifier (tagger, e.g. NER): `TokenClassificationHead` on the sequence output.

    Args:
        encoder: `BertEncoder` or a layer with the Hub dict in and out.
            Reachable as `.encoder`.
        num_classes: int. Number of tags.
        preprocessor: optional `BertPreprocessor` or Hub preprocess layer; the
            model then takes raw strings and tags their word pieces.
        dropout: float. Dropout before the dense layer. Defaults to `0.1`.
        text_pairs: bool. With a preprocessor: two string inputs. Defaults to `False`.
        label_names: optional list of `num_classes` str, the tags in the order
            of the outputs (e.g. `["O", "B-PER", "I-PER"]`; `from_checkpoint`
            takes a Hugging Face checkpoint's `id2label`). Saved with the model.
        head_transform: optional dict of `bert_keras.heads.PredictionTransform`
            arguments: a dense layer, activation and LayerNorm on every token
            before the dropout (`TokenClassificationHead`'s `transform`), as
            ModernBERT's token classifier has; `from_checkpoint` sets it from
            such a checkpoint. Defaults to `None`.
        **kwargs: other `keras.Model` arguments.

    Call arguments:
        inputs: strings (with a preprocessor) or the Hub input dict.

    Returns:
        Logits `(batch, seq, num_classes)`. Padding positions get logits too;
        give them sample weight 0 (e.g. `input_mask`) when training.

    Example:
    >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
    ...                       num_heads=2, intermediate_size=32)
    >>> tagger = BertTokenClassifier(encoder, num_classes=5)
    >>> ids = np.array([[2, 7, 4, 3]], dtype="int32")
    >>> tuple(tagger({"input_word_ids": ids, "input_mask": np.ones_like(ids),
    ...               "input_type_ids": np.zeros_like(ids)}).shape)
    (1, 4, 5)
    """

    _own_args = ("num_classes", "dropout", "text_pairs", "label_names", "head_transform")
    _checkpoint_head, _head_attribute = tables.TOKEN_CLASSIFIER, "classifier_head"

    def __init__(self, encoder, num_classes, preprocessor=None, dropout=0.1, text_pairs=False, label_names=None,
                 head_transform=None, **kwargs):
        check_encoder(encoder)
        check_positive_int("num_classes", num_classes)
        label_names = _check_label_names(label_names, num_classes)
        # === Layers ===
        head = TokenClassificationHead(
            num_classes=num_classes,
            dropout=check_rate("dropout", dropout),
            kernel_initializer=head_initializer(encoder),
            transform=head_transform,
            dtype=head_dtype(encoder),
            name="classifier",
        )
        # === Functional model ===
        inputs, packed = model_inputs(preprocessor, 2 if text_pairs else 1)
        outputs = head(call_encoder(encoder, packed, "sequence_output")["sequence_output"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.classifier_head = head
        self.num_classes = num_classes
        self.dropout = dropout
        self.text_pairs = bool(text_pairs)
        self.label_names = label_names
        self.head_transform = head.transform.options() if head.transform is not None else None

    def serving_outputs(self, inputs, padded=False):
        """The model's outputs as served: the packed pieces through the encoder and the head, as float32 logits.

        Equal to `self(inputs, training=False)` up to float rounding.
        `bert_keras.export.export_tagger` traces this method on packed
        windows of the texts' pieces (trimmed of their padding), so that no
        text longer than the packed length loses pieces.

        Args:
            inputs: strings when the model has a preprocessor (a `(batch,)`
                string tensor or a list of str), or the Hub input dict of
                int32 `(batch, seq)` tensors `input_word_ids`, `input_mask`,
                `input_type_ids`.
            padded: bool. With a `BertEncoder`, run it in the padded layout
                (`BertEncoder.padded_outputs`: no token packing, fewer ops,
                as LiteRT serves it); else as the encoder is built. Defaults
                to `False`.

        Returns:
            float32 logits `(batch, seq, num_classes)`; padding positions get
            logits too (ignore them by `input_mask`).

        Example:
        >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
        ...                       num_heads=2, intermediate_size=32)
        >>> from bert_keras.text import BertPreprocessor
        >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "paris"] + [f"w{i}" for i in range(94)]
        >>> tagger = BertTokenClassifier(encoder, num_classes=3, preprocessor=BertPreprocessor(vocab, seq_length=8))
        >>> texts = ["Paris w1", "w2"]
        >>> bool(np.allclose(tagger.serving_outputs(texts), tagger(tf.constant(texts)), atol=1e-6))
        True
        """
        packed = self._packed(inputs)
        if padded and isinstance(self.encoder, BertEncoder):
            sequence = self.encoder.padded_outputs(packed)["sequence_output"]  # (batch, seq, hidden)
        else:
            sequence = self.encoder(packed, training=False)["sequence_output"]  # (batch, seq, hidden)
        return ops.cast(self.classifier_head(sequence, training=False), "float32")  # (batch, seq, num_classes)

    def _packed(self, inputs):
        """The Hub input dict of `inputs`: itself, or the preprocessor's packing of the strings."""
        if isinstance(inputs, collections.abc.Mapping):
            return inputs
        if self.preprocessor is None:
            raise ValueError(
                "Received strings, but this tagger has no preprocessor: pass the Hub input dict "
                "(`input_word_ids`, `input_mask`, `input_type_ids`), or build it with `preprocessor=`."
            )
        if self.text_pairs:
            return self.preprocessor([ops.convert_to_tensor(segment, dtype="string") for segment in inputs])
        return self.preprocessor(ops.convert_to_tensor(inputs, dtype="string"))
