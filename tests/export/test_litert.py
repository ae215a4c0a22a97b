"""bert_keras.export.litert: an export of ours as one .tflite file from raw strings, answering as the export does."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_keras.export.manifest import ExportError

pytest.importorskip("ai_edge_litert")

TINY = dict(num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=32)
WORDS = ["good", "bad", "day", "new", "york", "##er", "paris", "ada", "love", "the", "city", "é", "中", "文",
         "!", ",", ".", "@", "#", "cafe", "zurich"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + LETTERS + [f"##{c}" for c in LETTERS]
SEQ_LENGTH, STRIDE = 12, 3
LONG = "Ada loves the city of Paris ! New Yorkers love Zürich too , the café is good @ada #paris " * 2
TEXTS = ["good day", "Bad DAYS, é 中文 😀!", "", "   ", "Café in Zürich with @New_Yorker #paris",
         "x" * 101 + " good " + "é" * 120, "Ｆｕｌｌ width and e\u0301 combining, ﬁ ligature \ufffd", LONG]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _perturbed(model, scale=0.5):
    """Random weights far from their initialisation: outputs that differ from text to text."""
    rng = np.random.default_rng(3)
    for weight in model.weights:
        weight.assign(weight.numpy() + rng.normal(scale=scale, size=weight.shape).astype(weight.dtype))
    return model


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    from bert_keras import BertEncoder
    from bert_keras.export import export_classifier, export_litert
    from bert_keras.tasks import BertClassifier
    from bert_keras.text import BertPreprocessor

    root = tmp_path_factory.mktemp("litert_classifier")
    model = _perturbed(BertClassifier(BertEncoder(vocab_size=len(VOCAB), **TINY), num_classes=3,
                                      preprocessor=BertPreprocessor(VOCAB, seq_length=SEQ_LENGTH)))
    export_dir = export_classifier(model, str(root / "clf"), ["neg", "neu", "pos"])
    path = export_litert(export_dir, str(root / "clf.tflite"))
    return model, export_dir, path


@pytest.mark.slow
def test_a_classifier_answers_as_its_export_from_raw_strings(classifier):
    import tensorflow as tf

    from bert_keras.export import load_classifier, load_litert
    from bert_keras.export._serving import trim_padding

    model, export_dir, path = classifier
    lite, saved = load_litert(path), load_classifier(export_dir, warm_up=False)
    for batch in (TEXTS, TEXTS[:1], TEXTS[1:2], TEXTS[5:6]):
        np.testing.assert_allclose(lite.predict_proba(batch), saved.predict_proba(batch), atol=1e-4)
    assert [p["label"] for p in lite.predict(TEXTS)] == [p["label"] for p in saved.predict(TEXTS)]
    assert lite.predict("") == {"label": None, "score": None, "scores": {}}
    assert list(lite.predict("good day", top_k=2)["scores"]) == list(saved.predict("good day", top_k=2)["scores"])
    # The tokenizer in LiteRT's kernels gives the preprocessor's ids, to the padding.
    ids = lite._interpreter.get_signature_runner("preprocess")(
        text=np.array([t.encode("utf-8") for t in TEXTS], dtype=object))
    expected = {k: v.numpy() for k, v in trim_padding(model.preprocessor(tf.constant(TEXTS))).items()}
    for key in expected:
        np.testing.assert_array_equal(ids[key], expected[key], err_msg=key)


@pytest.mark.slow
def test_the_token_ids_signature_runs_on_builtin_ops_alone(classifier):
    from ai_edge_litert.interpreter import Interpreter

    from bert_keras.export.litert import TEXT_OPS, op_names

    model, export_dir, path = classifier
    import tensorflow as tf

    packed = {k: v.numpy() for k, v in model.preprocessor(tf.constant(TEXTS[:3])).items()}
    runner = Interpreter(model_path=path).get_signature_runner("serve_ids")  # no tensorflow-text kernels
    saved = tf.saved_model.load(export_dir)
    expected = saved.serve_ids(**packed)["probabilities"].numpy()
    np.testing.assert_allclose(runner(**packed)["probabilities"], expected, atol=1e-5)
    with open(path, "rb") as f:
        assert op_names(f.read()) & {"FastBertNormalize", "FastWordpieceTokenizeWithOffsets"} <= TEXT_OPS
    with open(path + ".json") as f:
        record = json.load(f)
    assert (record["kind"], record["label_names"], record["size"]) == ("classifier", ["neg", "neu", "pos"],
                                                                      os.path.getsize(path))


@pytest.mark.slow
def test_the_file_runs_the_padded_layout_and_an_export_without_it_converts_its_packed_ids(classifier, tmp_path,
                                                                                       monkeypatch):
    import tensorflow as tf

    from bert_keras.export import _litert_graph, export_litert, load_litert
    from bert_keras.export.litert import op_names

    model, export_dir, path = classifier
    saved = tf.saved_model.load(export_dir)
    packed = {k: v.numpy() for k, v in model.preprocessor(tf.constant(TEXTS)).items()}  # rows of 2 to 12 positions
    np.testing.assert_allclose(saved.serve_ids_padded(**packed)["probabilities"].numpy(),
                               saved.serve_ids(**packed)["probabilities"].numpy(), atol=1e-5)
    with open(path, "rb") as f:
        assert "IF" not in op_names(f.read())  # no packing branches: what XNNPACK runs whole, int8 included
    monkeypatch.setattr(_litert_graph, "PADDED_IDS_ENDPOINT", "serve_ids_of_a_later_version")  # as an older export
    older = export_litert(export_dir, str(tmp_path / "older.tflite"))
    with open(older, "rb") as f:
        assert "IF" in op_names(f.read())
    np.testing.assert_allclose(load_litert(older).predict_proba(TEXTS), load_litert(path).predict_proba(TEXTS),
                               atol=1e-5)


@pytest.mark.slow
def test_a_file_is_replaced_only_with_overwrite_and_a_file_without_its_weights_is_refused(classifier, tmp_path):
    from bert_keras.export import export_litert
    from bert_keras.export.litert import check_converted

    _, export_dir, path = classifier
    with pytest.raises(FileExistsError, match="already exists; pass overwrite=True"):
        export_litert(export_dir, path)
    with open(path, "rb") as f:
        data = f.read()
    with pytest.raises(ValueError, match="lost the model's weights: the file holds"):
        check_converted(data, variable_bytes=10 * len(data))
    check_converted(data, variable_bytes=len(data))  # a file of its weights' size passes


@pytest.mark.slow
def test_a_conversion_refused_after_converting_writes_nothing(classifier, tmp_path, monkeypatch):
    from bert_keras.export import litert

    _, export_dir, path = classifier
    with open(path, "rb") as f:
        data = f.read()
    monkeypatch.setattr(litert, "_convert", lambda module, quantize, strings: data)
    monkeypatch.setattr(litert, "_variable_bytes", lambda saved: 10 * len(data))  # as if the weights were lost
    with pytest.raises(ValueError, match="lost the model's weights"):
        litert.export_litert(export_dir, str(tmp_path / "m.tflite"))
    assert os.listdir(tmp_path) == []  # no file, no record, no staged part


@pytest.mark.slow  # 4 s in the full run of 450d6b9
def test_the_dense_windows_of_one_text_are_piece_windows_and_max_context():
    import tensorflow as tf

    from bert_keras.export._litert_graph import one_text_max_context, one_text_windows
    from bert_keras.text.windows import max_context, piece_windows

    for window, step in ((10, 7), (4, 1), (5, 5), (126, 95)):
        for length in list(range(0, 3 * window + 2)) + [1000]:
            row, index, first, last = (t.numpy() for t in piece_windows(tf.constant([length]), window, step))
            dense = [t.numpy() for t in one_text_windows(tf.constant(length), window, step)]
            for ours, theirs in zip(dense, (index, first, last)):
                np.testing.assert_array_equal(ours, theirs, err_msg=f"{length} {window} {step}")
            positions = tf.ragged.range(first, last)
            entry_window = positions.value_rowids()
            expected = max_context(positions.flat_values, positions.flat_values, entry_window, first, last,
                                   length).numpy()
            got = one_text_max_context(tf.cast(positions.flat_values, tf.int32), tf.cast(entry_window, tf.int32),
                                       dense[1], dense[2], length).numpy()
            np.testing.assert_array_equal(got, expected, err_msg=f"{length} {window} {step}")


def _fake_export(directory, kind="classifier", tokenizer=True, edits=None):
    os.makedirs(os.path.join(directory, "assets.extra"))
    open(os.path.join(directory, "saved_model.pb"), "wb").close()
    manifest = {"format": "bert_keras export", "version": 1, "kind": kind}
    if tokenizer:
        manifest["tokenizer"] = {"kind": "wordpiece", "seq_length": 8, "cls_id": 2, "sep_id": 3, "pad_id": 0,
                                 "unknown_token": "[UNK]", "vocabulary_size": len(VOCAB), "lower_case": True,
                                 "suffix_indicator": "##", "max_chars_per_word": 100, "vocabulary_file": "vocab.txt"}
    manifest.update(edits or {})
    with open(os.path.join(directory, "assets.extra", "export.json"), "w") as f:
        json.dump(manifest, f)
    return str(directory)


def test_what_is_not_a_served_export_or_not_our_file_is_refused_before_tensorflow_loads(tmp_path):
    from bert_keras.export.litert import export_litert, load_litert

    with pytest.raises(ExportError, match="is not an export: it holds no saved_model.pb"):
        export_litert(str(tmp_path), str(tmp_path / "m.tflite"))
    reader = _fake_export(tmp_path / "reader", kind="reader")
    with pytest.raises(ExportError, match=r'is damaged: .*`inputs`, expected \["question", "context"\]'):
        export_litert(reader, str(tmp_path / "m.tflite"))
    older = _fake_export(tmp_path / "older", tokenizer=False)
    with pytest.raises(ExportError, match="records no tokenizer"):
        export_litert(older, str(tmp_path / "m.tflite"))
    export_dir = _fake_export(tmp_path / "clf")
    theirs = tmp_path / "theirs.tflite"
    theirs.write_bytes(b"not ours")
    with pytest.raises(FileExistsError, match="was not written by bert_keras .no theirs.tflite.json of ours"):
        export_litert(export_dir, str(theirs), overwrite=True)
    assert theirs.read_bytes() == b"not ours"
    with pytest.raises(ValueError, match="expected None .float32. or \"int8\".*Received: quantize='fp16'"):
        export_litert(export_dir, str(tmp_path / "m.tflite"), quantize="fp16")
    with pytest.raises(ExportError, match="is not a LiteRT file written by bert_keras"):
        load_litert(str(theirs))
    assert not (tmp_path / "m.tflite").exists()


def test_loading_a_litert_file_imports_no_tensorflow():
    code = ("import sys; from bert_keras.export import litert; "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    from bert_keras import BertEncoder
    from bert_keras.export import export_litert, export_tagger
    from bert_keras.tasks import BertTokenClassifier
    from bert_keras.text import BertPreprocessor

    root = tmp_path_factory.mktemp("litert_tagger")
    model = _perturbed(BertTokenClassifier(BertEncoder(vocab_size=len(VOCAB), **TINY), num_classes=len(TAGS),
                                           preprocessor=BertPreprocessor(VOCAB, seq_length=SEQ_LENGTH)), scale=1.0)
    export_dir = export_tagger(model, str(root / "ner"), tag_names=TAGS, stride=STRIDE)
    return export_dir, export_litert(export_dir, str(root / "ner.tflite"))


@pytest.mark.slow
def test_a_tagger_gives_the_exports_pieces_offsets_windows_and_entities(tagger):
    from bert_keras.export import load_litert, load_tagger

    export_dir, path = tagger
    lite, saved = load_litert(path), load_tagger(export_dir, warm_up=False)
    ours, theirs = lite.tag_pieces(TEXTS), saved.tag_pieces(TEXTS)  # the export's batch of them, LiteRT one by one
    assert max(piece["window"].max(initial=0) for piece in theirs) >= 2  # the long text is several windows
    for text, a, b in zip(TEXTS, ours, theirs):
        for key in b:
            if key == "scores":
                np.testing.assert_allclose(a[key], b[key], atol=1e-4, err_msg=text)
            else:
                np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=f"{key} {text!r}")
    for aggregation in ("simple", "first", "none"):
        entities = lite.predict(TEXTS, aggregation=aggregation)
        expected = saved.predict(TEXTS, aggregation=aggregation, batch_size=1)
        assert sum(map(len, expected)) > 3
        for a, b in zip(entities, expected):
            assert [{k: v for k, v in e.items() if k != "score"} for e in a] == \
                [{k: v for k, v in e.items() if k != "score"} for e in b]
            np.testing.assert_allclose([e["score"] for e in a], [e["score"] for e in b], atol=1e-4)
    ours, theirs = (_cli("predict", "--model", model, "--format", "jsonl", LONG, "Ada loves Paris")
                    for model in (path, export_dir))
    assert ours.returncode == theirs.returncode == 0, ours.stderr + theirs.stderr
    for a, b in zip(ours.stdout.splitlines(), theirs.stdout.splitlines(), strict=True):
        a, b = json.loads(a), json.loads(b)
        assert [(e["entity_group"], e["start"], e["end"]) for e in a["entities"]] == \
            [(e["entity_group"], e["start"], e["end"]) for e in b["entities"]]


def _serve_in_one_call(lite, text):
    """The file's `serve` on `text`: every window of it in one call, as LiteRT taggers served before `windows`."""
    outputs = lite._run([text], "serve")
    length = int(outputs.pop("lengths")[0])
    piece = {name: np.asarray(value)[0, :length] for name, value in outputs.items()}
    return {**piece, "tokens": np.array([token.decode("utf-8") for token in piece["tokens"]])}


