"""The recipes' settings: one dataclass each, with defaults, field overrides by name, and clear errors."""

import dataclasses

import pytest

from bert_keras.training import FineTuneConfig, PretrainConfig


def test_options_replace_the_configs_fields():
    base = FineTuneConfig(seq_length=64, learning_rate=5e-5)
    config = FineTuneConfig.of(base, epochs=3)
    assert (config.seq_length, config.learning_rate, config.epochs) == (64, 5e-5, 3)
    assert base.epochs == 2  # the base is left as it was
    assert PretrainConfig.of(seed=7) == PretrainConfig(seed=7)


@pytest.mark.parametrize("cls, wrong", [(FineTuneConfig, "epoch"), (PretrainConfig, "lr")])
def test_an_unknown_option_names_the_fields(cls, wrong):
    with pytest.raises(TypeError, match=rf"Unknown option\(s\) \['{wrong}'\] of {cls.__name__}; its fields are \["):
        cls.of(**{wrong: 1})


def test_the_run_record_leaves_out_only_the_export_dtype():
    record = FineTuneConfig(lora_rank=4).record()
    assert set(record) == {field.name for field in dataclasses.fields(FineTuneConfig)} - {"export_dtype"}
    assert record["lora_targets"] == ["query", "key", "value", "attention_output", "intermediate", "output"]  # JSON-ready
    assert record["lora_rank"] == 4 and record["lora_learning_rate"] == 2e-3


def test_lora_trains_phase_2_at_its_own_rate():
    assert FineTuneConfig().phase_2_learning_rate == 5e-5
    assert FineTuneConfig(lora_rank=8).phase_2_learning_rate == 2e-3
    assert FineTuneConfig(lora_rank=8, lora_learning_rate=3e-3, learning_rate=1.0).phase_2_learning_rate == 3e-3


@pytest.mark.parametrize("cls, wrong", [(PretrainConfig, FineTuneConfig()), (FineTuneConfig, True)])
def test_a_config_of_another_kind_is_refused(cls, wrong):
    # `dataclasses.replace` would copy another recipe's config (or fail on a bool) without naming the argument.
    with pytest.raises(ValueError, match=rf"argument `config`, expected a {cls.__name__} or None. Received: config="):
        cls.of(wrong, epochs=1)


def test_lora_options_are_checked_where_they_are_defined():
    # The command line passes them through and names its flags (tests/commands/test_cli_finetune.py).
    assert FineTuneConfig(lora_rank=2, lora_targets="value, query,value").lora_targets == ("value", "query")
    with pytest.raises(ValueError, match=r"argument `lora_targets`, expected one of \['query', .*Received: lora_targets='qurey'"):
        FineTuneConfig(lora_rank=2, lora_targets=["query", "qurey"])
    with pytest.raises(ValueError, match=r"^`lora_targets` needs `lora_rank`: .* Received: lora_targets=\('query',\) and lora_rank=None"):
        FineTuneConfig(lora_targets="query", lora_learning_rate=1e-3)  # the first of the two is named
    with pytest.raises(ValueError, match=r"^`lora_learning_rate` needs `lora_rank`: .* Received: lora_learning_rate=0.001 and"):
        FineTuneConfig.of(lora_learning_rate=1e-3)
    assert FineTuneConfig(lora_targets=["query", "key", "value", "attention_output", "intermediate", "output"]).lora_rank is None
