"""The settings of the recipes: one dataclass each, filled by the CLI, stored in a backup's run record.

A recipe takes one (`finetune_classifier(..., config=FineTuneConfig(...))`)
or its fields by name (`finetune_classifier(..., epochs=3)`), which replace
the config's (`FineTuneConfig.of`).
"""

import dataclasses

from bert_keras.lora import LORA_TARGETS, check_lora_targets


class _Options:
    @classmethod
    def of(cls, config=None, **options):
        """`config` (or the defaults) with `options` replaced; an unknown option is a clear error."""
        if config is not None and not isinstance(config, cls):
            raise ValueError(f"Received an invalid value for argument `config`, expected a {cls.__name__} or None. "
                             f"Received: config={type(config).__name__}")
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"Unknown option(s) {unknown} of {cls.__name__}; its fields are {sorted(names)}.")
        return dataclasses.replace(config or cls(), **options)


@dataclasses.dataclass
class FineTuneConfig(_Options):
    """What a fine-tune trains: the recipe's settings, recorded in the backup's run record.

    Attributes:
        seq_length: int. Packing length of the classifier's preprocessor. Defaults to `128`.
        batch_size: int. The global batch size (a multiple of the replicas). Defaults to `32`.
        head_epochs: int. Epochs of phase 1, encoder frozen (0 skips it). Defaults to `1`.
        head_learning_rate: float. Adam's rate in phase 1. Defaults to `1e-3`.
        epochs: int. Epochs of phase 2, encoder unfrozen. Defaults to `2`.
        learning_rate: float. Peak AdamW rate of phase 2. Defaults to `5e-5`
            (on the demo's tweets, MiniLM-L6 reached 0.7654 test accuracy at
            5e-5 and 0.7314 at 2e-5: docs/demo.md).
        warmup_fraction, weight_decay, clipnorm: BERT's recipe (0.1, 0.01, 1.0).
        dropout: float. Dropout on the pooled output. Defaults to `0.1`.
        seed: int. Seeds the split, the shuffling and the head's initialisation. Defaults to `0`.
        validation_fraction: float. Held out of `train` when no validation data is given. Defaults to `0.1`.
        dtype: optional Keras dtype policy of the model (e.g. `"mixed_bfloat16"`).
        early_stopping: optional int. Patience in epochs on the validation
            loss; the best weights are kept (`keras.callbacks.EarlyStopping`).
        class_weights: optional `"balanced"` (scikit-learn's rule) or a dict of class id -> weight.
        lora_rank: optional int. Train LoRA adapters of this rank in phase 2
            instead of the whole encoder (`bert_keras.lora`); merged after training.
        lora_targets: the projections that get adapters. Defaults to all six
            of every block (`bert_keras.lora.LORA_TARGETS`).
        lora_learning_rate: float. Peak AdamW rate of a LoRA phase 2 (in place
            of `learning_rate`). Defaults to `2e-3`. The targets and the rate
            are the best of a sweep on the demo's tweets, where LoRA with them
            reached 0.7634 test accuracy to full fine-tuning's 0.7654, training
            1.5% of the parameters (benchmarks/results/lora_sweep.md).
        export_dtype: `"float32"` or `"bfloat16"`: compute dtype of the exported classifier.
    """

    seq_length: int = 128
    batch_size: int = 32
    head_epochs: int = 1
    head_learning_rate: float = 1e-3
    epochs: int = 2
    learning_rate: float = 5e-5
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    clipnorm: float = 1.0
    dropout: float = 0.1
    seed: int = 0
    validation_fraction: float = 0.1
    dtype: str | None = None
    early_stopping: int | None = None
    class_weights: str | dict | None = None
    lora_rank: int | None = None
    lora_targets: tuple = tuple(LORA_TARGETS)
    lora_learning_rate: float = 2e-3
    export_dtype: str = "float32"

    def __post_init__(self):
        # LoRA's options are checked here, where they are defined: the command line passes them through.
        self.lora_targets = check_lora_targets(self.lora_targets)
        if self.lora_rank is None:
            defaults = {field.name: field.default for field in dataclasses.fields(self)}
            for name in ("lora_targets", "lora_learning_rate"):
                if getattr(self, name) != defaults[name]:
                    raise ValueError(f"`{name}` needs `lora_rank`: LoRA's options apply to a LoRA fine-tune only. "
                                     f"Received: {name}={getattr(self, name)!r} and lora_rank=None")

    @property
    def phase_2_learning_rate(self):
        """The peak rate of phase 2: `lora_learning_rate` with LoRA, else `learning_rate`."""
        return self.learning_rate if self.lora_rank is None else self.lora_learning_rate

    def record(self):
        """The settings that decide the trained weights (the run record's part of them)."""
        record = dataclasses.asdict(self)
        record.pop("export_dtype")
        record["lora_targets"] = list(self.lora_targets)
        return record


