"""Name tables: how other projects' configs and weights map onto ours. Plain data.

Weight tables are tuples of `(target, source, transform)`:

- `target`: an attribute path from one of the converted objects: `encoder.` (a
  `BertEncoder`), `mlm.` (a `MaskedLMHead`), `nsp.` (a `NextSentenceHead`), or a
  task's head: `classifier.` (the `ClassificationHead` of a `BertClassifier`),
  `token_classifier.` (the `TokenClassificationHead` of a `BertTokenClassifier`),
  `span.` (the `SpanHead` of a `BertSpanLabeler`). `{i}` stands for the
  Transformer block index.
- `source`: the tensor name in the other project's checkpoint (`{i}` likewise).
- `transform`: how the source array becomes ours: `"identity"`, `"transpose"`
  (PyTorch `Linear` weights are `(out, in)`, Keras kernels `(in, out)`) or
  `"reshape"` (keras-nlp keeps attention kernels as `(hidden, heads, head_size)`).
"""

IDENTITY = "identity"
TRANSPOSE = "transpose"
RESHAPE = "reshape"

# The parts of a model. Tables are grouped by part; a checkpoint may lack a head.
EMBEDDINGS = "embeddings"
LAYER = "layer"
POOLER = "pooler"
MLM = "mlm"
NSP = "nsp"
# Task heads, named as the roots of their targets: what a model fine-tuned elsewhere carries.
CLASSIFIER = "classifier"
TOKEN_CLASSIFIER = "token_classifier"
SPAN = "span"
# ELECTRA's replaced-token detection head (ElectraForPreTraining): dense, GELU, dense to one logit a token.
# Read into `CheckpointWeights.arrays["discriminator.*"]`, built as `bert_keras.heads.DiscriminatorHead`.
DISCRIMINATOR = "discriminator"
PRETRAINING_HEADS = (MLM, NSP, DISCRIMINATOR)
TASK_HEADS = (CLASSIFIER, TOKEN_CLASSIFIER, SPAN)
HEADS = (MLM, NSP) + TASK_HEADS + (DISCRIMINATOR,)

_BLOCK = "encoder.transformer_layers.{i}."

