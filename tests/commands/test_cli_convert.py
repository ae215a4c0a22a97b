"""`bert-keras convert`: checkpoints -> TF Hub encoder + preprocess modules."""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_keras import cli, hub
from bert_keras.export import read_module_pair
from tests.checkpoints._models import hf_pretraining_model, random_inputs, save_hf_directory, torch_outputs
from tests.test_family_workflows import tweets  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def hf_pretraining_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    model = hf_pretraining_model()
    directory = tmp_path_factory.mktemp("hf_pretraining")
    return save_hf_directory(model, directory), model


@pytest.mark.slow
def test_convert_writes_encoder_with_mlm_and_preprocess(hf_pretraining_dir, tmp_path, capsys):
    source, reference = hf_pretraining_dir
    out = str(tmp_path / "modules")
    assert cli.main(["convert", source, "--out", out, "--seq-length", "12"]) == 0
    printed = capsys.readouterr().out
    assert "[1/3] read the checkpoint" in printed and "[3/3] write the preprocess module" in printed
    assert "with the mlm sub-object" in printed
    assert sorted(os.listdir(out)) == [".bert_keras_output.json", "encoder", "preprocess"]
    assert read_module_pair(out) == (os.path.join(out, "encoder"), os.path.join(out, "preprocess"))

    encoder = hub.load(os.path.join(out, "encoder"))
    inputs, positions = random_inputs()
    tensors = {k: tf.constant(v) for k, v in inputs.items()}
    outputs = encoder.mlm(dict(tensors, masked_lm_positions=tf.constant(positions)))
    expected = torch_outputs(reference, inputs).prediction_logits.numpy()
    gathered = np.take_along_axis(expected, positions[:, :, None], axis=1)
    np.testing.assert_allclose(outputs["mlm_logits"].numpy(), gathered, atol=1e-4)

    preprocess = hub.load(os.path.join(out, "preprocess"))
    packed = preprocess(tf.constant(["tok1 tok2 tok30", "tok7"]))
    assert packed["input_word_ids"].numpy().tolist() == [[2, 6, 7, 35, 3] + [0] * 7, [2, 12, 3] + [0] * 9]
    assert int(preprocess.tokenize.get_special_tokens_dict()["vocab_size"]) == 40


@pytest.mark.slow
def test_convert_refuses_to_overwrite_and_force_replaces(hf_pretraining_dir, tmp_path, capsys):
    source, _ = hf_pretraining_dir
    out = str(tmp_path / "modules")
    assert cli.main(["convert", source, "--out", out]) == 0
    stamp = os.path.getmtime(os.path.join(out, "encoder", "saved_model.pb"))
    capsys.readouterr()
    assert cli.main(["convert", source, "--out", out]) == 2
    assert "--force" in capsys.readouterr().err
    assert os.path.getmtime(os.path.join(out, "encoder", "saved_model.pb")) == stamp
    assert cli.main(["convert", source, "--out", out, "--force"]) == 0
    assert sorted(os.listdir(out)) == [".bert_keras_output.json", "encoder", "preprocess"]


def test_convert_force_never_replaces_a_foreign_directory(hf_pretraining_dir, tmp_path, capsys, monkeypatch):
    source, _ = hf_pretraining_dir
    (tmp_path / "thesis.tex").write_text("years of work")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["convert", source, "--out", ".", "--force"]) == 2
    assert "current directory" in capsys.readouterr().err
    other = tmp_path / "mine"
    other.mkdir()
    (other / "data.csv").write_text("a,b")
    assert cli.main(["convert", source, "--out", str(other), "--force"]) == 2
    assert "was not written by bert-keras" in capsys.readouterr().err  # refused before TensorFlow loads
    assert (tmp_path / "thesis.tex").read_text() == "years of work" and os.listdir(other) == ["data.csv"]