@dataclasses.dataclass
class PretrainConfig(_Options):
    """What a pre-training run trains (`run_pretraining`); recorded in the backup's run record.

    Attributes:
        seq_length: int. Defaults to `128`.
        batch_size: int. Global batch size (a multiple of the replicas). Defaults to `32`.
        epochs: int. Defaults to `1`.
        steps_per_epoch: int. Steps between backups. Defaults to one pass
            over the instances (`num_instances // batch_size`).
        learning_rate: float. Peak learning rate. Defaults to `1e-4`.
        warmup_steps: int. Defaults to 10% of all steps.
        weight_decay: float. AdamW weight decay. Defaults to `0.01`.
        max_predictions_per_seq: int. Defaults to `20`.
        masked_lm_prob: float. Defaults to `0.15`.
        short_seq_prob: float. Defaults to `0.1`.
        whole_word_masking: bool. Defaults to `False`.
        dupe_factor: int. Differently cut passes over the corpus. Defaults to `1`.
        seed: int. Seeds data, masking and initialisation (through
            `keras.utils.set_random_seed`). Defaults to `0`.
        dtype: optional Keras dtype policy of the model (e.g.
            `"mixed_bfloat16"`: bfloat16 compute, float32 weights and losses).
    """

    seq_length: int = 128
    batch_size: int = 32
    epochs: int = 1
    steps_per_epoch: int | None = None
    learning_rate: float = 1e-4
    warmup_steps: int | None = None
    weight_decay: float = 0.01
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    whole_word_masking: bool = False
    dupe_factor: int = 1
    seed: int = 0
    dtype: str | None = None


    def data_args(self):
        """The arguments of `text.pretraining.pretraining_dataset` this config sets."""
        return dict(seq_length=self.seq_length, batch_size=self.batch_size, max_predictions_per_seq=self.max_predictions_per_seq,
                    masked_lm_prob=self.masked_lm_prob, short_seq_prob=self.short_seq_prob,
                    whole_word_masking=self.whole_word_masking)


@dataclasses.dataclass
class ContrastiveConfig(_Options):
    """What a contrastive fine-tune of a sentence encoder trains (`finetune_sentence_encoder`).

    Attributes:
        batch_size: int. The global batch: each anchor's negatives are the
            other `batch_size - 1` positives, whatever the replicas. Defaults to `32`.
        epochs: int. Defaults to `1`.
        learning_rate: float. Peak AdamW rate. Defaults to `2e-5`.
        warmup_fraction, weight_decay, clipnorm: the optimizer's (0.1, 0.01, 1.0).
        scale: float. Inverse temperature of the scaled cosines. Defaults to `20.0`.
        seed: int. Seeds the order of the pairs. Defaults to `0`.
    """

    batch_size: int = 32
    epochs: int = 1
    learning_rate: float = 2e-5
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    clipnorm: float = 1.0
    scale: float = 20.0
    seed: int = 0

    def record(self):
        """The settings that decide the trained weights (the run record's part of them)."""
        return dataclasses.asdict(self)
