"""Hostile files in a checkpoint's folder that the readers read as data: a FIFO, a directory or invalid UTF-8 where
`vocab.txt`, `tokenizer_config.json`, an index or a sentence-transformers config belongs, a token longer than
WordPiece takes, an `id2label` of 200,000 names. Each is refused with one short message naming the file (a
`ValueError` or `OSError`: exit status 2 for the commands), never a wait without end or an internal error.

Every read of a FIFO runs in a thread joined with a timeout (`_without_waiting`): a regression fails, it does not hang.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from bert_keras import cli
from bert_keras.checkpoints import CheckpointError, load_checkpoint
from bert_keras.tasks.sentence_encoder import SentenceEncoder
from bert_keras.tasks import BertClassifier
from bert_keras.text.tokenizer import MAX_TOKEN_BYTES, load_vocabulary
from tests import forked, sentence_models
from tests.checkpoints._models import hf_pretraining_model, save_hf_directory
from tests.commands.test_hostile_commands import FIFO_MESSAGE, _without_waiting

transformers = pytest.importorskip("transformers")

# The longest a refusal may be: it quotes what the file holds, cut (`bert_keras._checks.quoted`).
MAX_MESSAGE = 1_000


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return save_hf_directory(hf_pretraining_model(), tmp_path_factory.mktemp("hostile") / "bert")


@pytest.fixture
def hf_dir(original, tmp_path):
    return shutil.copytree(original, tmp_path / "bert")


@pytest.fixture(scope="module")
def st_original(tmp_path_factory):
    """A sentence-transformers folder (2.x layout: 0_Transformer/, 1_Pooling/) of a tiny random BERT."""
    root = tmp_path_factory.mktemp("st")
    bert = sentence_models.write_tiny_bert(str(root / "bert"))
    return sentence_models.write_legacy_folder(bert, str(root / "st"), {"pooling_mode_mean_tokens": True})


@pytest.fixture
def st_dir(st_original, tmp_path):
    return str(shutil.copytree(st_original, tmp_path / "st"))


def _replace_with_fifo(path):
    os.remove(path)
    os.mkfifo(path)
    return str(path)


def _index_only(folder):
    """The folder's weights behind a `model.safetensors.index.json` (a sharded checkpoint of one shard)."""
    os.rename(folder / "model.safetensors", folder / "model-00001-of-00001.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))


def _torch_only(folder):
    """The folder's weights as `pytorch_model.bin` only (transformers' older format)."""
    os.remove(folder / "model.safetensors")
    (folder / "pytorch_model.bin").write_bytes(b"")


# name -> how the folder is prepared before `name` becomes a FIFO (item 1: vocab.txt, 2: tokenizer_config.json,
# 3: an index without model.safetensors; model.safetensors itself alike).
FIFO_FILES = {
    "vocab.txt": None,
    "tokenizer_config.json": lambda folder: (folder / "tokenizer_config.json").write_text("{}"),
    "model.safetensors.index.json": _index_only,
    "model.safetensors": None,
    "pytorch_model.bin": _torch_only,
}


def _fifo_folder(folder, name):
    if FIFO_FILES[name] is not None:
        FIFO_FILES[name](folder)
    if not (folder / name).exists():
        (folder / name).write_text("")
    return _replace_with_fifo(folder / name)


@pytest.mark.parametrize("name", list(FIFO_FILES))
def test_a_fifo_in_a_checkpoint_folder_is_refused_without_waiting(hf_dir, name):
    fifo = _fifo_folder(hf_dir, name)
    with pytest.raises(CheckpointError, match=re.escape(f"{fifo}: it is a FIFO (named pipe), not a regular file")):
        _without_waiting(load_checkpoint, str(hf_dir), fifos=[fifo])


@pytest.mark.parametrize("name", list(FIFO_FILES))
def test_convert_refuses_a_fifo_with_exit_status_2(hf_dir, tmp_path, capsys, name):
    fifo = _fifo_folder(hf_dir, name)
    out = str(tmp_path / "out")
    assert _without_waiting(cli.main, ["convert", str(hf_dir), "--out", out], fifos=[fifo]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"bert-keras convert: cannot convert {hf_dir}: {fifo}: ") , err
    assert FIFO_MESSAGE.split(": ", 1)[1] in err and not os.path.exists(out)


def test_from_checkpoint_refuses_a_fifo_vocabulary(hf_dir):
    fifo = _replace_with_fifo(hf_dir / "vocab.txt")
    with pytest.raises(ValueError, match=re.escape(f"{fifo}: it is a FIFO (named pipe)")):
        _without_waiting(BertClassifier.from_checkpoint, str(hf_dir), fifos=[fifo])


def test_load_vocabulary_refuses_a_fifo_and_a_directory(tmp_path):
    fifo = str(tmp_path / "vocab.txt")
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=re.escape(f"{fifo}: it is a FIFO (named pipe)")):
        _without_waiting(load_vocabulary, fifo, fifos=[fifo])
    os.mkdir(tmp_path / "folder")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'folder'}: is a directory; expected a file.")):
        load_vocabulary(str(tmp_path / "folder"))