# ---------------------------------------------------------------------------
# Hugging Face `transformers` (modeling_bert.py), names without the `bert.` prefix.
# ---------------------------------------------------------------------------
HF_WEIGHTS = {
    EMBEDDINGS: (
        ("encoder.embeddings.word_embeddings.embeddings", "embeddings.word_embeddings.weight", IDENTITY),
        ("encoder.embeddings.position_embeddings", "embeddings.position_embeddings.weight", IDENTITY),
        ("encoder.embeddings.type_embeddings.embeddings", "embeddings.token_type_embeddings.weight", IDENTITY),
        ("encoder.embeddings.layer_norm.gamma", "embeddings.LayerNorm.weight", IDENTITY),
        ("encoder.embeddings.layer_norm.beta", "embeddings.LayerNorm.bias", IDENTITY),
    ),
    LAYER: (
        (_BLOCK + "attention.query_dense.kernel", "encoder.layer.{i}.attention.self.query.weight", TRANSPOSE),
        (_BLOCK + "attention.query_dense.bias", "encoder.layer.{i}.attention.self.query.bias", IDENTITY),
        (_BLOCK + "attention.key_dense.kernel", "encoder.layer.{i}.attention.self.key.weight", TRANSPOSE),
        (_BLOCK + "attention.key_dense.bias", "encoder.layer.{i}.attention.self.key.bias", IDENTITY),
        (_BLOCK + "attention.value_dense.kernel", "encoder.layer.{i}.attention.self.value.weight", TRANSPOSE),
        (_BLOCK + "attention.value_dense.bias", "encoder.layer.{i}.attention.self.value.bias", IDENTITY),
        (_BLOCK + "attention.output_dense.kernel", "encoder.layer.{i}.attention.output.dense.weight", TRANSPOSE),
        (_BLOCK + "attention.output_dense.bias", "encoder.layer.{i}.attention.output.dense.bias", IDENTITY),
        (_BLOCK + "attention_layer_norm.gamma", "encoder.layer.{i}.attention.output.LayerNorm.weight", IDENTITY),
        (_BLOCK + "attention_layer_norm.beta", "encoder.layer.{i}.attention.output.LayerNorm.bias", IDENTITY),
        (_BLOCK + "feed_forward.intermediate_dense.kernel", "encoder.layer.{i}.intermediate.dense.weight", TRANSPOSE),
        (_BLOCK + "feed_forward.intermediate_dense.bias", "encoder.layer.{i}.intermediate.dense.bias", IDENTITY),
        (_BLOCK + "feed_forward.output_dense.kernel", "encoder.layer.{i}.output.dense.weight", TRANSPOSE),
        (_BLOCK + "feed_forward.output_dense.bias", "encoder.layer.{i}.output.dense.bias", IDENTITY),
        (_BLOCK + "feed_forward_layer_norm.gamma", "encoder.layer.{i}.output.LayerNorm.weight", IDENTITY),
        (_BLOCK + "feed_forward_layer_norm.beta", "encoder.layer.{i}.output.LayerNorm.bias", IDENTITY),
    ),
    POOLER: (
        ("encoder.pooler.kernel", "pooler.dense.weight", TRANSPOSE),
        ("encoder.pooler.bias", "pooler.dense.bias", IDENTITY),
    ),
    MLM: (
        ("mlm.transform_dense.kernel", "cls.predictions.transform.dense.weight", TRANSPOSE),
        ("mlm.transform_dense.bias", "cls.predictions.transform.dense.bias", IDENTITY),
        ("mlm.layer_norm.gamma", "cls.predictions.transform.LayerNorm.weight", IDENTITY),
        ("mlm.layer_norm.beta", "cls.predictions.transform.LayerNorm.bias", IDENTITY),
        ("mlm.output_bias", "cls.predictions.bias", IDENTITY),
    ),
    NSP: (
        ("nsp.dense.kernel", "cls.seq_relationship.weight", TRANSPOSE),
        ("nsp.dense.bias", "cls.seq_relationship.bias", IDENTITY),
    ),
    # The task heads: one Linear on the pooled output (sequence classification) or on every token
    # (token classification; question answering, whose 2 outputs are the start and end logits).
    CLASSIFIER: (
        ("classifier.dense.kernel", "classifier.weight", TRANSPOSE),
        ("classifier.dense.bias", "classifier.bias", IDENTITY),
    ),
    TOKEN_CLASSIFIER: (
        ("token_classifier.dense.kernel", "classifier.weight", TRANSPOSE),
        ("token_classifier.dense.bias", "classifier.bias", IDENTITY),
    ),
    SPAN: (
        ("span.dense.kernel", "qa_outputs.weight", TRANSPOSE),
        ("span.dense.bias", "qa_outputs.bias", IDENTITY),
    ),
}
# Prefixes that tell which heads a checkpoint holds. A sequence and a token classifier both name their
# head `classifier`: only config.json's `architectures` tells which one a checkpoint holds.
HF_PART_PREFIXES = {
    POOLER: "pooler.",
    MLM: "cls.predictions.",
    NSP: "cls.seq_relationship.",
    CLASSIFIER: "classifier.",
    TOKEN_CLASSIFIER: "classifier.",
    SPAN: "qa_outputs.",
}
# transformers' task classes (config.json `architectures`) -> the head part they hold. The family's are the heads
# of one Linear layer, as BERT's: on every token (token classification, question answering) or on the pooled output
# (ALBERT's sequence classifier, on AlbertModel's pooler; RoBERTa's, see HF_ROBERTA_CLASSIFIER).
HF_TASK_ARCHITECTURES = {
    "BertForSequenceClassification": CLASSIFIER,
    "BertForTokenClassification": TOKEN_CLASSIFIER,
    "BertForQuestionAnswering": SPAN,
    "AlbertForSequenceClassification": CLASSIFIER,
    "AlbertForTokenClassification": TOKEN_CLASSIFIER,
    "AlbertForQuestionAnswering": SPAN,
    "DistilBertForTokenClassification": TOKEN_CLASSIFIER,
    "DistilBertForQuestionAnswering": SPAN,
    "ElectraForTokenClassification": TOKEN_CLASSIFIER,
    "ElectraForQuestionAnswering": SPAN,
    "RobertaForSequenceClassification": CLASSIFIER,
    "RobertaForTokenClassification": TOKEN_CLASSIFIER,
    "RobertaForQuestionAnswering": SPAN,
    "XLMRobertaForSequenceClassification": CLASSIFIER,  # XLM-RoBERTa: RoBERTa's heads and names
    "XLMRobertaForTokenClassification": TOKEN_CLASSIFIER,
    "XLMRobertaForQuestionAnswering": SPAN,
}
# Task classes whose head ours cannot hold: class -> (the head part asked for, what differs). That head is left
# unread with a warning saying this; the encoder reads as any other.
HF_REFUSED_TASK_ARCHITECTURES = {
    "DistilBertForSequenceClassification": (
        CLASSIFIER,
        "its head is `pre_classifier` (a Linear layer and a ReLU on the first token) then `classifier`: two layers, "
        "where BertClassifier has one Linear layer on the pooled output and DistilBERT's encoder has no pooler",
    ),
    "ElectraForSequenceClassification": (
        CLASSIFIER,
        "its head (ElectraClassificationHead) is `classifier.dense` and a GELU on the first token, then "
        "`classifier.out_proj`: two layers, where BertClassifier has one Linear layer on the pooled output and "
        "ELECTRA's encoder has no pooler (BERT's pooler would apply tanh, not GELU)",
    ),
}
# Names with another spelling in some checkpoints: {name we look up: alternatives}.
HF_ALIASES = {"cls.predictions.bias": ("cls.predictions.decoder.bias",)}
# Tied to the word embeddings; read only to check that it is tied.
HF_TIED_DECODER = "cls.predictions.decoder.weight"
# Buffers and bookkeeping that are not weights.
HF_IGNORED_SUFFIXES = ("position_ids",)

HF_CONFIG = {  # our argument: config.json key
    "vocab_size": "vocab_size",
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "max_sequence_length": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "initializer_range": "initializer_range",
    "layer_norm_epsilon": "layer_norm_eps",
}
# transformers' ACT2FN names -> ours. "gelu" there is the exact (erf) GELU.
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
    "relu": "relu",
}