@pytest.mark.slow
def test_a_tagger_runs_a_few_windows_per_call_and_answers_as_one_call_of_them_all(tagger):
    # Issue 55 item 6: all windows of one text ran in one call (a 400 KB line: 3.5 GB).
    from bert_keras.export import load_litert

    _, path = tagger
    texts = TEXTS + [LONG * 3]
    for windows_per_call in (1, 3):
        lite = load_litert(path, windows_per_call=windows_per_call)
        for text, piece in zip(texts, lite.tag_pieces(texts)):
            expected = _serve_in_one_call(lite, text)
            assert sorted(piece) == sorted(expected)
            for key in expected:  # the same numbers, bit for bit, of the same types
                assert np.asarray(piece[key]).dtype == expected[key].dtype, key
                np.testing.assert_array_equal(np.asarray(piece[key]), expected[key], err_msg=f"{key} {text[:40]!r}")
        calls, run = [], lite._call
        lite._call = lambda signature, **inputs: (calls.append((signature, len(inputs.get("input_word_ids", [])))),
                                                  run(signature, **inputs))[1]
        windows = int(lite.tag_pieces(LONG * 3)[0]["window"][-1]) + 1
        whole, rest = divmod(windows, windows_per_call)
        assert windows > 20 and calls == [("windows", 0)] + [("serve_ids", windows_per_call)] * whole + \
            [("serve_ids", rest)] * (rest > 0), (windows, calls)
    calls, lite = [], load_litert(path)  # 64 windows per call: a short text runs through `serve`, in one call
    run = lite._call
    lite._call = lambda signature, **inputs: (calls.append(signature), run(signature, **inputs))[1]
    lite.tag_pieces(["Ada went to Paris", LONG * 8])
    assert calls == ["serve", "windows", "serve_ids"], calls
    with pytest.raises(ValueError, match="Received: windows_per_call=0"):
        load_litert(path, windows_per_call=0)