def test_convert_refuses_a_sequence_length_beyond_the_positions(hf_pretraining_dir, tmp_path, capsys):
    source, reference = hf_pretraining_dir
    too_long = reference.config.max_position_embeddings + 1
    assert cli.main(["convert", source, "--out", str(tmp_path / "m"), "--seq-length", str(too_long)]) == 2
    assert f"expected at most the encoder's max_sequence_length={too_long - 1}" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_failed_convert_leaves_nothing(tmp_path, capsys):
    source = tmp_path / "gpt2"
    source.mkdir()
    (source / "config.json").write_text('{"model_type": "gpt2", "n_layer": 2, "n_embd": 16}')
    out = tmp_path / "modules"
    assert cli.main(["convert", str(source), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "cannot convert" in error and "config.json" in error
    assert not out.exists() or os.listdir(out) == []


@pytest.mark.slow
def test_converted_minilm_matches_transformers_on_raw_text(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from bert_keras.text.corpora import load_tweets, minilm_vocab_path

    source = os.path.dirname(minilm_vocab_path())
    out = str(tmp_path / "minilm")
    assert cli.main(["convert", source, "--out", out, "--seq-length", "48"]) == 0
    texts = [t for t in load_tweets()[0][:200] if t.isascii()][:16]
    preprocess, encoder = hub.load(os.path.join(out, "preprocess")), hub.load(os.path.join(out, "encoder"))
    ours = encoder(preprocess(tf.constant(texts)))

    tokenizer = transformers.BertTokenizerFast(os.path.join(source, "vocab.txt"), do_lower_case=True)
    batch = tokenizer(texts, padding="max_length", truncation=True, max_length=48, return_tensors="pt")
    np.testing.assert_array_equal(preprocess(tf.constant(texts))["input_word_ids"].numpy(), batch["input_ids"].numpy())
    model = transformers.BertModel.from_pretrained(source).eval()
    with torch.no_grad():
        reference = model(**batch)
    mask = batch["attention_mask"].numpy().astype(bool)
    np.testing.assert_allclose(ours["sequence_output"].numpy()[mask], reference.last_hidden_state.numpy()[mask], atol=1e-4)
    np.testing.assert_allclose(ours["pooled_output"].numpy(), reference.pooler_output.numpy(), atol=1e-4)


def test_a_vocabulary_without_cls_stops_convert_before_anything_is_written(hf_pretraining_dir, tmp_path, capsys):
    import shutil

    source, _ = hf_pretraining_dir
    copy = tmp_path / "no_cls"
    shutil.copytree(source, copy)
    tokens = (copy / "vocab.txt").read_text().split("\n")
    (copy / "vocab.txt").write_text("\n".join("[CLX]" if t == "[CLS]" else t for t in tokens))
    out = tmp_path / "modules"
    assert cli.main(["convert", str(copy), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "[CLS]" in error
    assert not out.exists() and [p for p in os.listdir(tmp_path) if p.startswith(".partial")] == []


def test_convert_bfloat16_on_a_cpu_without_it_is_refused(hf_pretraining_dir, tmp_path, capsys, monkeypatch):
    from bert_keras import dtypes

    monkeypatch.setattr(dtypes, "cpu_supports_bfloat16", lambda: False)
    out = tmp_path / "modules"
    assert cli.main(["convert", str(hf_pretraining_dir[0]), "--out", str(out), "--dtype", "bfloat16"]) == 2
    assert "avx512_bf16" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow  # 9 s in the full run of 450d6b9
@pytest.mark.parametrize("name", ["roberta", "albert"])
def test_convert_a_family_folder_saved_by_transformers_5(tmp_path, tweets, name, capsys):  # noqa: F811
    # transformers 5 saves tokenizer.json alone; the module pair carries the tokenizer's own files, written from it.
    pytest.importorskip("transformers")
    from tests.checkpoints.test_transformers5_folders import make_folder

    folder = tmp_path / name
    make_folder(name, folder, tweets)
    assert not {"vocab.json", "merges.txt", "spiece.model"} & {p.name for p in folder.iterdir()}
    out = str(tmp_path / "modules")
    assert cli.main(["convert", str(folder), "--out", out, "--seq-length", "16", "-q"]) == 0, capsys.readouterr().err
    import transformers

    texts = tweets[-8:] + ["", "Héllo 😀 中文"]
    expected = transformers.AutoTokenizer.from_pretrained(str(folder))(
        texts, padding="max_length", truncation=True, max_length=16)["input_ids"]
    packed = hub.load(os.path.join(out, "preprocess"))(tf.constant(texts))
    np.testing.assert_array_equal(packed["input_word_ids"].numpy(), np.array(expected))


@pytest.mark.slow  # 13 s in the full run of 450d6b9
def test_convert_keeps_a_wordpiece_folders_accents_and_cjk_options(hf_pretraining_dir, tmp_path, capsys):
    # tokenizer_config.json's strip_accents false / tokenize_chinese_chars false reach the preprocess module.
    import json
    import shutil

    transformers = pytest.importorskip("transformers")
    from tests.checkpoints._models import TINY_HF

    source = shutil.copytree(hf_pretraining_dir[0], tmp_path / "bert")
    words = ["café", "cafe", "über", "uber", "中文", "中", "文", "ok"]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    tokens += [f"w{i}" for i in range(TINY_HF["vocab_size"] - len(tokens))]
    (source / "vocab.txt").write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
    options = {"do_lower_case": True, "strip_accents": False, "tokenize_chinese_chars": False}
    (source / "tokenizer_config.json").write_text(json.dumps(options))
    out = str(tmp_path / "modules")
    assert cli.main(["convert", str(source), "--out", out, "--seq-length", "12", "-q"]) == 0, capsys.readouterr().err
    texts = ["Café über ok", "CAFE uber", "中文 ok 中", "ok"]
    expected = transformers.BertTokenizerFast(str(source / "vocab.txt"), **options)(
        texts, padding="max_length", truncation=True, max_length=12)["input_ids"]
    packed = hub.load(os.path.join(out, "preprocess"))(tf.constant(texts))
    np.testing.assert_array_equal(packed["input_word_ids"].numpy(), np.array(expected))
    assert expected[0][1:3] == [tokens.index("café"), tokens.index("über")]  # accents kept, as the options say
