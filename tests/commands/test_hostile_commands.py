"""The commands against hostile files and streams (issue 47): a FIFO where a file is read, a closed standard input,
a byte-order mark in a query, a tagger export's labels.json nested too deeply. Each ends in exit 2 and one message,
never in a wait without end or a traceback."""

import io
import json
import os
import re
import subprocess
import sys
import threading
import types

import numpy as np
import pytest

from bert_keras import _checks, cli
from bert_keras.commands import search as search_command
from bert_keras.export.manifest import ExportError, export_kind
from bert_keras.data.texts import read_labelled_file, read_texts
from bert_keras.data.squad import read_squad
from bert_keras.data.tagged import read_tagged_file

FIFO_MESSAGE = "cannot be read: it is a FIFO (named pipe), not a regular file (reading one may never end)"


def _fifo(path):
    os.mkfifo(path)
    return str(path)


def _without_waiting(function, *args, fifos=(), timeout=60):
    """`function(*args)`'s value, or the exception it raised; the test fails, rather than hangs, if it waits.

    A reader blocked on a FIFO is released when the time is up (each FIFO opened for writing, then closed), so that
    the test process can end.
    """
    done = {}

    def call():
        try:
            done["value"] = function(*args)
        except BaseException as error:  # noqa: BLE001 (handed to the test)
            done["error"] = error

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        for fifo in fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the blocked reader sees an empty file
            except OSError:
                pass
        thread.join(timeout)
        pytest.fail(f"{function.__name__} waited on a FIFO for {timeout} s")
    if "error" in done:
        raise done["error"]
    return done["value"]


def _cli(argv, capsys, fifos=()):
    code = _without_waiting(cli.main, argv, fifos=fifos)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- item 5: a FIFO where a command reads a file it did not write ---


