"""Task models: an encoder, an optional preprocessor, and a head; pretrained in one line.

Every task takes an encoder — a `BertEncoder`, or a layer with the Hub dict
in and out such as `bert_keras.hub.KerasLayer` — and optionally a
preprocessor — `bert_keras.text.BertPreprocessor` or a Hub preprocess layer
— with which it takes raw strings. The encoder stays reachable as `.encoder`
(freeze it with `task.encoder.trainable = False`). `Task.from_checkpoint(path,
...)` builds the task on pretrained weights with the checkpoint's own
vocabulary and casing: any checkpoint `bert_keras.checkpoints.load_checkpoint`
reads, or a Hub module pair written by `bert-keras convert` (loaded as Hub
layers).

One module per task (`classifier`, `tagger`, `reader`, `sentence_encoder`,
`pretrainer`), each owning its serving computation; `_task` holds what every
task model shares, `_pretrained` loads what every task starts from.
"""

from bert_keras.tasks.pretrainer import (
    MLM_LOGITS,
    NSP_LOGITS,
    BertPretrainer,
    checkpoint_pretrainer,
    pretraining_losses,
    pretraining_metrics,
)
from bert_keras.tasks._pretrained import load_encoder_and_preprocessor
from bert_keras.tasks.classifier import BertClassifier
from bert_keras.tasks.reader import END_LOGITS, START_LOGITS, BertSpanLabeler
from bert_keras.tasks.tagger import BertTokenClassifier

__all__ = [
    "BertClassifier",
    "BertPretrainer",
    "BertSpanLabeler",
    "BertTokenClassifier",
    "END_LOGITS",
    "MLM_LOGITS",
    "NSP_LOGITS",
    "START_LOGITS",
    "checkpoint_pretrainer",
    "load_encoder_and_preprocessor",
    "pretraining_losses",
    "pretraining_metrics",
]