# Loads the checkpoint at `sys.argv[1]`; prints the error's message. In a process of its own: TensorFlow's checkpoint
# reader waits on a FIFO holding the interpreter's lock, which no thread of the test can release.
_LOAD = """
import sys
from bert_keras.checkpoints import load_checkpoint
try:
    load_checkpoint(sys.argv[1])
except ValueError as error:
    print(error)
"""


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".index", ".data-00000-of-00001"])
def test_a_fifo_in_a_google_checkpoint_is_refused_without_waiting(tmp_path, suffix):
    from tests.checkpoints.test_google import write_google_directory

    folder = write_google_directory(tmp_path / "google", hf_pretraining_model(hidden_act="gelu_new"))
    fifo = _replace_with_fifo(os.path.join(folder, "bert_model.ckpt" + suffix))
    # A folder is recognised by a regular *.index: with a FIFO there, the prefix is named instead.
    source = os.path.join(folder, "bert_model.ckpt") if suffix == ".index" else folder
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        # Forked from a process with TensorFlow imported (tests/forked.py): the load's own work, not the imports.
        done = forked.run([sys.executable, "-c", _LOAD, source], timeout=120, cwd=root)
    except subprocess.TimeoutExpired:
        pytest.fail(f"load_checkpoint waited on the FIFO {fifo}")
    assert done.stdout.startswith(f"{fifo}: it is a FIFO (named pipe), not a regular file"), done.stderr[-2000:]