# ---------------------------------------------------------------------------
# BERT's family in transformers: ELECTRA, DistilBERT, ALBERT, RoBERTa. Names without the model's prefix
# (`electra.`, `distilbert.`, `albert.`, `roberta.`), as the BERT names drop `bert.`.
# ---------------------------------------------------------------------------
_HF_BERT_EMBEDDINGS = HF_WEIGHTS[EMBEDDINGS]
# ELECTRA (where embedding_size != hidden_size) and ALBERT map the embeddings to the hidden size.
HF_ELECTRA_PROJECTION = (
    ("encoder.embeddings.projection.kernel", "embeddings_project.weight", TRANSPOSE),
    ("encoder.embeddings.projection.bias", "embeddings_project.bias", IDENTITY),
)
HF_ALBERT_PROJECTION = (
    ("encoder.embeddings.projection.kernel", "encoder.embedding_hidden_mapping_in.weight", TRANSPOSE),
    ("encoder.embeddings.projection.bias", "encoder.embedding_hidden_mapping_in.bias", IDENTITY),
)
# The masked-LM heads of the family (transformers' AlbertMLMHead, ElectraGeneratorPredictions + generator_lm_head,
# DistilBertForMaskedLM's vocab_*, RobertaLMHead): BERT's `dense -> activation -> LayerNorm`, then the word embeddings
# (tied; their decoder matrix is only checked, `HF_FAMILIES[...]["tied_decoder"]`) and a bias. ALBERT's and ELECTRA's
# generator's transform ends at `embedding_size`, the embeddings' width.
# The family's token classifiers and span heads have BERT's names (`classifier.*`, `qa_outputs.*`).
_HF_TOKEN_HEADS = {part: HF_WEIGHTS[part] for part in (TOKEN_CLASSIFIER, SPAN)}
# RobertaForSequenceClassification (RobertaClassificationHead) computes `out_proj(tanh(dense(first token)))` on a
# RobertaModel built without its pooler: that is BERT's pooler, `tanh(dense(first token))`, then one Linear layer.
# Its `dense` is read as our pooler and `out_proj` as the classifier (a pooler stored too is not what that model
# computes: left unused).
HF_ROBERTA_CLASSIFIER = (
    ("encoder.pooler.kernel", "classifier.dense.weight", TRANSPOSE),
    ("encoder.pooler.bias", "classifier.dense.bias", IDENTITY),
    ("classifier.dense.kernel", "classifier.out_proj.weight", TRANSPOSE),
    ("classifier.dense.bias", "classifier.out_proj.bias", IDENTITY),
)
HF_ELECTRA_WEIGHTS = {
    EMBEDDINGS: _HF_BERT_EMBEDDINGS,
    LAYER: HF_WEIGHTS[LAYER],
    **_HF_TOKEN_HEADS,
    # ElectraForMaskedLM, the generator: its own (smaller) encoder under `electra.`, this head on it.
    MLM: (
        ("mlm.transform_dense.kernel", "generator_predictions.dense.weight", TRANSPOSE),
        ("mlm.transform_dense.bias", "generator_predictions.dense.bias", IDENTITY),
        ("mlm.layer_norm.gamma", "generator_predictions.LayerNorm.weight", IDENTITY),
        ("mlm.layer_norm.beta", "generator_predictions.LayerNorm.bias", IDENTITY),
        ("mlm.output_bias", "generator_lm_head.bias", IDENTITY),
    ),
    DISCRIMINATOR: (
        ("discriminator.dense.kernel", "discriminator_predictions.dense.weight", TRANSPOSE),
        ("discriminator.dense.bias", "discriminator_predictions.dense.bias", IDENTITY),
        ("discriminator.prediction.kernel", "discriminator_predictions.dense_prediction.weight", TRANSPOSE),
        ("discriminator.prediction.bias", "discriminator_predictions.dense_prediction.bias", IDENTITY),
    ),
}
_D_BLOCK = "transformer.layer.{i}."
HF_DISTILBERT_WEIGHTS = {
    EMBEDDINGS: tuple(entry for entry in _HF_BERT_EMBEDDINGS if "token_type" not in entry[1]),
    **_HF_TOKEN_HEADS,
    LAYER: (
        (_BLOCK + "attention.query_dense.kernel", _D_BLOCK + "attention.q_lin.weight", TRANSPOSE),
        (_BLOCK + "attention.query_dense.bias", _D_BLOCK + "attention.q_lin.bias", IDENTITY),
        (_BLOCK + "attention.key_dense.kernel", _D_BLOCK + "attention.k_lin.weight", TRANSPOSE),
        (_BLOCK + "attention.key_dense.bias", _D_BLOCK + "attention.k_lin.bias", IDENTITY),
        (_BLOCK + "attention.value_dense.kernel", _D_BLOCK + "attention.v_lin.weight", TRANSPOSE),
        (_BLOCK + "attention.value_dense.bias", _D_BLOCK + "attention.v_lin.bias", IDENTITY),
        (_BLOCK + "attention.output_dense.kernel", _D_BLOCK + "attention.out_lin.weight", TRANSPOSE),
        (_BLOCK + "attention.output_dense.bias", _D_BLOCK + "attention.out_lin.bias", IDENTITY),
        (_BLOCK + "attention_layer_norm.gamma", _D_BLOCK + "sa_layer_norm.weight", IDENTITY),
        (_BLOCK + "attention_layer_norm.beta", _D_BLOCK + "sa_layer_norm.bias", IDENTITY),
        (_BLOCK + "feed_forward.intermediate_dense.kernel", _D_BLOCK + "ffn.lin1.weight", TRANSPOSE),
        (_BLOCK + "feed_forward.intermediate_dense.bias", _D_BLOCK + "ffn.lin1.bias", IDENTITY),
        (_BLOCK + "feed_forward.output_dense.kernel", _D_BLOCK + "ffn.lin2.weight", TRANSPOSE),
        (_BLOCK + "feed_forward.output_dense.bias", _D_BLOCK + "ffn.lin2.bias", IDENTITY),
        (_BLOCK + "feed_forward_layer_norm.gamma", _D_BLOCK + "output_layer_norm.weight", IDENTITY),
        (_BLOCK + "feed_forward_layer_norm.beta", _D_BLOCK + "output_layer_norm.bias", IDENTITY),
    ),
    MLM: (  # the output bias is the projector's own (`vocab_projector.bias`)
        ("mlm.transform_dense.kernel", "vocab_transform.weight", TRANSPOSE),
        ("mlm.transform_dense.bias", "vocab_transform.bias", IDENTITY),
        ("mlm.layer_norm.gamma", "vocab_layer_norm.weight", IDENTITY),
        ("mlm.layer_norm.beta", "vocab_layer_norm.bias", IDENTITY),
        ("mlm.output_bias", "vocab_projector.bias", IDENTITY),
    ),
}
# ALBERT: one group of one layer, shared by every step. No `{i}`: the one block is
# `transformer_layers.0`, read once.
_A_SHARED = "encoder.transformer_layers.0."
_A_LAYER = "encoder.albert_layer_groups.0.albert_layers.0."
HF_ALBERT_WEIGHTS = {
    EMBEDDINGS: _HF_BERT_EMBEDDINGS,
    **_HF_TOKEN_HEADS,
    CLASSIFIER: HF_WEIGHTS[CLASSIFIER],  # AlbertForSequenceClassification: one Linear layer on AlbertModel's pooler
    LAYER: (
        (_A_SHARED + "attention.query_dense.kernel", _A_LAYER + "attention.query.weight", TRANSPOSE),
        (_A_SHARED + "attention.query_dense.bias", _A_LAYER + "attention.query.bias", IDENTITY),
        (_A_SHARED + "attention.key_dense.kernel", _A_LAYER + "attention.key.weight", TRANSPOSE),
        (_A_SHARED + "attention.key_dense.bias", _A_LAYER + "attention.key.bias", IDENTITY),
        (_A_SHARED + "attention.value_dense.kernel", _A_LAYER + "attention.value.weight", TRANSPOSE),
        (_A_SHARED + "attention.value_dense.bias", _A_LAYER + "attention.value.bias", IDENTITY),
        (_A_SHARED + "attention.output_dense.kernel", _A_LAYER + "attention.dense.weight", TRANSPOSE),
        (_A_SHARED + "attention.output_dense.bias", _A_LAYER + "attention.dense.bias", IDENTITY),
        (_A_SHARED + "attention_layer_norm.gamma", _A_LAYER + "attention.LayerNorm.weight", IDENTITY),
        (_A_SHARED + "attention_layer_norm.beta", _A_LAYER + "attention.LayerNorm.bias", IDENTITY),
        (_A_SHARED + "feed_forward.intermediate_dense.kernel", _A_LAYER + "ffn.weight", TRANSPOSE),
        (_A_SHARED + "feed_forward.intermediate_dense.bias", _A_LAYER + "ffn.bias", IDENTITY),
        (_A_SHARED + "feed_forward.output_dense.kernel", _A_LAYER + "ffn_output.weight", TRANSPOSE),
        (_A_SHARED + "feed_forward.output_dense.bias", _A_LAYER + "ffn_output.bias", IDENTITY),
        (_A_SHARED + "feed_forward_layer_norm.gamma", _A_LAYER + "full_layer_layer_norm.weight", IDENTITY),
        (_A_SHARED + "feed_forward_layer_norm.beta", _A_LAYER + "full_layer_layer_norm.bias", IDENTITY),
    ),
    POOLER: (
        ("encoder.pooler.kernel", "pooler.weight", TRANSPOSE),
        ("encoder.pooler.bias", "pooler.bias", IDENTITY),
    ),
    MLM: (  # AlbertForMaskedLM / AlbertForPreTraining; `sop_classifier` (sentence order) is not read
        ("mlm.transform_dense.kernel", "predictions.dense.weight", TRANSPOSE),
        ("mlm.transform_dense.bias", "predictions.dense.bias", IDENTITY),
        ("mlm.layer_norm.gamma", "predictions.LayerNorm.weight", IDENTITY),
        ("mlm.layer_norm.beta", "predictions.LayerNorm.bias", IDENTITY),
        ("mlm.output_bias", "predictions.bias", IDENTITY),
    ),
}
# RoBERTa's encoder has BERT's names; its masked-LM head is `lm_head.*`.
HF_ROBERTA_WEIGHTS = {
    **{part: HF_WEIGHTS[part] for part in (EMBEDDINGS, LAYER, POOLER)},
    **_HF_TOKEN_HEADS,
    CLASSIFIER: HF_ROBERTA_CLASSIFIER,
    MLM: (
        ("mlm.transform_dense.kernel", "lm_head.dense.weight", TRANSPOSE),
        ("mlm.transform_dense.bias", "lm_head.dense.bias", IDENTITY),
        ("mlm.layer_norm.gamma", "lm_head.layer_norm.weight", IDENTITY),
        ("mlm.layer_norm.beta", "lm_head.layer_norm.bias", IDENTITY),
        ("mlm.output_bias", "lm_head.bias", IDENTITY),
    ),
}

