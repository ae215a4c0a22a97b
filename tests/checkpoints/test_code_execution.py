"""Reading weights never runs a graph; a module archive is unpacked only into the private, marked cache.

Findings 4 and 5 of the second adversarial review: a SavedModel planted in a Hugging Face folder, or in the
cache a local `.tar.gz` was unpacked into, ran its code when the folder or archive was only to be read.
The planted module here is a resource whose initializer writes a file: `tf.saved_model.load` runs it.
"""

import hashlib
import os
import shutil
import tarfile

import pytest

from bert_keras import cli
from bert_keras.checkpoints import CheckpointError, ModuleRefusedError, detect_format, load_checkpoint
from bert_keras.tasks import load_encoder_and_preprocessor
from tests.checkpoints._models import TINY_HF, hf_pretraining_model, save_hf_directory
from tests.helpers import planted_module as _planted_module


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    return save_hf_directory(hf_pretraining_model(), str(tmp_path_factory.mktemp("hf") / "ck"))


@pytest.mark.slow
def test_a_saved_model_in_a_hugging_face_folder_is_not_run(hf_folder, tmp_path):
    folder, flag = tmp_path / "ck", tmp_path / "ran.txt"
    shutil.copytree(hf_folder, folder)
    planted = _planted_module(tmp_path / "planted", flag)
    for name in ("saved_model.pb", "variables"):
        os.replace(os.path.join(planted, name), folder / name)
    (folder / "encoder").mkdir()  # and the layout of a module pair, for the task builders
    (folder / "preprocess").mkdir()
    for name in ("encoder", "preprocess"):
        shutil.copytree(folder / "variables", folder / name / "variables")
        shutil.copy(folder / "saved_model.pb", folder / name / "saved_model.pb")

    assert detect_format(str(folder)) == "huggingface"
    loaded = load_checkpoint(str(folder))
    assert loaded.summary.format == "huggingface" and loaded.encoder.num_layers == TINY_HF["num_hidden_layers"]
    encoder, _ = load_encoder_and_preprocessor(str(folder), seq_length=16)
    assert encoder.hidden_size == TINY_HF["hidden_size"]  # a native BertEncoder from the weights, not a Hub layer
    status = cli.main(["explain", "--checkpoint", str(folder), "--out", str(tmp_path / "explained"), "--seq-length", "8",
                       "tok1 tok2"])
    assert status == 0
    assert not flag.exists()


def test_a_module_alone_is_still_a_module(tmp_path):
    flag = tmp_path / "ran.txt"
    module = _planted_module(tmp_path / "module", flag)
    assert detect_format(module) == "hub_module"  # what the user passed is a module: loading it is asked for


def test_a_module_given_as_data_is_refused_before_anything_of_it_loads(tmp_path, monkeypatch):
    """`allow_modules=False` (a path that came from data, e.g. an index's record): every form of a module is refused
    before it is loaded, unpacked or downloaded; asking for the format by name does not get around it."""
    flag, cache = tmp_path / "ran.txt", tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(cache))
    module = _planted_module(tmp_path / "module", flag)
    _planted_module(tmp_path / "pair" / "encoder", flag)
    _planted_module(tmp_path / "pair" / "preprocess", flag)
    archive = _archive(module, tmp_path / "module.tar.gz")
    for path, format in [(module, None), (module, "hub_module"), (str(tmp_path / "pair"), None), (archive, None),
                         ("https://example.invalid/module.tar.gz", None)]:
        with pytest.raises(ModuleRefusedError, match=r"is a TF Hub / Model Garden module .* given as data"):
            load_checkpoint(path, format=format, allow_modules=False)
    assert not flag.exists() and os.listdir(cache) == []


def _archive(module_dir, path):
    with tarfile.open(path, "w:gz") as tar:
        tar.add(module_dir, arcname="module")
    return str(path)


def test_a_planted_cache_entry_is_never_loaded(tmp_path, monkeypatch):
    flag = tmp_path / "ran.txt"
    archive = _archive(_planted_module(tmp_path / "real", tmp_path / "unused.txt"), tmp_path / "module.tar.gz")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(cache))
    planted = _planted_module(tmp_path / "evil", flag)
    with open(archive, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    stat = os.stat(archive)
    earlier_key = hashlib.sha1(f"{os.path.abspath(archive)}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    entries = [cache / hashlib.sha1(f"archive:sha256:{digest}".encode()).hexdigest(), cache / f"bert_keras_{earlier_key}"]
    for entry in entries:  # where this version and the one before looked
        shutil.copytree(planted, entry)
        os.chmod(entry, 0o777)
    with pytest.raises(CheckpointError, match="lets group or others write to it"):
        load_checkpoint(archive)
    for entry in entries:
        os.chmod(entry, 0o700)
    with pytest.raises(CheckpointError, match="was not written by bert_keras"):  # private, but no marker
        load_checkpoint(archive)
    assert not flag.exists()


def test_a_shared_cache_directory_is_refused(tmp_path, monkeypatch):
    archive = _archive(_planted_module(tmp_path / "real", tmp_path / "unused.txt"), tmp_path / "module.tar.gz")
    cache = tmp_path / "shared"
    cache.mkdir()
    os.chmod(cache, 0o777)
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(cache))
    with pytest.raises(CheckpointError, match="Refusing to use the Hub download cache"):
        load_checkpoint(archive)
    assert os.listdir(cache) == []


def test_a_broken_archive_leaves_nothing_in_the_cache(tmp_path, monkeypatch):
    archive = tmp_path / "module.tar.gz"
    archive.write_bytes(b"\x1f\x8b" + os.urandom(300))
    cache = tmp_path / "cache"
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(cache))
    with pytest.raises(CheckpointError, match="cannot be unpacked as a .tar.gz module"):
        load_checkpoint(str(archive))
    assert os.listdir(cache) == []


@pytest.mark.parametrize("config", ["missing", "dangling link"])
def test_weights_without_a_config_never_load_the_saved_model_beside_them(hf_folder, tmp_path, config):
    folder, flag = tmp_path / "ck", tmp_path / "ran.txt"
    shutil.copytree(hf_folder, folder)
    (folder / "config.json").unlink()
    if config == "dangling link":
        (folder / "config.json").symlink_to(tmp_path / "blob-that-is-gone")
    planted = _planted_module(tmp_path / "planted", flag)
    for name in ("saved_model.pb", "variables"):
        os.replace(os.path.join(planted, name), folder / name)
    with pytest.raises(CheckpointError, match="holds weights .* but no readable config.json"):
        load_checkpoint(str(folder))
    assert not flag.exists()


def test_a_sentence_transformers_folder_never_loads_a_saved_model(tmp_path):
    from bert_keras.tasks.sentence_encoder import SentenceEncoder

    flag = tmp_path / "ran.txt"
    folder = tmp_path / "st"
    (folder / "1_Pooling").mkdir(parents=True)
    _planted_module(folder / "0_Transformer", flag)
    (folder / "1_Pooling" / "config.json").write_text('{"word_embedding_dimension": 8, "pooling_mode_mean_tokens": true}')
    for transformer in ("0_Transformer", "../st/0_Transformer", str(folder / "0_Transformer"), "../../"):
        (folder / "modules.json").write_text(
            '[{"idx": 0, "name": "0", "path": "%s", "type": "sentence_transformers.models.Transformer"},'
            ' {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]' % transformer)
        with pytest.raises(ValueError, match="holds no BERT weights|must be relative|leads outside"):
            SentenceEncoder.from_checkpoint(str(folder))
    assert not flag.exists()