# Item 4: a sentence-transformers folder whose pooling config (or the BERT's vocab.txt) is a FIFO.
@pytest.mark.parametrize("name", ["1_Pooling/config.json", "0_Transformer/vocab.txt", "modules.json"])
def test_a_sentence_transformers_folder_with_a_fifo_is_refused(st_dir, tmp_path, capsys, name):
    fifo = _replace_with_fifo(os.path.join(st_dir, name))
    with pytest.raises(ValueError, match=re.escape(fifo) + ".*FIFO"):
        _without_waiting(SentenceEncoder.from_checkpoint, st_dir, fifos=[fifo])
    out = str(tmp_path / "vectors.npy")
    assert _without_waiting(cli.main, ["embed", "--checkpoint", st_dir, "--out", out, "ok"], fifos=[fifo]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bert-keras embed: cannot load a sentence encoder from {st_dir}: ") and fifo in err, err
    assert "FIFO (named pipe)" in err and err.count("\n") == 1 and not os.path.exists(out)


# Item 12: a directory where a file belongs.
@pytest.mark.parametrize("name", ["vocab.txt", "tokenizer_config.json"])
def test_a_directory_where_a_tokenizer_file_belongs_is_refused_naming_it(hf_dir, tmp_path, capsys, name):
    path = hf_dir / name
    if path.exists():
        path.unlink()
    path.mkdir()
    with pytest.raises(CheckpointError, match=re.escape(f"{path}: is a directory; expected a file.")):
        load_checkpoint(str(hf_dir))
    assert cli.main(["convert", str(hf_dir), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"bert-keras convert: cannot convert {hf_dir}: {path}: is a directory; expected a file.\n"


# Item 10: a vocabulary that is not UTF-8.
def test_a_vocabulary_not_utf8_is_refused_naming_the_file_and_line(hf_dir):
    vocab = hf_dir / "vocab.txt"
    lines = vocab.read_bytes().split(b"\n")
    lines[6] = b"caf\xe9"  # Latin-1
    vocab.write_bytes(b"\n".join(lines))
    message = f"{vocab}: line 7 is not valid UTF-8 (byte 0xe9); a vocabulary file is UTF-8 text, one token a line."
    with pytest.raises(CheckpointError, match=re.escape(message)):
        load_checkpoint(str(hf_dir))
    with pytest.raises(ValueError, match=re.escape(message)):
        load_vocabulary(str(vocab))


# Item 11: what a message quotes is cut.
def _replace_token(vocab, line, token):
    lines = vocab.read_text(encoding="utf-8").split("\n")
    lines[line - 1] = token
    vocab.write_text("\n".join(lines), encoding="utf-8")


@pytest.mark.parametrize("token, size", [
    ("x" * 5_000_000, 5_000_000),
    ("é" * 129, 258),  # 129 characters, 258 bytes
    ("##" + "y" * (MAX_TOKEN_BYTES + 1), MAX_TOKEN_BYTES + 1),
])
def test_a_token_longer_than_wordpiece_takes_is_refused_with_a_short_message(hf_dir, tmp_path, capsys, token, size):
    vocab = hf_dir / "vocab.txt"
    _replace_token(vocab, 11, token)
    assert cli.main(["convert", str(hf_dir), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err) < MAX_MESSAGE and err.count("\n") == 1, err[:2000]
    assert f"{vocab}, line 11, is {size:,} UTF-8 bytes long ({token[:10]!r}"[:-1] in err, err
    assert f"WordPiece takes tokens of at most {MAX_TOKEN_BYTES} bytes" in err


def test_a_token_of_the_bound_is_read(hf_dir):
    _replace_token(hf_dir / "vocab.txt", 11, "##" + "z" * MAX_TOKEN_BYTES)
    assert load_vocabulary(str(hf_dir / "vocab.txt"))[10] == "##" + "z" * MAX_TOKEN_BYTES
    with pytest.raises(ValueError, match="the token of id 1 is 257 UTF-8 bytes long"):
        load_vocabulary(["[PAD]", "a" * 257])


def test_a_repeated_long_token_is_quoted_cut(hf_dir):
    vocab = hf_dir / "vocab.txt"
    _replace_token(vocab, 11, "w" * 200)
    _replace_token(vocab, 12, "w" * 200)
    with pytest.raises(ValueError) as info:
        load_vocabulary(str(vocab))
    assert f"lists the token {'w' * 76!r}"[:-1] + "... twice, on lines 11 and 12" in str(info.value)


@pytest.fixture(scope="module")
def classifier_original(tmp_path_factory):
    import torch

    from tests.checkpoints._models import TINY_HF

    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(transformers.BertConfig(**TINY_HF, num_labels=3))
    model.config.architectures = ["BertForSequenceClassification"]
    return save_hf_directory(model, tmp_path_factory.mktemp("classifier") / "bert")


def _many_labels(count):
    return {str(i): f"label_{i:06d}" for i in range(count)}


@pytest.mark.parametrize("id2label, reason", [
    (_many_labels(200_000), "has shape (3, 16): 3 classes, but"),  # names 200,000
    ({str(i): f"label_{i // 2}" for i in range(200_000)}, "more than one class"),  # 100,000 names twice
    ({str(i + 1): f"label_{i}" for i in range(200_000)}, "(no 0)"),
    ([f"label_{i}" for i in range(200_000)], "expected an object of class index -> name"),
])
def test_an_id2label_of_200000_names_gives_a_short_message(classifier_original, tmp_path, id2label, reason):
    folder = shutil.copytree(classifier_original, tmp_path / "bert")
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = id2label
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(str(folder), with_heads=["classifier"])
    assert reason in str(info.value) and len(str(info.value)) < MAX_MESSAGE, str(info.value)[:2000]


def test_a_fifo_as_merges_txt_is_refused_without_waiting(tmp_path):
    from bert_keras.text import BytePairTokenizer

    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({token: i for i, token in enumerate(["<s>", "<pad>", "</s>", "<unk>", "a", "b"])}))
    fifo = str(tmp_path / "merges.txt")
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=re.escape(f"{fifo}: it is a FIFO (named pipe)")):
        _without_waiting(BytePairTokenizer, str(vocab), fifo, fifos=[fifo])