# Each family: its prefix in task checkpoints, weight table, the parts it may hold, its config keys, and what its
# config fixes, and its kind of tokenizer (`bert_keras.text.folders`). Config keys default to BERT's (HF_CONFIG); the projection is added where `embedding_size` is set.
# Its masked LM: `tied_decoder`, the decoder matrix, tied to the word embeddings (read only to check that it is);
# `aliases`, other spellings of its names (as HF_ALIASES); `mlm_activation`, the head's activation where it is
# fixed in transformers' code rather than the config's (RobertaLMHead's and ElectraGeneratorPredictions' exact
# GELU); None: the encoder's (`activation_key`: BERT's and ALBERT's `hidden_act`, DistilBERT's `activation`).
# The family's task heads are found by BERT's prefixes (`HF_PART_PREFIXES`); DistilBERT and ELECTRA have no sequence
# classifier we read (HF_REFUSED_TASK_ARCHITECTURES).
_HF_TASK_HEAD_PREFIXES = {part: HF_PART_PREFIXES[part] for part in TASK_HEADS}
_HF_TOKEN_HEAD_PREFIXES = {part: HF_PART_PREFIXES[part] for part in (TOKEN_CLASSIFIER, SPAN)}
HF_FAMILIES = {
    "bert": dict(prefix="bert.", weights=HF_WEIGHTS, part_prefixes=HF_PART_PREFIXES, config=HF_CONFIG,
                 activation_key="hidden_act", fixed={}, tokenizer="wordpiece",
                 tied_decoder=HF_TIED_DECODER, aliases=HF_ALIASES, mlm_activation=None),
    "electra": dict(prefix="electra.", weights=HF_ELECTRA_WEIGHTS, projection=HF_ELECTRA_PROJECTION,
                    part_prefixes={MLM: "generator_predictions.", DISCRIMINATOR: "discriminator_predictions.",
                                   **_HF_TOKEN_HEAD_PREFIXES},
                    config={**HF_CONFIG, "embedding_size": "embedding_size"}, activation_key="hidden_act",
                    fixed={"use_pooler": False}, tokenizer="wordpiece",
                    tied_decoder="generator_lm_head.weight", aliases={}, mlm_activation="gelu"),
    "distilbert": dict(prefix="distilbert.", weights=HF_DISTILBERT_WEIGHTS,
                       part_prefixes={MLM: "vocab_transform.", **_HF_TOKEN_HEAD_PREFIXES},
                       config={
                           "vocab_size": "vocab_size",
                           "num_layers": "n_layers",
                           "hidden_size": "dim",
                           "num_heads": "n_heads",
                           "intermediate_size": "hidden_dim",
                           "dropout": "dropout",
                           "attention_dropout": "attention_dropout",
                           "max_sequence_length": "max_position_embeddings",
                           "initializer_range": "initializer_range",
                       },
                       # DistilBERT's LayerNorms use torch's eps=1e-12, fixed in its code, not in its config.
                       activation_key="activation",
                       fixed={"type_vocab_size": 0, "use_pooler": False, "layer_norm_epsilon": 1e-12},
                       tokenizer="wordpiece", tied_decoder="vocab_projector.weight", aliases={}, mlm_activation=None),
    "albert": dict(prefix="albert.", weights=HF_ALBERT_WEIGHTS, projection=HF_ALBERT_PROJECTION,
                   part_prefixes={POOLER: "pooler.", MLM: "predictions.", **_HF_TASK_HEAD_PREFIXES},
                   config={**HF_CONFIG, "embedding_size": "embedding_size"}, activation_key="hidden_act",
                   fixed={"shared_layers": True}, tokenizer="sentencepiece",
                   tied_decoder="predictions.decoder.weight",
                   aliases={"predictions.bias": ("predictions.decoder.bias",)}, mlm_activation=None),
    "roberta": dict(prefix="roberta.", weights=HF_ROBERTA_WEIGHTS,
                    part_prefixes={POOLER: "pooler.", MLM: "lm_head.", **_HF_TASK_HEAD_PREFIXES},
                    config=HF_CONFIG, activation_key="hidden_act", fixed={}, tokenizer="byte_bpe",
                    tied_decoder="lm_head.decoder.weight", aliases={"lm_head.bias": ("lm_head.decoder.bias",)},
                    mlm_activation="gelu"),
}
# XLM-RoBERTa (XLMRobertaModel, a RobertaModel): RoBERTa's weights under `roberta.`, positions and heads; its tokenizer
# a SentencePiece Unigram model in tokenizer.json (`bert_keras.text.unigram_tokenizer`).
HF_FAMILIES["xlm-roberta"] = dict(HF_FAMILIES["roberta"], tokenizer="unigram")
# The families whose positions start after the padding index (pad_token_id + 1), as fairseq's RoBERTa.
HF_PADDING_OFFSET_FAMILIES = ("roberta", "xlm-roberta")
HF_MODEL_TYPES = tuple(sorted(HF_FAMILIES))

