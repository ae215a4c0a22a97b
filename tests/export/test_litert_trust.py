"""LiteRT files a user can trust: the manifest checked against the graph before converting, the file checked against
its record (size, SHA-256, every value) before LiteRT reads it, written whole or not at all, one writer at a time."""

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from bert_keras.export.manifest import ExportError
from bert_keras.text.decoding import DECODINGS
from tests import forked
from tests.export.test_litert import TAGS, TEXTS, _cli, _fake_export, classifier, tagger  # noqa: F401 (fixtures)

pytest.importorskip("ai_edge_litert")


def _edited_copy(export_dir, root, edit):
    """A copy of `export_dir` whose manifest `edit(manifest)` changed."""
    copy = os.path.join(root, "edited")
    shutil.copytree(export_dir, copy)
    path = os.path.join(copy, "assets.extra", "export.json")
    with open(path) as f:
        manifest = json.load(f)
    edit(manifest)
    with open(path, "w") as f:
        json.dump(manifest, f)
    return copy


def _record(path):
    with open(path + ".json") as f:
        return json.load(f)


def _write_record(path, record):
    with open(path + ".json", "w") as f:
        json.dump(record, f)


# ----------------------------------------------------------------------------------------------------------------
# Before TensorFlow loads.


@pytest.mark.parametrize("edits, named", [
    ({"tokenizer": {"seq_length": 1}}, r"tokenizer.seq_length`, expected an integer in \[3, 8192\]. Received: "
                                       r"tokenizer.seq_length=1"),
    ({"tokenizer": {"seq_length": 10 ** 30}}, "Received: tokenizer.seq_length=1000000000000000000000000000000"),
    ({"tokenizer": {"cls_id": None}}, "Received: tokenizer.cls_id=None"),
    ({"tokenizer": {"cls_id": "2"}}, "Received: tokenizer.cls_id='2'"),
    ({"tokenizer": {"pad_id": 10 ** 6}}, "Received: tokenizer.pad_id=1000000"),
    ({"tokenizer": {"kind": ["wordpiece"]}}, r"Received: tokenizer.kind=\['wordpiece'\]"),
    ({"inputs": 5}, "Received: inputs=5"),
    ({"label_names": 5}, "Received: label_names=5"),
    ({"label_names": [1, 2, 3]}, r"Received: label_names=\[1, 2, 3\]"),
])
def test_an_edited_manifest_is_refused_naming_the_value_before_tensorflow_loads(tmp_path, edits, named):
    from bert_keras.export.litert import served_manifest

    export_dir = _fake_export(tmp_path / "clf")
    path = os.path.join(export_dir, "assets.extra", "export.json")
    with open(path) as f:
        manifest = json.load(f)
    for key, value in edits.items():
        if key == "tokenizer":
            manifest["tokenizer"].update(value)
        else:
            manifest[key] = value
    with open(path, "w") as f:
        json.dump(manifest, f)
    with pytest.raises(ExportError, match=f"export.json is damaged: Received an invalid value .*{named}"):
        served_manifest(export_dir)


def test_a_tagger_manifest_with_another_aggregation_or_stride_is_refused(tmp_path):
    from bert_keras.export.litert import served_manifest

    base = {"tag_names": TAGS, "inputs": ["text"], "stride": 2, "seq_length": 8, "aggregation": "simple"}
    served_manifest(_fake_export(tmp_path / "ok", kind="tagger", edits=base))  # as export_tagger writes it
    for name, (edit, named) in enumerate([({"aggregation": "best"}, "Received: aggregation='best'"),
                                          ({"aggregation": {}}, r"Received: aggregation=\{\}"),
                                          ({"stride": 6}, "Received: stride=6"),
                                          ({"seq_length": 9}, "Received: seq_length=9"),
                                          ({"tag_names": "O"}, "Received: tag_names='O'")]):
        export_dir = _fake_export(tmp_path / str(name), kind="tagger", edits={**base, **edit})
        with pytest.raises(ExportError, match=named):
            served_manifest(export_dir)


