"""The outputs of `bert-keras explain` and `bert-keras probe`, written as one directory each."""

import json
import os

from bert_keras._files import staged_directory
from bert_keras.inspection import page, plots
from bert_keras.inspection.probing import probe

ATTENTION_JSON = "attention.json"
ATTENTION_HTML = "attention.html"
PROBE_JSON = "probe.json"
STATISTICS_PNG = "attention_statistics.png"
PROBE_PNG = "probe_accuracy.png"


def layer_png(layer):
    return f"attention_layer_{layer + 1:02d}.png"


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)


def write_explanation(inspector, text, out_dir, text_pair=None, overwrite=False, source=None):
    """Runs one text (or pair) and writes `attention.json`, `attention.html` and a PNG per layer.

    Args:
        inspector: `bert_keras.inspection.Inspector`.
        text: str. A non-empty text.
        out_dir: str. The output directory (written whole, in one step).
        text_pair: optional str. A second segment.
        overwrite: bool. Replace an earlier output of this package. Defaults to `False`.
        source: optional str. Where the weights came from (a checkpoint folder
            or a module pair): its absolute path is the page's title and
            `attention.json`'s `source`.

    Returns:
        `(data, files)`: the content of attention.json and the paths written.
    """
    inspection = inspector.inspect([text], None if text_pair is None else [text_pair])[0]
    data = page.attention_data(inspection, text, text_pair, seq_length=inspector.seq_length)
    if source is not None:
        data["source"] = os.path.abspath(os.fspath(source))
    title = "Attention" + (f" of {data['source']}" if source is not None else "")
    names = [ATTENTION_JSON, ATTENTION_HTML] + [layer_png(i) for i in range(inspector.num_layers)]
    with staged_directory(out_dir, overwrite, kind="explain", argument="--out") as staging:
        _write_json(os.path.join(staging, ATTENTION_JSON), data)
        with open(os.path.join(staging, ATTENTION_HTML), "w", encoding="utf-8") as f:
            f.write(page.render_page(data, title=title))
        for layer in range(inspector.num_layers):
            plots.plot_layer_attention(inspection.attention[layer], inspection.tokens, layer, os.path.join(staging, layer_png(layer)))
    return data, [os.path.join(out_dir, name) for name in names]


def write_probe(inspector, data, out_dir, batch_size=32, test_fraction=0.2, seed=0, overwrite=False, progress=None):
    """Runs `probe` on a `LabelledText` and writes `probe.json` and its two plots.

    Returns:
        `(result, files)`.
    """
    result = probe(
        inspector, data.texts, data.labels, data.label_names, text_pairs=data.text_pairs,
        batch_size=batch_size, test_fraction=test_fraction, seed=seed, progress=progress,
    )
    names = [PROBE_JSON, STATISTICS_PNG, PROBE_PNG]
    with staged_directory(out_dir, overwrite, kind="probe", argument="--out") as staging:
        _write_json(os.path.join(staging, PROBE_JSON), result)
        plots.plot_statistics(result["attention"]["per_layer"], os.path.join(staging, STATISTICS_PNG),
                              special_tokens=result["attention"].get("special_tokens"))
        plots.plot_probes(result["probe"], os.path.join(staging, PROBE_PNG))
    return result, [os.path.join(out_dir, name) for name in names]