# ---------------------------------------------------------------------------
# Original Google BERT (google-research/bert, TF1 checkpoints `bert_model.ckpt`).
# ---------------------------------------------------------------------------
_G_BLOCK = "bert/encoder/layer_{i}/"
GOOGLE_WEIGHTS = {
    EMBEDDINGS: (
        ("encoder.embeddings.word_embeddings.embeddings", "bert/embeddings/word_embeddings", IDENTITY),
        ("encoder.embeddings.position_embeddings", "bert/embeddings/position_embeddings", IDENTITY),
        ("encoder.embeddings.type_embeddings.embeddings", "bert/embeddings/token_type_embeddings", IDENTITY),
        ("encoder.embeddings.layer_norm.gamma", "bert/embeddings/LayerNorm/gamma", IDENTITY),
        ("encoder.embeddings.layer_norm.beta", "bert/embeddings/LayerNorm/beta", IDENTITY),
    ),
    LAYER: (
        (_BLOCK + "attention.query_dense.kernel", _G_BLOCK + "attention/self/query/kernel", IDENTITY),
        (_BLOCK + "attention.query_dense.bias", _G_BLOCK + "attention/self/query/bias", IDENTITY),
        (_BLOCK + "attention.key_dense.kernel", _G_BLOCK + "attention/self/key/kernel", IDENTITY),
        (_BLOCK + "attention.key_dense.bias", _G_BLOCK + "attention/self/key/bias", IDENTITY),
        (_BLOCK + "attention.value_dense.kernel", _G_BLOCK + "attention/self/value/kernel", IDENTITY),
        (_BLOCK + "attention.value_dense.bias", _G_BLOCK + "attention/self/value/bias", IDENTITY),
        (_BLOCK + "attention.output_dense.kernel", _G_BLOCK + "attention/output/dense/kernel", IDENTITY),
        (_BLOCK + "attention.output_dense.bias", _G_BLOCK + "attention/output/dense/bias", IDENTITY),
        (_BLOCK + "attention_layer_norm.gamma", _G_BLOCK + "attention/output/LayerNorm/gamma", IDENTITY),
        (_BLOCK + "attention_layer_norm.beta", _G_BLOCK + "attention/output/LayerNorm/beta", IDENTITY),
        (_BLOCK + "feed_forward.intermediate_dense.kernel", _G_BLOCK + "intermediate/dense/kernel", IDENTITY),
        (_BLOCK + "feed_forward.intermediate_dense.bias", _G_BLOCK + "intermediate/dense/bias", IDENTITY),
        (_BLOCK + "feed_forward.output_dense.kernel", _G_BLOCK + "output/dense/kernel", IDENTITY),
        (_BLOCK + "feed_forward.output_dense.bias", _G_BLOCK + "output/dense/bias", IDENTITY),
        (_BLOCK + "feed_forward_layer_norm.gamma", _G_BLOCK + "output/LayerNorm/gamma", IDENTITY),
        (_BLOCK + "feed_forward_layer_norm.beta", _G_BLOCK + "output/LayerNorm/beta", IDENTITY),
    ),
    POOLER: (
        ("encoder.pooler.kernel", "bert/pooler/dense/kernel", IDENTITY),
        ("encoder.pooler.bias", "bert/pooler/dense/bias", IDENTITY),
    ),
    MLM: (
        ("mlm.transform_dense.kernel", "cls/predictions/transform/dense/kernel", IDENTITY),
        ("mlm.transform_dense.bias", "cls/predictions/transform/dense/bias", IDENTITY),
        ("mlm.layer_norm.gamma", "cls/predictions/transform/LayerNorm/gamma", IDENTITY),
        ("mlm.layer_norm.beta", "cls/predictions/transform/LayerNorm/beta", IDENTITY),
        ("mlm.output_bias", "cls/predictions/output_bias", IDENTITY),
    ),
    NSP: (
        # Stored as (2, hidden) and applied with transpose_b=True.
        ("nsp.dense.kernel", "cls/seq_relationship/output_weights", TRANSPOSE),
        ("nsp.dense.bias", "cls/seq_relationship/output_bias", IDENTITY),
    ),
}
GOOGLE_PART_PREFIXES = {POOLER: "bert/pooler/", MLM: "cls/predictions/", NSP: "cls/seq_relationship/"}
# Optimizer slots and counters saved next to the weights.
GOOGLE_IGNORED_SUFFIXES = ("/adam_m", "/adam_v", "/Adam", "/Adam_1", "/Momentum")
GOOGLE_IGNORED_NAMES = ("global_step", "beta1_power", "beta2_power")

