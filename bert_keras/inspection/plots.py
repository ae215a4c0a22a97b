"""PNG plots with matplotlib (the `inspect` extra): attention heatmaps, layer statistics, probe curves.

matplotlib is imported inside each function with the non-interactive Agg
backend, so that importing this module needs neither matplotlib nor a display.
"""

import math

import numpy as np

HEAD_PANEL_INCHES = 2.5
DPI = 100


def _pyplot():
    # matplotlib is an optional dependency (the inspect extra); Agg draws without a display.
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def heatmap_grid(num_heads):
    """`(rows, columns)` of the head panels in a layer's heatmap figure."""
    columns = min(num_heads, 4)
    return math.ceil(num_heads / columns), columns


def heatmap_size(num_heads):
    """`(width, height)` in pixels of a layer's heatmap PNG."""
    rows, columns = heatmap_grid(num_heads)
    return int(columns * HEAD_PANEL_INCHES * DPI), int(rows * HEAD_PANEL_INCHES * DPI)


def plot_layer_attention(attention, tokens, layer, path):
    """Writes one layer's heads as heatmaps (rows: queries, columns: keys) to a PNG.

    Args:
        attention: array `(num_heads, n, n)`.
        tokens: list of n str.
        layer: int. The layer index (0-based), for the title.
        path: str. The PNG to write; its size is `heatmap_size(num_heads)`.
    """
    plt = _pyplot()
    num_heads, n = attention.shape[0], attention.shape[1]
    rows, columns = heatmap_grid(num_heads)
    width, height = heatmap_size(num_heads)
    figure, axes = plt.subplots(rows, columns, figsize=(width / DPI, height / DPI), dpi=DPI, squeeze=False)
    labels = n <= 24
    for index, axis in enumerate(axes.flat):
        if index >= num_heads:
            axis.axis("off")
            continue
        axis.imshow(attention[index], cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
        axis.set_title(f"layer {layer + 1} head {index + 1}", fontsize=8)
        if labels:
            axis.set_xticks(range(n), tokens, rotation=90, fontsize=5)
            axis.set_yticks(range(n), tokens, fontsize=5)
        else:
            axis.set_xticks([])
            axis.set_yticks([])
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path


def plot_statistics(per_layer, path, special_tokens=None):
    """Writes the per-layer attention shares (and entropy on a second axis) to a PNG.

    `special_tokens` names the "cls" and "sep" lines (default `[CLS]`, `[SEP]`; RoBERTa's `<s>`, `</s>`).
    """
    plt = _pyplot()
    figure, (shares, entropy) = plt.subplots(1, 2, figsize=(11, 4), dpi=DPI)
    layers = np.arange(1, len(per_layer["cls"]) + 1)
    labels = dict({"cls": "[CLS]", "sep": "[SEP]"}, **(special_tokens or {}))
    for name in ("cls", "sep", "punctuation", "self", "previous", "next"):
        shares.plot(layers, per_layer[name], marker="o", label=labels.get(name, name))
    shares.set_xlabel("layer")
    shares.set_ylabel("average share of attention")
    shares.set_xticks(layers)
    shares.set_ylim(0, 1)
    shares.legend(fontsize=8)
    shares.set_title("Where attention goes")
    entropy.plot(layers, per_layer["entropy"], marker="o", color="black")
    entropy.set_xlabel("layer")
    entropy.set_ylabel("mean attention entropy (nats)")
    entropy.set_xticks(layers)
    entropy.set_title("Attention entropy")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path


def plot_probes(probe_result, path):
    """Writes the probe accuracy by layer (one line per pooling, the majority baseline dashed)."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 4), dpi=DPI)
    accuracy = probe_result["accuracy"]
    layers = np.arange(len(next(iter(accuracy.values()))))
    for pooling, values in accuracy.items():
        axis.plot(layers, values, marker="o", label={"cls": "[CLS] vector", "mean": "mean of tokens"}.get(pooling, pooling))
    axis.axhline(probe_result["majority_baseline"], color="gray", linestyle="--", label="majority class")
    axis.set_xticks(layers, ["emb"] + [str(i) for i in layers[1:]])
    axis.set_xlabel("layer (emb: embeddings output)")
    axis.set_ylabel("held-out accuracy")
    axis.set_title("Linear probe by layer")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path
