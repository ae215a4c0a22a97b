import os

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import hub
from bert_keras.export import export_encoder, export_module_pair
from tests.helpers import assert_close
from tests.hub.conftest import VOCAB, encoder_inputs


@pytest.mark.slow
def test_encoder_module_matches_the_keras_encoder(encoder_dir, tiny_encoder):
    module = hub.load(encoder_dir)
    inputs = encoder_inputs()
    ours = tiny_encoder(inputs)
    theirs = module({k: tf.constant(v) for k, v in inputs.items()}, training=False)
    assert sorted(theirs) == ["default", "encoder_outputs", "pooled_output", "sequence_output"]
    assert theirs["pooled_output"].dtype == tf.float32
    assert theirs["sequence_output"].shape == (4, 10, 16)
    assert len(theirs["encoder_outputs"]) == 2
    assert_close(theirs["sequence_output"], ours["sequence_output"], atol=1e-6)
    assert_close(theirs["pooled_output"], ours["pooled_output"], atol=1e-6)
    assert_close(theirs["default"], theirs["pooled_output"], atol=0)
    assert_close(theirs["encoder_outputs"][-1], theirs["sequence_output"], atol=0)


def test_encoder_module_attributes(encoder_dir, tiny_encoder):
    module = hub.load(encoder_dir)
    assert len(module.variables) == len(tiny_encoder.weights) == 39
    assert len(module.trainable_variables) == 39
    assert list(module.regularization_losses) == []
    assert bool(module.do_lower_case.numpy()) is True
    with open(module.vocab_file.asset_path.numpy().decode()) as f:
        assert f.read().split() == VOCAB
    table = {v.name.split(":")[0]: v for v in module.variables}
    assert any(name.endswith("position_embeddings") for name in table)


def test_training_flag_reaches_dropout(encoder_dir):
    module = hub.load(encoder_dir)
    inputs = {k: tf.constant(v) for k, v in encoder_inputs().items()}
    a = module(inputs, training=False)["pooled_output"]
    b = module(inputs, training=False)["pooled_output"]
    c = module(inputs, training=True)["pooled_output"]
    assert_close(a, b, atol=0)
    assert float(tf.reduce_max(tf.abs(a - c))) > 1e-4


def test_serving_signature_has_flat_outputs(encoder_dir):
    module = hub.load(encoder_dir)
    serve = module.signatures["serving_default"]
    outputs = serve(**{k: tf.constant(v) for k, v in encoder_inputs().items()})
    assert sorted(outputs) == ["default", "encoder_outputs_0", "encoder_outputs_1", "pooled_output", "sequence_output"]


def test_export_refuses_to_overwrite(encoder_dir, tiny_encoder, vocab_file):
    import pytest

    with pytest.raises(FileExistsError, match="already exists; pass overwrite=True"):
        export_encoder(tiny_encoder, encoder_dir, vocab_file, do_lower_case=True)


def test_failed_export_leaves_nothing(tmp_path, tiny_encoder):
    import os
    import pytest

    with pytest.raises(FileNotFoundError, match="vocab_file"):
        export_encoder(tiny_encoder, str(tmp_path / "out"), str(tmp_path / "missing.txt"), do_lower_case=True)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_encoder_module_with_mlm_sub_object(tmp_path, vocab_file):
    from bert_keras import BertEncoder
    from bert_keras.tasks.pretrainer import BertPretrainer
    from tests.hub.conftest import TINY

    encoder = BertEncoder(**TINY)
    pretrainer = BertPretrainer(encoder)
    path = export_encoder(encoder, str(tmp_path / "with_mlm"), vocab_file, do_lower_case=True, pretrainer=pretrainer)
    module = hub.load(path)
    inputs = encoder_inputs()
    inputs["masked_lm_positions"] = np.array([[1, 2, 0]] * 4, "int32")
    tensors = {k: tf.constant(v) for k, v in inputs.items()}
    outputs = module.mlm(tensors, training=False)
    assert sorted(outputs) == ["default", "encoder_outputs", "mlm_logits", "pooled_output", "sequence_output"]
    assert outputs["mlm_logits"].shape == (4, 3, len(VOCAB))
    assert outputs["mlm_logits"].dtype == tf.float32
    assert_close(outputs["mlm_logits"], pretrainer(inputs)["mlm_logits"], atol=1e-5)
    plain = module({k: tensors[k] for k in ("input_word_ids", "input_mask", "input_type_ids")})
    assert_close(outputs["pooled_output"], plain["pooled_output"], atol=1e-6)
    # The root module lists only the encoder's variables; the head's live in the mlm sub-object.
    assert len(module.variables) == len(encoder.weights)
    assert len(module.mlm.variables) == len(pretrainer.weights) > len(encoder.weights)