GOOGLE_CONFIG = {  # our argument: bert_config.json key
    "vocab_size": "vocab_size",
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "max_sequence_length": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "initializer_range": "initializer_range",
}
# google-research/bert's `gelu` is the tanh approximation (modeling.py), unlike transformers'.
GOOGLE_ACTIVATIONS = {"gelu": "gelu_approximate", "relu": "relu"}

# ---------------------------------------------------------------------------
# BERT's family in Google's TF1 checkpoints: ALBERT (google-research/albert) and ELECTRA (google-research/electra).
# A TF1 checkpoint says which model it holds by its variable names (`GOOGLE_FAMILY_MARKS`, first match wins).
# ---------------------------------------------------------------------------
# ALBERT (modeling.py): BERT's `bert/` embeddings and pooler; `embedding_hidden_mapping_in` maps the embeddings to
# the hidden size (only where they are narrower); one group of one layer, `transformer/group_0/inner_group_0/`,
# whose weights every step shares. Its LayerNorms are unnamed, so TF1 numbers them: `LayerNorm` after attention,
# `LayerNorm_1` after the feed-forward, whose output dense sits inside `intermediate/`. As the Hugging Face
# ALBERT table, no `{i}`: the one block is `transformer_layers.0`, read once.
_GA_LAYER = "bert/encoder/transformer/group_0/inner_group_0/"
GOOGLE_ALBERT_WEIGHTS = {
    EMBEDDINGS: GOOGLE_WEIGHTS[EMBEDDINGS],
    LAYER: (
        (_A_SHARED + "attention.query_dense.kernel", _GA_LAYER + "attention_1/self/query/kernel", IDENTITY),
        (_A_SHARED + "attention.query_dense.bias", _GA_LAYER + "attention_1/self/query/bias", IDENTITY),
        (_A_SHARED + "attention.key_dense.kernel", _GA_LAYER + "attention_1/self/key/kernel", IDENTITY),
        (_A_SHARED + "attention.key_dense.bias", _GA_LAYER + "attention_1/self/key/bias", IDENTITY),
        (_A_SHARED + "attention.value_dense.kernel", _GA_LAYER + "attention_1/self/value/kernel", IDENTITY),
        (_A_SHARED + "attention.value_dense.bias", _GA_LAYER + "attention_1/self/value/bias", IDENTITY),
        (_A_SHARED + "attention.output_dense.kernel", _GA_LAYER + "attention_1/output/dense/kernel", IDENTITY),
        (_A_SHARED + "attention.output_dense.bias", _GA_LAYER + "attention_1/output/dense/bias", IDENTITY),
        (_A_SHARED + "attention_layer_norm.gamma", _GA_LAYER + "LayerNorm/gamma", IDENTITY),
        (_A_SHARED + "attention_layer_norm.beta", _GA_LAYER + "LayerNorm/beta", IDENTITY),
        (_A_SHARED + "feed_forward.intermediate_dense.kernel", _GA_LAYER + "ffn_1/intermediate/dense/kernel", IDENTITY),
        (_A_SHARED + "feed_forward.intermediate_dense.bias", _GA_LAYER + "ffn_1/intermediate/dense/bias", IDENTITY),
        (_A_SHARED + "feed_forward.output_dense.kernel", _GA_LAYER + "ffn_1/intermediate/output/dense/kernel",
         IDENTITY),
        (_A_SHARED + "feed_forward.output_dense.bias", _GA_LAYER + "ffn_1/intermediate/output/dense/bias", IDENTITY),
        (_A_SHARED + "feed_forward_layer_norm.gamma", _GA_LAYER + "LayerNorm_1/gamma", IDENTITY),
        (_A_SHARED + "feed_forward_layer_norm.beta", _GA_LAYER + "LayerNorm_1/beta", IDENTITY),
    ),
    POOLER: GOOGLE_WEIGHTS[POOLER],
    # run_pretraining.py's masked LM has BERT's names: its transform ends at `embedding_size` (the embeddings'
    # width), its output is tied to `bert/embeddings/word_embeddings`.
    MLM: GOOGLE_WEIGHTS[MLM],
}
GOOGLE_ALBERT_PROJECTION = (
    ("encoder.embeddings.projection.kernel", "bert/encoder/embedding_hidden_mapping_in/kernel", IDENTITY),
    ("encoder.embeddings.projection.bias", "bert/encoder/embedding_hidden_mapping_in/bias", IDENTITY),
)
# ALBERT's `cls/seq_relationship` is sentence-order prediction, not next-sentence: left unused, as the Hugging Face
# ALBERT reader leaves `sop_classifier`. Its masked LM is read (`GOOGLE_ALBERT_WEIGHTS[MLM]`).
GOOGLE_ALBERT_PART_PREFIXES = {POOLER: "bert/pooler/", MLM: "cls/predictions/"}
GOOGLE_ALBERT_CONFIG = {**GOOGLE_CONFIG, "embedding_size": "embedding_size"}  # our argument: albert_config.json key
# Groups of layers (`group_N`) and layers in a group (`inner_group_N`) beyond the first: what
# num_hidden_groups > 1 or inner_group_num > 1 writes, and one shared block cannot hold.
GOOGLE_ALBERT_GROUPS = r"^bert/encoder/transformer/(group_[1-9]\d*|group_\d+/inner_group_[1-9]\d*)/"