def test_the_one_check_refuses_a_fifo_and_a_device_and_opens_a_file(tmp_path):
    fifo = _fifo(tmp_path / "pipe")
    for check in (_checks.check_regular_file, _checks.open_regular_file):
        with pytest.raises(_checks.NotRegularFileError, match=re.escape(f"{fifo} {FIFO_MESSAGE}; pass a regular file.")):
            _without_waiting(check, fifo, fifos=[fifo])
    with pytest.raises(ValueError, match=r"/dev/null cannot be read: it is a character device, not a regular file"):
        _checks.open_regular_file("/dev/null")
    with pytest.raises(IsADirectoryError):
        _checks.open_regular_file(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        _checks.open_regular_file(str(tmp_path / "missing"))
    (tmp_path / "a.txt").write_text("ok\n")
    with _checks.open_regular_file(str(tmp_path / "a.txt"), "r", encoding="utf-8") as f:
        assert f.read() == "ok\n"
    assert _checks.check_regular_file(str(tmp_path / "a.txt")) == str(tmp_path / "a.txt")


@pytest.mark.parametrize("name, reader", [
    ("texts.txt", lambda path: next(read_texts(path))),
    ("data.csv", read_labelled_file),
    ("data.conll", read_tagged_file),
    ("squad.json", read_squad),
])
def test_every_reader_of_users_files_refuses_a_fifo(tmp_path, name, reader):
    fifo = _fifo(tmp_path / name)
    with pytest.raises(ValueError, match=f"{name} cannot be read: it is a FIFO"):
        _without_waiting(reader, fifo, fifos=[fifo])


def test_commands_refuse_a_fifo_before_tensorflow_loads(tmp_path, capsys):
    fifo = _fifo(tmp_path / "texts.txt")
    code, _, err = _cli(["predict", "--model", str(tmp_path), "--input", fifo], capsys, fifos=[fifo])
    assert code == 2 and err == (f"bert-keras predict: --input {fifo} {FIFO_MESSAGE}; pass a regular file. Without "
                                 "--input, standard input is read: pipe the texts there.\n")
    train = _fifo(tmp_path / "train.conll")
    code, _, err = _cli(["finetune", "--task", "ner", "--train", train, "--out", str(tmp_path / "out")], capsys,
                        fifos=[train])
    assert code == 2 and f"bert-keras finetune: {train} {FIFO_MESSAGE}" in err
    assert not os.path.lexists(tmp_path / "out") and not os.path.lexists(tmp_path / ".out.backup")
    # An export's labels.json (read to tell a tagger from a classifier) as a FIFO: refused, not waited on.
    (tmp_path / "export" / "assets.extra").mkdir(parents=True)
    labels = _fifo(tmp_path / "export" / "assets.extra" / "labels.json")
    for command in (["predict", "--model", str(tmp_path / "export"), "hi"],
                    ["evaluate", "--model", str(tmp_path / "export"), "--data", str(tmp_path / "export")]):
        code, _, err = _cli(command, capsys, fifos=[labels])
        assert code == 2 and err == f"bert-keras {command[0]}: {labels} {FIFO_MESSAGE}; pass a regular file.\n"


def _index(directory, fifo_name):
    """An index of one 2-dimensional vector (written by hand: no model), its `fifo_name` file a FIFO."""
    directory.mkdir()
    info = {"format": "bert_keras.sentence_index", "version": 1, "count": 1, "dimension": 2, "model": {},
            "probe": {"text": "p", "embedding": [1.0, 0.0]}}
    (directory / "index.json").write_text(json.dumps(info))
    np.save(directory / "vectors.npy", np.array([[1.0, 0.0]], "float32"))
    (directory / "texts.jsonl").write_text('"a text"\n')
    os.remove(directory / fifo_name)
    return _fifo(directory / fifo_name)


@pytest.mark.parametrize("fifo_name", ["index.json", "vectors.npy", "texts.jsonl"])
def test_an_index_file_that_is_a_fifo_is_refused(tmp_path, capsys, fifo_name):
    from bert_keras.search import load_index

    fifo = _index(tmp_path / "index", fifo_name)
    with pytest.raises(ValueError, match=f"{fifo_name} cannot be read: it is a FIFO"):
        _without_waiting(load_index, str(tmp_path / "index"), fifos=[fifo])
    code, _, err = _cli(["search", str(tmp_path / "index"), "a query"], capsys, fifos=[fifo])
    assert code == 2 and err == f"bert-keras search: {fifo} {FIFO_MESSAGE}; pass a regular file.\n"


# --- item 6: standard input closed (`bert-keras predict ... <&-`) ---


def test_a_closed_standard_input_is_no_text_before_anything_loads(tmp_path):
    # Python sets sys.stdin to None when file descriptor 0 is closed: `isatty` of None was an AttributeError, exit 1.
    export = tmp_path / "export"
    (export / "assets.extra").mkdir(parents=True)
    (export / "assets.extra" / "labels.json").write_text(json.dumps({"task": "tagger"}))
    program = ("import sys; from bert_keras import cli; assert sys.stdin is None; code = cli.main(sys.argv[1:]); "
               "sys.stderr.write('TF' if 'tensorflow' in sys.modules else 'no TF'); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", program, "predict", "--model", str(export)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120, preexec_fn=lambda: os.close(0), env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("bert-keras predict: no text given: standard input is closed; pass TEXT arguments or "
                           "--input FILE.\nno TF")


@pytest.mark.parametrize("argv, message", [
    (["embed", "--model", "{export}", "--out", "{tmp}/e.npy"],
     "bert-keras embed: no text given: standard input is closed; pass TEXT arguments or --input FILE.\n"),
    (["index", "--model", "{export}", "--out", "{tmp}/i"],
     "bert-keras index: no text given: standard input is closed; pass --input FILE.\n"),
    (["search", "{export}"], "bert-keras search: no query given: standard input is closed; pass QUERY arguments.\n"),
    (["predict", "--model", "{export}"],
     "bert-keras predict: no text given: standard input is closed; pass TEXT arguments or --input FILE.\n"),
])
def test_every_reader_of_standard_input_says_it_is_closed(tmp_path, capsys, monkeypatch, argv, message):
    export = tmp_path / "export"
    export.mkdir()
    monkeypatch.setattr(sys, "stdin", None)

    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded for a command that has no text")

    monkeypatch.setattr("bert_keras.commands.embed.embedding_model", loaded)
    monkeypatch.setattr("bert_keras.commands.search.embedding_model", loaded)
    code, _, err = _cli([arg.format(export=export, tmp=tmp_path) for arg in argv], capsys)
    assert code == 2 and err == message
    assert not os.path.lexists(tmp_path / "e.npy") and not os.path.lexists(tmp_path / "i")


# --- item 11: search reads standard input as predict does ---


def test_search_drops_a_byte_order_mark_as_predict_does(monkeypatch, capsys):
    queries = []

    class Model:
        def encode(self, texts, batch_size=32):
            queries.extend(texts)
            return np.ones((len(texts), 2), "float32")

    index = types.SimpleNamespace(texts=["a text"], search=lambda vectors, top_k: (np.array([[0]]), np.array([[1.0]])))
    args = types.SimpleNamespace(format="json", top_k=1, batch_size=4)
    stdin = "\ufeffgood day\n\n  \nbad\r\n".encode()  # a BOM, as Windows' Notepad writes one
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    assert search_command._answer_standard_input(index, Model(), args) == 0
    assert queries == ["good day", "bad"]
    assert [json.loads(line)["query"] for line in capsys.readouterr().out.splitlines()] == ["good day", "bad"]
    assert [texts for _, texts in read_texts(io.BytesIO(stdin))][0] == ["good day"]  # predict's reader: the same
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"good\n\xff\n")))
    assert search_command._answer_standard_input(index, Model(), args) == 2
    assert capsys.readouterr().err == ("bert-keras search: standard input line 2 is not valid UTF-8 (byte 0xff at "
                                       "column 1); re-encode it as UTF-8.\n")


# --- item 7: a tagger export's labels.json nested too deeply ---


@pytest.mark.parametrize("name", ["labels.json", "export.json"])
def test_an_export_whose_metadata_is_nested_too_deeply_is_refused_naming_it(tmp_path, capsys, name):
    (tmp_path / "saved_model.pb").write_bytes(b"")
    (tmp_path / "assets.extra").mkdir()
    path = tmp_path / "assets.extra" / name
    path.write_text("[" * 100_000 + "]" * 100_000)  # was a RecursionError, a traceback of exit 1
    with pytest.raises(ExportError, match=re.escape(f"{path} cannot be read (nested too deep): the export is damaged")):
        export_kind(str(tmp_path))
    assert cli.main(["predict", "--model", str(tmp_path), "a text"]) == 2  # before TensorFlow loads
    assert capsys.readouterr().err == (f"bert-keras predict: {path} cannot be read (nested too deep): the export is "
                                       "damaged; export the model again.\n")
    path.write_text(json.dumps({"task": "tagger"} if name == "labels.json" else
                               {"format": "bert_keras export", "version": 1, "kind": "tagger"}))
    assert export_kind(str(tmp_path)) == "tagger"