def test_the_command_refuses_an_edited_manifest_with_exit_2_before_tensorflow_loads(tmp_path):
    export_dir = _fake_export(tmp_path / "clf", edits={"inputs": 5})
    started = time.perf_counter()
    out = _cli("litert", "--model", export_dir, "--out", str(tmp_path / "m.tflite"))
    assert out.returncode == 2, out.stderr
    assert "is damaged: Received an invalid value for argument `inputs`" in out.stderr
    assert time.perf_counter() - started < 10  # the TensorFlow import alone takes longer on these machines
    assert not os.path.exists(tmp_path / "m.tflite")
    code = (f"import sys\nfrom bert_keras.export.litert import served_manifest\ntry:\n"
            f"    served_manifest({export_dir!r})\nexcept ValueError:\n    print('tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_a_fifo_as_the_record_is_refused_at_once(tmp_path):
    from bert_keras.export.litert import load_litert

    path = str(tmp_path / "m.tflite")
    with open(path, "wb") as f:
        f.write(b"\0\0\0\0TFL3")
    os.mkfifo(path + ".json")
    with pytest.raises(ValueError, match=r"m.tflite.json cannot be read: it is a FIFO \(named pipe\), not a regular"):
        load_litert(path)
    out = subprocess.run([sys.executable, "-m", "bert_keras.cli", "predict", "--model", path, "a text"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "it is a FIFO" in out.stderr, out.stderr


def test_a_record_larger_than_any_of_ours_is_not_read(tmp_path):
    from bert_keras.export.litert import read_sidecar

    path = str(tmp_path / "m.tflite")
    with open(path + ".json", "w") as f:
        f.write('{"format": "bert_keras litert", "pad": "' + "x" * (1 << 20) + '"}')
    assert read_sidecar(path) is None


@pytest.mark.parametrize("num_threads", [0, -1, 100000, 2.0, True, "4"])
def test_num_threads_is_checked_before_the_file_is_read(num_threads):
    from bert_keras.export.litert import load_litert

    with pytest.raises(ValueError, match=rf"argument `num_threads`, expected an integer in \[1, {os.cpu_count()}\]"):
        load_litert("/nonexistent.tflite", num_threads=num_threads)


def test_a_second_writer_of_one_file_is_refused_at_once(tmp_path):
    from bert_keras._locks import OutputLockedError, output_lock
    from bert_keras.export.litert import export_litert

    export_dir, path = _fake_export(tmp_path / "clf"), str(tmp_path / "m.tflite")
    with output_lock(path):  # as a `bert-keras litert` run converting into it
        started = time.perf_counter()
        with pytest.raises(OutputLockedError, match="Another process .pid [0-9]+. is writing"):
            export_litert(export_dir, path)
        assert time.perf_counter() - started < 1
    assert sorted(os.listdir(tmp_path)) == ["clf"]


def test_only_the_exact_leftovers_of_a_write_are_removed(tmp_path):
    from bert_keras.export.litert import _remove_leftovers

    flatbuffer = b"\x1c\0\0\0TFL3" + b"\0" * 8
    files = {".partial-m.tflite-abc_1234": flatbuffer, "m.tflite.partial-x1y2z3w4": b"",
             "m.tflite.json.partial-q1w2e3r4": b'{"format"',
             ".partial-m.tflite-abc_12345": flatbuffer,  # not the writer's name: another file's
             ".partial-m.tflite-x-abc_1234": flatbuffer,  # m.tflite-x's
             ".partial-m.tflite-zzzzzzzz": b"a user's notes",  # the name, not what the writer stages
             "m.tflite": flatbuffer}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    os.symlink(tmp_path / "m.tflite", tmp_path / ".partial-m.tflite-linklink")
    _remove_leftovers(str(tmp_path / "m.tflite"))
    assert sorted(os.listdir(tmp_path)) == [".partial-m.tflite-abc_12345", ".partial-m.tflite-linklink",
                                            ".partial-m.tflite-x-abc_1234", ".partial-m.tflite-zzzzzzzz", "m.tflite"]


# ----------------------------------------------------------------------------------------------------------------
# Against the graph (TensorFlow).


@pytest.mark.slow
@pytest.mark.parametrize("edit, named", [
    (lambda m: m.update(label_names=m["label_names"][::-1]), "lists the labels .'pos', 'neu', 'neg'., but the "
                                                             "SavedModel was exported with .'neg', 'neu', 'pos'."),
    (lambda m: m["tokenizer"].update(seq_length=8), "its answers to probe texts differ from the export's"),
    (lambda m: m["tokenizer"].update(seq_length=40), "records tokenizer.seq_length=40, but the export's encoder holds "
                                                     "32 positions"),
    (lambda m: m["tokenizer"].update(cls_id=4), "its answers to probe texts differ from the export's"),
    (lambda m: m["tokenizer"].update(lower_case=False), "its answers to probe texts differ from the export's"),
])
def test_a_manifest_the_graph_contradicts_is_refused_and_nothing_is_written(classifier, tmp_path, edit, named):
    from bert_keras.export.litert import export_litert

    _, export_dir, _ = classifier
    edited = _edited_copy(export_dir, tmp_path, edit)
    with pytest.raises(ExportError, match=named):
        export_litert(edited, str(tmp_path / "m.tflite"))
    assert sorted(os.listdir(tmp_path)) == ["edited"]


@pytest.mark.slow
def test_the_command_refuses_reordered_labels_with_exit_2(classifier, tmp_path):
    _, export_dir, _ = classifier
    edited = _edited_copy(export_dir, tmp_path, lambda m: m.update(label_names=m["label_names"][::-1]))
    out = _cli("litert", "--model", edited, "--out", str(tmp_path / "m.tflite"))
    assert out.returncode == 2, out.stderr
    assert "the export was modified after it was written" in out.stderr.splitlines()[-1]


@pytest.mark.slow
def test_the_record_holds_the_files_sha256_and_a_damaged_file_of_the_same_size_is_refused(classifier, tmp_path):
    import hashlib

    from bert_keras.export.litert import load_litert

    _, _, original = classifier
    path = str(tmp_path / "m.tflite")
    shutil.copy(original, path)
    shutil.copy(original + ".json", path + ".json")
    with open(path, "rb") as f:
        data = f.read()
    assert _record(path)["sha256"] == hashlib.sha256(data).hexdigest()
    expected = load_litert(path).predict_proba(TEXTS[:2])
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0xFF  # a constant buffer's byte: LiteRT reads it without complaint
    with open(path, "wb") as f:
        f.write(damaged)
    with pytest.raises(ExportError, match="is not the file m.tflite.json describes: its SHA-256 is [0-9a-f]{64}"):
        load_litert(path)
    with open(path, "wb") as f:
        f.write(data)
    np.testing.assert_array_equal(load_litert(path).predict_proba(TEXTS[:2]), expected)
    _write_record(path, {key: value for key, value in _record(path).items() if key != "sha256"})
    with pytest.raises(ExportError, match="records no SHA-256 .* Convert the export again"):
        load_litert(path)


@pytest.mark.slow
@pytest.mark.parametrize("field, value, named", [
    ("label_names", 3, "`label_names` holds 3; expected a non-empty list of str"),
    ("label_names", None, "`label_names` holds null or nothing; expected a non-empty list of str"),
    ("label_names", {"0": "neg"}, "`label_names` holds .'0': 'neg'.; expected a non-empty list of str"),
    ("label_names", [0, 1, 2], r"`label_names` holds \[0, 1, 2\]; expected a non-empty list of str"),
    ("label_names", ["neg", "pos"], "`label_names` holds 2 names for the file's 3 outputs"),
    ("label_names", ["neg", "neu", "pos", "other"], "`label_names` holds 4 names for the file's 3 outputs"),
    ("kind", "pipeline",
     r"`kind` holds 'pipeline'; expected one of \['classifier', 'tagger', 'reader', 'sentence_encoder'\]"),
    ("tokenizer", "wordpiece", "`tokenizer` holds 'wordpiece'; expected a JSON object"),
    # Every kind of text.decoding's table, as it grows (unigram, modernbert_bpe, ...).
    ("tokenizer", {"kind": "morse"}, "`tokenizer.kind` holds 'morse'; expected one of "
                                     + ", ".join(repr(kind) for kind in DECODINGS)),
    ("strings", "yes", r"`strings` holds 'yes'; expected one of \[True, False\]"),
])
def test_every_value_of_the_record_is_checked_in_the_records_words(classifier, tmp_path, field, value, named):
    # A hostile review: refusals named Python arguments ("Received an invalid value for argument `label_names` ...
    # Received: label_names=[...]") on the command line too; they name the record's field.
    from bert_keras.export.litert import load_litert

    _, _, original = classifier
    path = str(tmp_path / "m.tflite")
    shutil.copy(original, path)
    _write_record(path, {**_record(original), field: value})
    with pytest.raises(ExportError, match=f"m.tflite.json .beside .* is damaged: {named}. Restore it, or convert") \
            as refused:
        load_litert(path)
    assert "argument" not in str(refused.value) and "Received" not in str(refused.value)


@pytest.mark.slow
def test_a_tagger_record_with_other_tags_or_aggregation_is_refused_and_predict_exits_2(tagger, tmp_path):
    from bert_keras.export.litert import load_litert

    _, original = tagger
    path = str(tmp_path / "ner.tflite")
    shutil.copy(original, path)
    for field, value, named in (("tag_names", TAGS[:-1], f"`tag_names` holds 4 names for the file's {len(TAGS)} "),
                                ("aggregation", "best", "`aggregation` holds 'best'; expected one of 'simple', "
                                                        "'first', 'max', 'average', 'none'")):
        _write_record(path, {**_record(original), field: value})
        with pytest.raises(ExportError, match=named):
            load_litert(path)
    out = _cli("predict", "--model", path, "Ada went to Paris")
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 2 and "ner.tflite.json (beside" in last and "`aggregation` holds 'best'" in last, \
        out.stderr
    assert "argument" not in out.stderr and "Received" not in out.stderr


# ----------------------------------------------------------------------------------------------------------------
# The file carries what its record says (its `record` signature): an edited record is refused.


def _edited_record(original, tmp_path, name, **edits):
    path = str(tmp_path / name)
    shutil.copy(original, path)
    record = _record(original)
    for field, value in edits.items():
        if field.startswith("tokenizer."):
            record["tokenizer"] = {**record["tokenizer"], field.split(".", 1)[1]: value}
        elif value is None:
            record.pop(field, None)
        else:
            record[field] = value
    _write_record(path, record)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("edits, field, recorded, converted", [
    ({"label_names": ["pos", "neu", "neg"]}, "label_names", "['pos', 'neu', 'neg']", "['neg', 'neu', 'pos']"),
    ({"label_names": ["neg", "neg", "pos"]}, "label_names", "['neg', 'neg', 'pos']", "['neg', 'neu', 'pos']"),
    ({"quantize": "int8"}, "quantize", "'int8'", "null"),
    ({"dimension": 16}, "dimension", "16", "absent"),
])
def test_a_classifier_record_edited_with_valid_values_is_refused_naming_the_field(classifier, tmp_path, edits, field,
                                                                                  recorded, converted):
    # A hostile review: reordered or renamed labels passed every check (the SHA-256 covers the file, not its record)
    # and predict answered with the wrong labels, exit 0.
    from bert_keras.export.litert import load_litert
    from bert_keras.export.litert_record import carried_values

    _, _, original = classifier
    path = _edited_record(original, tmp_path, "m.tflite", **edits)
    message = (f"m.tflite.json's `{field}` ({recorded}) differs from what {path!r} was converted with ({converted}): "
               "the record was edited after the conversion")
    with pytest.raises(ExportError) as refused:
        load_litert(path)
    assert str(refused.value).startswith(message) and "convert the export again" in str(refused.value)
    out = _cli("predict", "--model", path, "good day")
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert message in out.stderr.strip().splitlines()[-1], out.stderr
    lite = load_litert(original)  # the file's own record: what the file carries, value for value
    assert json.loads(carried_values(lite.record))["label_names"] == lite.label_names == ["neg", "neu", "pos"]


@pytest.mark.slow
def test_a_tagger_record_with_reversed_tags_or_another_suffix_indicator_is_refused(tagger, tmp_path):
    from bert_keras.export.litert import load_litert

    _, original = tagger
    for edits, named in (({"tag_names": TAGS[::-1]}, "ner.tflite.json's `tag_names` .* differs from what .* was "
                                                      "converted with"),
                         ({"tokenizer.suffix_indicator": ""},
                          r"ner.tflite.json's `tokenizer.suffix_indicator` \(''\) differs from what .* \('##'\)")):
        path = _edited_record(original, tmp_path, "ner.tflite", **edits)
        with pytest.raises(ExportError, match=f"^{named}"):
            load_litert(path)
    out = _cli("predict", "--model", path, "Ada went to Paris")
    assert out.returncode == 2 and "`tokenizer.suffix_indicator` ('') differs from what" in out.stderr, out.stderr


@pytest.mark.slow
def test_a_file_converted_before_it_carried_its_record_is_refused_with_convert_again(classifier, tmp_path):
    from bert_keras.export.litert import load_litert

    _, _, original = classifier
    # As this package wrote them before: the record's own format, version 2.
    path = _edited_record(original, tmp_path, "m.tflite", format="bert_keras litert", version=2, engine=None)
    with pytest.raises(ExportError, match=r"converted by an earlier version of bert_keras \(m.tflite.json version 2, "
                                          r"this one reads 3 and later\).* Convert the export again"):
        load_litert(path)
    out = _cli("predict", "--model", path, "good day")
    assert out.returncode == 2 and "Convert the export again" in out.stderr, out.stderr


@pytest.mark.slow
def test_the_record_is_the_exports_manifest_and_a_record_of_the_earlier_format_still_serves(classifier, tmp_path):
    from bert_keras.export import describe, load
    from bert_keras.export.manifest import read_manifest

    _, export_dir, original = classifier
    record, manifest = _record(original), read_manifest(export_dir)
    # One format: the export's manifest, its engine, the names the graph serves and the file's bookkeeping.
    assert {key: record[key] for key in ("format", "version", "engine")} == \
        {"format": "bert_keras export", "version": 2, "engine": "litert"}
    assert {key: value for key, value in record.items() if key in manifest} == manifest
    assert sorted(set(record) - set(manifest)) == ["converted_from", "engine", "quantize", "sha256", "size",
                                                   "strings", "writer"]
    assert describe(original) == {**{k: v for k, v in record.items()
                                     if k not in ("writer", "converted_from", "size", "sha256")}, "engine": "litert"}
    expected = load(original).predict_proba(TEXTS[:3])
    # A file converted by the version before (its record "bert_keras litert", version 3, no engine) is served as it
    # was, the file's carried values still equal to its record's.
    path = str(tmp_path / "m.tflite")
    shutil.copy(original, path)
    legacy = {key: value for key, value in record.items() if key not in ("engine", "converted_from")}
    _write_record(path, {**legacy, "format": "bert_keras litert", "version": 3, "source": record["converted_from"]})
    assert describe(path) == describe(original)
    np.testing.assert_array_equal(load(path).predict_proba(TEXTS[:3]), expected)
    out = _cli("predict", "--model", path, TEXTS[0])
    assert out.returncode == 0, out.stderr
    # A record of the manifest's format without the engine, or of version 1 (before LiteRT records were manifests),
    # is not one of ours.
    for edit in ({"engine": None}, {"version": 1}):
        _write_record(path, {key: value for key, value in {**record, **edit}.items() if value is not None})
        with pytest.raises(ExportError, match="m.tflite.json, which records what it serves, is missing or not ours"
                           if "engine" in edit else "converted by an earlier version of bert_keras"):
            load(path)


@pytest.mark.slow
def test_a_token_ids_file_given_text_exits_2_before_reading_input(tmp_path):
    from bert_keras import BertEncoder
    from bert_keras.export import export_classifier, export_litert
    from bert_keras.tasks import BertClassifier
    from bert_keras.text import BertPreprocessor, BytePairTokenizer
    from tests.export.test_litert import TINY

    tokens = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "a", "b", "\u0120", "\u0120a"]
    model = BertClassifier(BertEncoder(vocab_size=len(tokens), **TINY), num_classes=2, preprocessor=BertPreprocessor(
        tokenizer=BytePairTokenizer(tokens, ["\u0120 a"]), seq_length=8))
    path = export_litert(export_classifier(model, str(tmp_path / "bpe"), ["x", "y"]), str(tmp_path / "bpe.tflite"))
    # Standard input left open: a command that read it would wait until the timeout.
    process = subprocess.Popen([sys.executable, "-m", "bert_keras.cli", "predict", "--model", path],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 2, stderr
    assert "serves token ids only (its export's tokenizer is 'byte_bpe'" in stderr


def _kill_at(point, export_dir, path, quantize):
    """The conversion in a process of its own, killed at `point`: forked from one with TensorFlow imported
    (tests/forked.py), which the killed write does not depend on."""
    code = ("from bert_keras.export import export_litert\n"
            f"export_litert({export_dir!r}, {path!r}, quantize={quantize!r}, overwrite=True)")
    return forked.run([sys.executable, "-c", code], timeout=600, env={**os.environ, "BERT_KERAS_FAULT_POINT": point})


@pytest.mark.slow
def test_a_write_killed_between_its_steps_leaves_a_working_pair_and_the_next_write_cleans_up(classifier, tmp_path):
    from bert_keras.export.litert import export_litert, load_litert

    _, export_dir, original = classifier
    path = str(tmp_path / "m.tflite")
    shutil.copy(original, path)
    shutil.copy(original + ".json", path + ".json")
    old = load_litert(path).predict_proba(TEXTS)
    answers, staged = [], []
    for point in ("litert-record", "litert-file"):  # after the record is replaced; after the file is
        done = _kill_at(point, export_dir, path, "int8")
        assert done.returncode == -9, done.stderr[-2000:]
        answers.append(load_litert(path).predict_proba(TEXTS))  # the old pair, or the new one: never refused
        staged.append(sorted(name for name in os.listdir(tmp_path) if "partial" in name))
    np.testing.assert_array_equal(answers[0], old)  # the file was not replaced yet: the old answers
    assert _record(path)["quantize"] == "int8" and _record(path)["previous"]["quantize"] is None
    assert not np.array_equal(answers[1], old)  # the int8 file, served under its record
    np.testing.assert_allclose(answers[1], old, atol=3e-2)  # int8 weights: a probability moved by 0.014 once
    assert len(staged[0]) == 1 and staged[0][0].startswith(".partial-m.tflite-")  # the first kill's staged file,
    assert staged[1] == []  # removed by the second write (whose own was renamed into place)
    export_litert(export_dir, path, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["m.tflite", "m.tflite.json"]
    assert "previous" not in _record(path)
    np.testing.assert_array_equal(load_litert(path).predict_proba(TEXTS), old)
