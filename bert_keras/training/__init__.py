"""Training: one run harness, the backups that make a run resumable exactly, and the recipes over them.

- `Harness` (`harness.py`): a run's strategy, dtype scope, feeding, per-epoch
  snapshots and exact resume, and who writes.
- `training.backup`: the atomic snapshots, the backup's lock and run record.
- Recipes: `finetune` / `finetune_classifier` (`FineTuneConfig`) and
  `run_pretraining` (`PretrainConfig`).
"""

from bert_keras.training.backup import EpochBackup, claim_backup
from bert_keras.training.data import text_dataset
from bert_keras.training.config import FineTuneConfig, PretrainConfig
from bert_keras.training.finetune import FineTuneHistory, FineTuneResult, finetune, finetune_classifier
from bert_keras.training.harness import Harness
from bert_keras.training.pretrain import PretrainingResult, ProgressCallback, run_pretraining

__all__ = [
    "EpochBackup",
    "FineTuneConfig",
    "FineTuneHistory",
    "FineTuneResult",
    "Harness",
    "PretrainConfig",
    "PretrainingResult",
    "ProgressCallback",
    "claim_backup",
    "finetune",
    "finetune_classifier",
    "run_pretraining",
    "text_dataset",
]
