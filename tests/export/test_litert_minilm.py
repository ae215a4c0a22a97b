"""bert_keras.export.litert on a real checkpoint: MiniLM's classifier in LiteRT answers as its SavedModel on 1,000 tweets.

A file of its own (a group of its own in tests/run_suite.py): MiniLM's export and two conversions are the largest
memory of the LiteRT tests, which the tiny models' tests in test_litert.py need not share a process with.
"""

import os

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")


@pytest.mark.slow
def test_minilm_in_litert_equals_its_saved_model_on_1000_tweets_and_int8_is_under_a_third(tmp_path):
    import keras

    from bert_keras.export import export_classifier, export_litert, load_classifier, load_litert
    from bert_keras.tasks import BertClassifier
    from bert_keras.text.corpora import load_tweets
    from tests.sentence_models import minilm_folder

    keras.utils.set_random_seed(0)
    model = BertClassifier.from_checkpoint(minilm_folder(), num_classes=3, seq_length=128)
    export_dir = export_classifier(model, str(tmp_path / "clf"), ["negative", "neutral", "positive"])
    fp32 = export_litert(export_dir, str(tmp_path / "fp32.tflite"))
    int8 = export_litert(export_dir, str(tmp_path / "int8.tflite"), quantize="int8")
    assert os.path.getsize(int8) <= os.path.getsize(fp32) / 3
    texts = load_tweets()[0][:1000]
    expected = load_classifier(export_dir, warm_up=False).predict_proba(texts)
    np.testing.assert_allclose(load_litert(fp32).predict_proba(texts), expected, atol=1e-4)
    # int8 (XNNPACK cannot prepare its token-packed graph: LiteRT's own kernels answer); measured 1.2e-3 at most.
    np.testing.assert_allclose(load_litert(int8).predict_proba(texts), expected, atol=1e-2)
