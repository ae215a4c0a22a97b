"""attention.json, the page in a real headless Chromium, and the PNGs."""

import json
import os
import re

import numpy as np
import pytest

from bert_keras.inspection import Inspector
from bert_keras.inspection.outputs import write_explanation
from bert_keras.inspection.plots import heatmap_size
from tests.inspection.conftest import VOCAB, run_chromium, tiny_encoder

TEXT = "Hello world, the cat sat on the mat!"


@pytest.fixture(scope="module")
def explained(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("explain") / "out")
    inspector = Inspector(tiny_encoder(num_layers=2, num_heads=4), VOCAB, seq_length=16)
    data, files = write_explanation(inspector, TEXT, out, text_pair="what is a cat?")
    return out, data, files


def test_attention_json(explained):
    out, data, _ = explained
    with open(os.path.join(out, "attention.json"), encoding="utf-8") as f:
        stored = json.load(f)
    assert stored == data
    # 10 + 5 word pieces, 13 places: round-robin trimming (TF Hub's rule) cuts the longer text.
    assert stored["tokens"] == ["[CLS]", "hello", "world", ",", "the", "cat", "sat", "on", "the", "[SEP]",
                                "what", "is", "a", "cat", "?", "[SEP]"]
    assert stored["type_ids"] == [0] * 10 + [1] * 6
    attention = np.array(stored["attention"])
    assert attention.shape == (2, 4, 16, 16)  # layers, heads, query, key over the real positions
    np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-4)
    assert np.array(stored["hidden_state_norms"]).shape == (3, 16)
    assert stored["truncated"] is True and stored["num_wordpieces"] == 15


def test_pngs_are_non_blank_images_of_the_expected_size(explained):
    import matplotlib.image

    _, _, files = explained
    pngs = [f for f in files if f.endswith(".png")]
    assert [os.path.basename(f) for f in pngs] == ["attention_layer_01.png", "attention_layer_02.png"]
    for path in pngs:
        image = matplotlib.image.imread(path)
        assert image.shape[1::-1] == heatmap_size(4) == (1000, 250)
        assert image[..., :3].std() > 0.05  # not one flat colour


def test_page_is_self_contained(explained):
    out, _, _ = explained
    with open(os.path.join(out, "attention.html"), encoding="utf-8") as f:
        page = f.read()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing fetched from anywhere
    assert "default-src 'none'" in page


@pytest.mark.slow
def test_page_in_headless_chromium(explained, tmp_path):
    out, data, _ = explained
    url = "file://" + os.path.join(out, "attention.html")
    dom, console = run_chromium(url + "#layer=1&head=2", "--dump-dom")
    assert console == []  # no console message at all: no error, no warning
    assert 'data-ready="true"' in dom
    assert '<div id="errors"></div>' in dom
    shown = re.findall(r'<text class="token query[^"]*"[^>]*>([^<]*)</text>', dom)
    assert shown == data["tokens"]
    assert "layer 2 of 2, head 3 of 4" in dom  # the pickers took the address's layer and head
    assert "Truncated: the input has 15 word pieces" in dom
    assert dom.count("<canvas") == 2 * 4  # model view: layers x heads

    shots = {}
    for key, fragment in (("a", "#layer=0&head=0"), ("b", "#layer=1&head=3"), ("a2", "#layer=0&head=0")):
        path = str(tmp_path / f"{key}.png")
        _, console = run_chromium(url + fragment, f"--screenshot={path}")
        assert console == [] and os.path.getsize(path) > 1000
        import matplotlib.image

        shots[key] = matplotlib.image.imread(path)
    assert shots["a"].shape == shots["b"].shape
    changed = np.abs(shots["a"] - shots["b"]).max(axis=-1) > 0.1
    assert changed.mean() > 0.002  # another layer/head draws other lines
    np.testing.assert_array_equal(shots["a"], shots["a2"])  # and the same choice draws the same picture