@pytest.mark.slow
def test_a_tagger_file_converted_before_windows_answers_in_one_call_and_says_to_convert_again(tagger, tmp_path,
                                                                                              monkeypatch, caplog):
    from bert_keras.export import _litert_graph, export_litert, load_litert

    export_dir, path = tagger
    monkeypatch.setattr(_litert_graph, "TAGGER_SIGNATURES", _litert_graph.STRING_SIGNATURES)  # as earlier versions
    older = export_litert(export_dir, str(tmp_path / "older.tflite"))
    with caplog.at_level("WARNING", logger="bert_keras.export.litert_engine"):
        lite = load_litert(older)
    assert "was converted before LiteRT taggers served a text's windows a few at a time" in caplog.text
    assert "Convert the export again (bert-keras litert --force)" in caplog.text
    ours, theirs = lite.predict(TEXTS), load_litert(path, windows_per_call=2).predict(TEXTS)
    assert ours == theirs and sum(map(len, ours)) > 3
    with caplog.at_level("WARNING", logger="bert_keras.export.litert_engine"):
        caplog.clear()
        load_litert(path)
    assert caplog.text == ""


@pytest.mark.slow
def test_a_sentence_encoder_encodes_as_its_export(tmp_path):
    from bert_keras import BertEncoder
    from bert_keras.export import export_litert, export_sentence_encoder, load_litert, load_sentence_encoder
    from bert_keras.tasks.sentence_encoder import SentenceEncoder
    from bert_keras.text import BertPreprocessor

    model = _perturbed(SentenceEncoder(BertEncoder(vocab_size=len(VOCAB), **TINY),
                                       preprocessor=BertPreprocessor(VOCAB, seq_length=SEQ_LENGTH), normalize=True))
    export_dir = export_sentence_encoder(model, str(tmp_path / "st"))
    lite = load_litert(export_litert(export_dir, str(tmp_path / "st.tflite")))
    expected = load_sentence_encoder(export_dir).encode(TEXTS, batch_size=3)
    np.testing.assert_allclose(lite.encode(TEXTS, batch_size=3), expected, atol=1e-4)
    np.testing.assert_allclose(lite.encode(TEXTS[1]), expected[1], atol=1e-4)
    with pytest.raises(ExportError, match="is a LiteRT sentence encoder; call its `encode`"):
        lite.predict("a text")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "bert_keras.cli", *args], capture_output=True, text=True)


