"""BertSpanLabeler: extractive question answering, start and end logits over the context."""

import keras
from keras import ops

from bert_keras._checks import check_int
from bert_keras.tasks._task import call_encoder, check_encoder, head_dtype, head_initializer, model_inputs
from bert_keras.formats import tables
from bert_keras.heads import SpanHead
from bert_keras.tasks._pretrained import _PretrainedTask

START_LOGITS = "start_logits"
END_LOGITS = "end_logits"


@keras.saving.register_keras_serializable(package="bert_keras")
class BertSpanLabeler(_PretrainedTask):
    """Extractive QA: start and end logits of the answer span, masked to the context.

    Inputs are packed as `[CLS] question [SEP] context [SEP]`; the answer may
    start and end only on the context's pieces (`input_type_ids ==
    context_segment_id`, real tokens, its closing `[SEP]` left out) and on
    `[CLS]` (position 0), the "no answer" of SQuAD v2.0 and of windows that
    do not hold the answer: the positions transformers' question-answering
    pipeline scores (its `p_mask`, `[CLS]` kept).

    Args:
        encoder: `BertEncoder` or a layer with the Hub dict in and out.
            Reachable as `.encoder`.
        preprocessor: optional `BertPreprocessor` or Hub preprocess layer
            (`hub.PreprocessLayer`: two segments); the model then takes two
            string inputs, the question and the context.
        context_segment_id: int or None. Segment id of the context. `None`
            masks nothing (all positions are scored, as
            `BertForQuestionAnswering` does). Defaults to `1`; with a
            preprocessor that packs RoBERTa's way (type ids all 0, so no
            segment tells the context) it is `None`.
        head_transform: optional dict of `bert_keras.heads.PredictionTransform`
            arguments: a dense layer, activation and LayerNorm on every token
            before the start and end logits (`SpanHead`'s `transform`), as
            ModernBERT's question answering has; `from_checkpoint` sets it
            from such a checkpoint. Defaults to `None`.
        **kwargs: other `keras.Model` arguments.

    Call arguments:
        inputs: `[questions, contexts]` strings (with a preprocessor), or the
            Hub input dict.

    Returns:
        A dict: `start_logits` and `end_logits`, each `(batch, seq)`; train
        each with `SparseCategoricalCrossentropy(from_logits=True)` on the
        answer's first and last token positions.

    Example:
    >>> encoder = BertEncoder(vocab_size=100, num_layers=2, hidden_size=16,
    ...                       num_heads=2, intermediate_size=32)
    >>> labeler = BertSpanLabeler(encoder)
    >>> ids = np.array([[2, 7, 3, 9, 8, 3]], dtype="int32")  # [CLS] q [SEP] c c [SEP]
    >>> outputs = labeler({"input_word_ids": ids, "input_mask": np.ones_like(ids),
    ...                    "input_type_ids": np.array([[0, 0, 0, 1, 1, 1]], dtype="int32")})
    >>> tuple(outputs["start_logits"].shape)
    (1, 6)
    """

    _own_args = ("context_segment_id", "head_transform")
    _checkpoint_head, _head_attribute = tables.SPAN, "span_head"

    def __init__(self, encoder, preprocessor=None, context_segment_id=1, head_transform=None, **kwargs):
        check_encoder(encoder)
        if getattr(getattr(preprocessor, "tokenizer", None), "packing", None) == "roberta":
            context_segment_id = None
        if context_segment_id is not None:
            check_int("context_segment_id", context_segment_id, minimum=0)
        # === Layers ===
        head = SpanHead(kernel_initializer=head_initializer(encoder), transform=head_transform,
                        dtype=head_dtype(encoder), name="span")
        # === Functional model ===
        inputs, packed = model_inputs(preprocessor, 2 if preprocessor is not None else 1)
        encoder_outputs = call_encoder(encoder, packed, "sequence_output")
        context_mask = answer_mask(packed, context_segment_id)
        start_logits, end_logits = head(encoder_outputs["sequence_output"], context_mask)
        outputs = {START_LOGITS: start_logits, END_LOGITS: end_logits}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.span_head = head
        self.context_segment_id = context_segment_id
        self.head_transform = head.transform.options() if head.transform is not None else None

    def serving_outputs(self, inputs):
        """The start and end logits as served, on the Hub input dict (e.g. packed windows).

        The model's own computation (encoder, span head, the mask of
        `answer_mask`) without the preprocessor, so that an export can pack
        its own windows (`bert_keras.export.export_reader`). Equal to
        `self(inputs, training=False)` for a model without a preprocessor.

        Args:
            inputs: the Hub input dict of int32 `(batch, seq)` tensors.

        Returns:
            A dict: `start_logits`, `end_logits`, each `(batch, seq)` in the
            encoder's compute dtype.
        """
        sequence_output = self.encoder(inputs, training=False)["sequence_output"]  # (batch, seq, hidden)
        start_logits, end_logits = self.span_head(sequence_output, answer_mask(inputs, self.context_segment_id))
        return {START_LOGITS: start_logits, END_LOGITS: end_logits}


def answer_mask(packed, context_segment_id=1):
    """Where an answer may start or end: `[CLS]` and the context's pieces (`(batch, seq)` bool), or None.

    The context's pieces are the real tokens of segment `context_segment_id`
    but its closing `[SEP]` (the last real token). `None` for a
    `context_segment_id` of None (every position is scored).
    """
    if context_segment_id is None:
        return None
    mask = packed["input_mask"]
    position = ops.cumsum(ops.ones_like(mask), axis=1) - 1  # (batch, seq): 0, 1, 2, ...
    last = ops.sum(mask, axis=1, keepdims=True) - 1  # (batch, 1): the closing [SEP]
    context = ops.logical_and(ops.equal(mask, 1), ops.equal(packed["input_type_ids"], context_segment_id))
    context = ops.logical_and(context, ops.not_equal(position, last))
    return ops.logical_or(context, ops.equal(position, 0))
