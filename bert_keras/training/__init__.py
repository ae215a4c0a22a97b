"""Training: one run harness, the backups that make a run resumable exactly, and the recipes over them.

- `Harness` (`harness.py`): a run's strategy, dtype scope, feeding, per-epoch
  snapshots and exact resume, and who writes.
- `training.backup`: the atomic snapshots, the backup's lock and run record,
  each worker's own backup and the epoch the workers resume from.
- `training.strategy`: `make_strategy` (over `cluster`'s `TF_CONFIG` and
  rendezvous), who is the chief, a `fit` of one's own under several replicas
  (`trainable_model`); `training.feeding`: each replica's slice of every
  global batch (`distribute_batches`).
- Recipes: `finetune` (the two phases) and one pipeline, `recipe.run_recipe`,
  running a task's `Recipe`: `finetune_classifier` / `finetune_tagger` /
  `finetune_reader` (`FineTuneConfig`),
  `run_pretraining` (`PretrainConfig`) and `finetune_sentence_encoder`
  (`ContrastiveConfig`: pairs, in-batch negatives gathered across replicas).
"""

from bert_keras.training.backup import EpochBackup, claim_backup
from bert_keras.training.data import text_dataset
from bert_keras.training.config import ContrastiveConfig, FineTuneConfig, PretrainConfig
from bert_keras.training.contrastive import InBatchNegatives, finetune_sentence_encoder
from bert_keras.training.classifying import finetune_classifier
from bert_keras.training.finetune import FineTuneHistory, FineTuneResult, finetune
from bert_keras.training.harness import Harness
from bert_keras.training.reading import finetune_reader
from bert_keras.training.tagging import finetune_tagger
from bert_keras.training.pretrain import PretrainingResult, ProgressCallback, run_pretraining

__all__ = [
    "ContrastiveConfig",
    "EpochBackup",
    "FineTuneConfig",
    "FineTuneHistory",
    "FineTuneResult",
    "Harness",
    "InBatchNegatives",
    "PretrainConfig",
    "PretrainingResult",
    "ProgressCallback",
    "claim_backup",
    "finetune",
    "finetune_classifier",
    "finetune_reader",
    "finetune_sentence_encoder",
    "finetune_tagger",
    "run_pretraining",
    "text_dataset",
]