def test_the_litert_command_refuses_bad_input_with_one_message_before_tensorflow_loads(tmp_path):
    reader = _fake_export(tmp_path / "reader", kind="reader")  # a reader's manifest without its windows' settings
    out = _cli("litert", "--model", reader, "--out", str(tmp_path / "m.tflite"))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"bert-keras litert: The manifest {reader}/assets.extra/export.json is damaged: Received an invalid value for "
        "argument `inputs`, expected [\"question\", \"context\"]. Received: inputs=['text']. Restore the file, or "
        "export the model again."]
    out = _cli("litert", "--model", _fake_export(tmp_path / "clf"), "--out", str(tmp_path / "m.lite"))
    assert (out.returncode, out.stderr.strip()) == (
        2, f"bert-keras litert: --out {tmp_path / 'm.lite'}: expected a file name ending in .tflite.")
    (tmp_path / "theirs.tflite").write_bytes(b"x")
    out = _cli("predict", "--model", str(tmp_path / "theirs.tflite"), "a text")
    assert out.returncode == 2 and "is not a LiteRT file written by bert_keras" in out.stderr


@pytest.mark.slow
def test_the_command_writes_int8_and_predict_serves_the_tflite_file(classifier, tmp_path):
    from bert_keras.export import load_litert

    _, export_dir, path = classifier
    out_path = str(tmp_path / "clf-int8.tflite")
    out = _cli("litert", "--model", export_dir, "--out", out_path, "--quantize", "int8")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"Wrote {out_path} (")
    with open(out_path + ".json") as f:
        assert json.load(f)["quantize"] == "int8"
    out = _cli("predict", "--model", path, "--format", "jsonl", "good day", "")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    expected = load_litert(path).predict("good day")
    assert lines[0]["label"] == expected["label"] and lines[0]["score"] == pytest.approx(expected["score"], abs=1e-6)
    assert lines[1]["label"] is None
    code = (f"import sys; from bert_keras.cli import main; status = main(['predict', '--model', {path!r}, 'good day']); "
            "print(status, 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.splitlines()[-1] == "0 False", out.stderr  # the .tflite is served without TensorFlow


@pytest.mark.slow
def test_an_export_of_another_tokenizer_gets_token_ids_only_and_raw_strings_are_refused_plainly(tmp_path):
    import tensorflow as tf

    from bert_keras import BertEncoder
    from bert_keras.export import export_classifier, export_litert, load_litert
    from bert_keras.tasks import BertClassifier
    from bert_keras.text import BertPreprocessor, BytePairTokenizer

    tokens = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "a", "b", "c", "\u0120", "\u0120a", "ab", "\u0120ab"]
    tokenizer = BytePairTokenizer(tokens, ["a b", "\u0120 a", "\u0120a b"])
    model = _perturbed(BertClassifier(BertEncoder(vocab_size=len(tokens), **TINY), num_classes=2,
                                      preprocessor=BertPreprocessor(tokenizer=tokenizer, seq_length=8)))
    export_dir = export_classifier(model, str(tmp_path / "bpe"), ["x", "y"])
    lite = load_litert(export_litert(export_dir, str(tmp_path / "bpe.tflite")))
    assert not lite.serves_strings
    packed = {k: v.numpy() for k, v in model.preprocessor(tf.constant(["ab a", "c"])).items()}
    saved = tf.saved_model.load(export_dir)
    np.testing.assert_allclose(lite.serve_ids(**packed)["probabilities"],
                               saved.serve_ids(**packed)["probabilities"].numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="serves token ids only .its export's tokenizer is 'byte_bpe'; raw strings "
                                         "in LiteRT need WordPiece."):
        lite.predict("ab a")