@pytest.mark.slow
def test_preprocess_module_api(preprocess_dir):
    module = hub.load(preprocess_dir)
    sentences = tf.constant(["the movie was great", "i loved it !", "boring"])
    packed = module(sentences)
    assert sorted(packed) == ["input_mask", "input_type_ids", "input_word_ids"]
    assert all(packed[k].dtype == tf.int32 and packed[k].shape == (3, 16) for k in packed)

    tokens = module.tokenize(sentences)
    assert isinstance(tokens, tf.RaggedTensor) and tokens.dtype == tf.int32
    assert tokens.shape.rank == 3 and tokens.ragged_rank == 2
    assert tokens.to_list()[0] == [[VOCAB.index("the")], [VOCAB.index("movie")], [VOCAB.index("was")], [VOCAB.index("great")]]

    special = {k: int(v) for k, v in module.tokenize.get_special_tokens_dict().items()}
    assert special == {"vocab_size": len(VOCAB), "start_of_sequence_id": 2, "end_of_segment_id": 3, "padding_id": 0, "mask_id": 4}

    pairs = module.bert_pack_inputs([tokens, module.tokenize(tf.constant(["fun", "good fun", "bad"]))], seq_length=64)
    assert pairs["input_word_ids"].shape == (3, 64) and pairs["input_word_ids"].dtype == tf.int32
    assert pairs["input_type_ids"].numpy()[1, :9].tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1]
    assert pairs["input_mask"].numpy().sum(axis=1).tolist() == [8, 9, 5]
    flat = module.bert_pack_inputs([tokens.merge_dims(-2, -1)], seq_length=5)
    assert flat["input_word_ids"].numpy()[0].tolist() == [2] + [VOCAB.index(w) for w in ("the", "movie", "was")] + [3]
    assert bool(module.do_lower_case.numpy()) is True
    with open(module.vocab_file.asset_path.numpy().decode()) as f:
        assert f.read().split() == VOCAB



def test_the_preprocess_modules_packings_are_traced_once_each(tmp_path, vocab_file, monkeypatch):
    from bert_keras.export import export_preprocessor
    from bert_keras.text import BertPreprocessor

    traced = []
    pack = BertPreprocessor.bert_pack_inputs
    monkeypatch.setattr(BertPreprocessor, "bert_pack_inputs",
                        lambda self, segments, seq_length=None: traced.append(len(segments)) or pack(self, segments, seq_length))
    export_preprocessor(str(tmp_path / "preprocess"), vocab_file, do_lower_case=True, seq_length=16)
    # 1 or 2 segments of ragged rank 1 or 2: four traces, which the save reuses (it traced them again, 2026-12-03)
    assert sorted(traced) == [1, 1, 2, 2]

def test_every_weight_is_stored_once(encoder_dir, tiny_encoder):
    stored = tf.train.list_variables(os.path.join(encoder_dir, "variables", "variables"))
    weights = {name: shape for name, shape in stored if name.startswith("variables/")}
    assert len(weights) == len(tiny_encoder.weights)
    others = [name for name, _ in stored if not name.startswith(("variables/", "_keras_state/"))]
    assert sorted(others) == ["_CHECKPOINTABLE_OBJECT_GRAPH", "do_lower_case/.ATTRIBUTES/VARIABLE_VALUE", "save_counter/.ATTRIBUTES/VARIABLE_VALUE"]