# ELECTRA (model/modeling.py): BERT's names under `electra/` for the discriminator, the one read;
# `embeddings_project` maps narrower embeddings to the hidden size. No pooler. The generator lives under
# `generator/` (its own blocks; the embeddings are shared with `electra/embeddings`) and `generator_predictions/`:
# not read, the summary lists them unused. The replaced-token head `discriminator_predictions/` holds
# `dense` (hidden -> hidden, the activation) and `dense_1` (hidden -> 1), both `tf.layers.dense`.
GOOGLE_ELECTRA_WEIGHTS = {
    **{part: tuple((target, "electra/" + source[len("bert/"):], transform)
                   for target, source, transform in GOOGLE_WEIGHTS[part]) for part in (EMBEDDINGS, LAYER)},
    DISCRIMINATOR: (
        ("discriminator.dense.kernel", "discriminator_predictions/dense/kernel", IDENTITY),
        ("discriminator.dense.bias", "discriminator_predictions/dense/bias", IDENTITY),
        ("discriminator.prediction.kernel", "discriminator_predictions/dense_1/kernel", IDENTITY),
        ("discriminator.prediction.bias", "discriminator_predictions/dense_1/bias", IDENTITY),
    ),
}
GOOGLE_ELECTRA_PROJECTION = (
    ("encoder.embeddings.projection.kernel", "electra/embeddings_project/kernel", IDENTITY),
    ("encoder.embeddings.projection.bias", "electra/embeddings_project/bias", IDENTITY),
)
GOOGLE_ELECTRA_PART_PREFIXES = {DISCRIMINATOR: "discriminator_predictions/"}
# ELECTRA's `gelu` is the exact (erf) GELU (model/modeling.py), unlike BERT's and ALBERT's TF1 code.
GOOGLE_ELECTRA_ACTIVATIONS = {"gelu": "gelu", "relu": "relu"}
# ELECTRA's released zips hold no config: its sizes follow from `model_size` (util/training_utils.py), and its
# heads from the hidden size, max(1, hidden_size // 64). An optional BERT-style config may name them instead.
ELECTRA_HEAD_SIZE = 64
GOOGLE_ELECTRA_CONFIG = {**GOOGLE_CONFIG, "embedding_size": "embedding_size"}  # our argument: its config key