@pytest.mark.slow
def test_a_tagger_file_answers_in_a_fresh_process_without_tensorflow(tagger):
    # Its entities' grouping imported TensorFlow (through the tokenizer classes; 3.9 s of a 3.9 s first answer), and
    # imported after the interpreter had loaded TensorFlow's libraries, it ended the process (a segmentation fault).
    _, path = tagger
    script = (f"import sys\nfrom bert_keras.export import load_litert\n"
              f"print(load_litert({path!r}).predict(['Ada went to Paris']))\nprint('tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("[[") and done.stdout.splitlines()[-1] == "False", done.stdout
    assert done.stderr == "", done.stderr[-2000:]  # LiteRT's "INFO: Created TensorFlow Lite XNNPACK delegate" too


@pytest.mark.slow
def test_tensorflow_imports_after_a_file_is_loaded(classifier):
    # The interpreter loads TensorFlow's libraries (BoringSSL's symbols among them) globally: Python's OpenSSL
    # modules imported after them ended the process (`import hashlib`, which `import tensorflow` does).
    _, _, path = classifier
    script = (f"from bert_keras.export import load_litert\nmodel = load_litert({path!r})\nmodel.predict('a')\n"
              "import tensorflow as tf\nprint(float(tf.constant(1.0) + 1))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("2.0"), done.stdout