@pytest.mark.slow
def test_bfloat16_encoder_module_keeps_float32_inputs_outputs_and_variables(tmp_path, vocab_file, tiny_encoder, monkeypatch):
    from bert_keras import dtypes

    monkeypatch.setattr(dtypes, "cpu_supports_bfloat16", lambda: True)
    path = export_encoder(tiny_encoder, str(tmp_path / "bf16"), vocab_file, do_lower_case=True, dtype="bfloat16")
    module = hub.load(path)
    inputs = {k: tf.constant(v) for k, v in encoder_inputs().items()}
    outputs = module(inputs, training=False)
    assert {outputs[key].dtype for key in ("pooled_output", "sequence_output", "default")} == {tf.float32}
    assert [x.dtype for x in outputs["encoder_outputs"]] == [tf.float32, tf.float32]
    assert {v.dtype for v in module.variables} == {tf.float32} and len(module.variables) == 39
    signature = module.signatures["serving_default"]
    assert {spec.dtype for spec in signature.structured_input_signature[1].values()} == {tf.int32}
    # Computed in bfloat16 (8 bits of mantissa): close to the float32 encoder, but not equal to it.
    expected = tiny_encoder(inputs)["pooled_output"].numpy()
    difference = float(np.max(np.abs(outputs["pooled_output"].numpy() - expected)))
    assert 1e-5 < difference < 0.05, difference
    # The encoder is float32 again after the export.
    assert tiny_encoder.dtype_policy.name == "float32" and tiny_encoder(inputs)["pooled_output"].dtype == tf.float32


def test_bfloat16_is_refused_on_a_cpu_without_it_before_anything_is_written(tmp_path, vocab_file, tiny_encoder, monkeypatch):
    import pytest

    from bert_keras.export import convert_to_hub
    from bert_keras import dtypes

    monkeypatch.setattr(dtypes, "cpu_supports_bfloat16", lambda: False)
    with pytest.raises(ValueError, match=r"dtype='bfloat16', but this CPU has no bfloat16 arithmetic \(neither `avx512_bf16`"):
        export_module_pair(str(tmp_path / "pair"), tiny_encoder, vocab_file, do_lower_case=True, seq_length=16, dtype="bfloat16")
    with pytest.raises(ValueError, match=r"`dtype`, expected one of \['float32', 'bfloat16'\]. Received: dtype='float16'"):
        export_encoder(tiny_encoder, str(tmp_path / "enc"), vocab_file, do_lower_case=True, dtype="float16")
    with pytest.raises(ValueError, match="no bfloat16 arithmetic"):
        convert_to_hub(str(tmp_path / "no-checkpoint-is-read"), str(tmp_path / "converted"), dtype="bfloat16")
    assert os.listdir(tmp_path) == []


def test_cpu_bfloat16_detection_reads_the_cpu_flags(tmp_path, monkeypatch):
    import builtins

    from bert_keras.dtypes import cpu_supports_bfloat16

    real_open = builtins.open

    def fake_cpuinfo(flags):
        path = tmp_path / f"cpuinfo_{len(flags)}"
        path.write_text(f"processor\t: 0\nflags\t\t: fpu sse avx2 {flags}\n")
        return lambda name, *a, **k: real_open(path if name == "/proc/cpuinfo" else name, *a, **k)

    for flags, expected in (("avx512f avx512_vnni", False), ("avx512f avx512_bf16", True), ("amx_tile amx_bf16", True)):
        monkeypatch.setattr(builtins, "open", fake_cpuinfo(flags))
        assert cpu_supports_bfloat16() is expected, flags
