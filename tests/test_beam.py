"""Apache Beam: RunInference with an exported sentence encoder, on the local runner with two worker processes,
gives the vectors `bert-keras index` gives."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="Apache Beam comes with the beam and test extras")

from bert_keras import beam  # noqa: E402
from bert_keras.export import export_sentence_encoder, load_sentence_encoder  # noqa: E402
from bert_keras.search import build_index  # noqa: E402
from bert_keras.tasks.sentence_encoder import SentenceEncoder  # noqa: E402
from tests import sentence_models  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWO_WORKERS = ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    root = tmp_path_factory.mktemp("beam")
    bert = sentence_models.write_tiny_bert(str(root / "bert"))
    model = SentenceEncoder.from_checkpoint(bert, pooling="mean", normalize=True, max_seq_length=sentence_models.TINY_MAX_LENGTH)
    export_sentence_encoder(model, str(root / "export"))
    return str(root / "export")


def _texts():
    words = sentence_models.WORDS
    return [" ".join(words[(i * 7 + j) % len(words)] for j in range(1 + i % 9)) for i in range(60)] + sentence_models.TINY_TEXTS


def _read_shards(prefix):
    rows = []
    for path in sorted(glob.glob(f"{prefix}-*.jsonl")):
        with open(path, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f]
    return rows


@pytest.mark.slow
def test_two_beam_workers_give_the_vectors_of_bert_keras_index(export, tmp_path):
    texts = _texts()
    (tmp_path / "in").mkdir()
    halves = (texts[: len(texts) // 2], texts[len(texts) // 2:])
    for i, half in enumerate(halves):
        (tmp_path / "in" / f"part{i}.txt").write_text("\n".join(half) + "\n", encoding="utf-8")
    state = beam.embed_texts(export, str(tmp_path / "in" / "*.txt"), str(tmp_path / "out" / "vectors"), TWO_WORKERS, batch_size=8)
    assert state == "DONE"
    rows = _read_shards(tmp_path / "out" / "vectors")
    assert sorted(row["text"] for row in rows) == sorted(texts)  # every line once, blank ones too
    index = build_index(load_sentence_encoder(export), texts, str(tmp_path / "index"))
    expected = {text: vector for text, vector in zip(index.texts, np.asarray(index.vectors))}
    difference = max(float(np.max(np.abs(np.asarray(row["embedding"], "float32") - expected[row["text"]]))) for row in rows)
    assert difference <= 1e-6, difference
    assert len(rows[0]["embedding"]) == 16


@pytest.mark.slow
def test_the_handler_embeds_a_batch_as_the_export_does(export):
    handler = beam.SentenceEncoderHandler(export, batch_size=4)
    model = handler.load_model()
    results = handler.run_inference(["the good day", b"bad day", ""], model)
    assert [result.example for result in results] == ["the good day", "bad day", ""]
    np.testing.assert_allclose(np.stack([r.inference for r in results]), model.encode(["the good day", "bad day", ""]), atol=1e-6)
    assert handler.batch_elements_kwargs() == {"min_batch_size": 1, "max_batch_size": 4}
    with pytest.raises(TypeError, match="takes str elements. Received: int"):
        handler.run_inference([3], model)
    with pytest.raises(ValueError, match=r"`batch_size`, expected a positive integer"):
        beam.SentenceEncoderHandler(export, batch_size=0)


@pytest.mark.slow  # over 3 s: the whole suite runs it, the fast loop does not
def test_the_command_refuses_a_directory_that_is_no_export(tmp_path):
    (tmp_path / "in.txt").write_text("a\n")
    result = subprocess.run([sys.executable, "-m", "bert_keras.beam", "--model", str(tmp_path), "--input", str(tmp_path / "in.txt"),
                             "--output", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"error: {str(tmp_path)!r} is not an export: it holds no saved_model.pb" in result.stderr
    assert not glob.glob(str(tmp_path / "out*"))