# Which model a TF1 checkpoint holds: the first family whose mark begins one of its variable names.
GOOGLE_FAMILY_MARKS = (("albert", "bert/encoder/transformer/"), ("electra", "electra/encoder/"), ("bert", "bert/"))

# ---------------------------------------------------------------------------
# keras-nlp / keras-hub `BertBackbone` (variable paths of Keras 3).
# ---------------------------------------------------------------------------
_K_BLOCK = "transformer_layer_{i}/"
KERAS_NLP_WEIGHTS = {
    EMBEDDINGS: (
        ("encoder.embeddings.word_embeddings.embeddings", "token_embedding/embeddings", IDENTITY),
        ("encoder.embeddings.position_embeddings", "position_embedding/embeddings", IDENTITY),
        ("encoder.embeddings.type_embeddings.embeddings", "segment_embedding/embeddings", IDENTITY),
        ("encoder.embeddings.layer_norm.gamma", "embeddings_layer_norm/gamma", IDENTITY),
        ("encoder.embeddings.layer_norm.beta", "embeddings_layer_norm/beta", IDENTITY),
    ),
    LAYER: (
        (_BLOCK + "attention.query_dense.kernel", _K_BLOCK + "self_attention_layer/query/kernel", RESHAPE),
        (_BLOCK + "attention.query_dense.bias", _K_BLOCK + "self_attention_layer/query/bias", RESHAPE),
        (_BLOCK + "attention.key_dense.kernel", _K_BLOCK + "self_attention_layer/key/kernel", RESHAPE),
        (_BLOCK + "attention.key_dense.bias", _K_BLOCK + "self_attention_layer/key/bias", RESHAPE),
        (_BLOCK + "attention.value_dense.kernel", _K_BLOCK + "self_attention_layer/value/kernel", RESHAPE),
        (_BLOCK + "attention.value_dense.bias", _K_BLOCK + "self_attention_layer/value/bias", RESHAPE),
        (_BLOCK + "attention.output_dense.kernel", _K_BLOCK + "self_attention_layer/attention_output/kernel", RESHAPE),
        (_BLOCK + "attention.output_dense.bias", _K_BLOCK + "self_attention_layer/attention_output/bias", IDENTITY),
        (_BLOCK + "attention_layer_norm.gamma", _K_BLOCK + "self_attention_layer_norm/gamma", IDENTITY),
        (_BLOCK + "attention_layer_norm.beta", _K_BLOCK + "self_attention_layer_norm/beta", IDENTITY),
        (_BLOCK + "feed_forward.intermediate_dense.kernel", _K_BLOCK + "feedforward_intermediate_dense/kernel", IDENTITY),
        (_BLOCK + "feed_forward.intermediate_dense.bias", _K_BLOCK + "feedforward_intermediate_dense/bias", IDENTITY),
        (_BLOCK + "feed_forward.output_dense.kernel", _K_BLOCK + "feedforward_output_dense/kernel", IDENTITY),
        (_BLOCK + "feed_forward.output_dense.bias", _K_BLOCK + "feedforward_output_dense/bias", IDENTITY),
        (_BLOCK + "feed_forward_layer_norm.gamma", _K_BLOCK + "feedforward_layer_norm/gamma", IDENTITY),
        (_BLOCK + "feed_forward_layer_norm.beta", _K_BLOCK + "feedforward_layer_norm/beta", IDENTITY),
    ),
    POOLER: (
        ("encoder.pooler.kernel", "pooled_dense/kernel", IDENTITY),
        ("encoder.pooler.bias", "pooled_dense/bias", IDENTITY),
    ),
}
KERAS_NLP_CONFIG = {  # our argument: BertBackbone argument
    "vocab_size": "vocabulary_size",
    "num_layers": "num_layers",
    "hidden_size": "hidden_dim",
    "num_heads": "num_heads",
    "intermediate_size": "intermediate_dim",
    "dropout": "dropout",
    "max_sequence_length": "max_sequence_length",
    "type_vocab_size": "num_segments",
}
# BertBackbone fixes these; an encoder must match them to be exported.
KERAS_NLP_FIXED = {
    "activation": "gelu_approximate",
    "layer_norm_epsilon": 1e-12,
    "position_embedding": "learned",
    "norm_first": False,
}
# The family's options, which BertBackbone has no argument for: an encoder must have BERT's value of each.
# (Its token types: at least one, checked on their own.) Each with the family it comes from, for the message.
KERAS_NLP_NO_FAMILY_OPTIONS = {
    "embedding_size": (None, "the embedding projection of ALBERT and ELECTRA"),
    "shared_layers": (False, "ALBERT's one block shared by every layer"),
    "position_offset": (0, "RoBERTa's position offset"),
    "use_pooler": (True, "no pooler, as DistilBERT and ELECTRA"),
}
KERAS_NLP_CLASS_NAMES = ("BertBackbone",)
KERAS_NLP_VOCABULARY = "assets/tokenizer/vocabulary.txt"
