"""Layer probing: attention statistics and linear probes over a labelled text set.

Linear probes in the manner of Tenney et al. (2019): a logistic regression on
each layer's `[CLS]` vector and on its mean over real tokens, scored on a
held-out split. scikit-learn is imported inside `linear_probes` (the `inspect`
extra), so that importing this module does not need it.
"""

import logging
import math
import time

import numpy as np

from bert_keras.data.texts import stratified_split
from bert_keras.inspection.statistics import AttentionStatistics, is_punctuation

logger = logging.getLogger(__name__)

POOLINGS = ("cls", "mean")


def pooled_features(hidden, mask):
    """`[CLS]` and mean-pooled features of every layer.

    Args:
        hidden: array `(layers + 1, batch, seq, hidden)`.
        mask: int array `(batch, seq)`.

    Returns:
        dict `{"cls": (layers + 1, batch, hidden), "mean": (layers + 1, batch, hidden)}`.
    """
    weights = np.asarray(mask, dtype=np.float32)[None, :, :, None]  # (1, batch, seq, 1)
    mean = (hidden * weights).sum(axis=2) / weights.sum(axis=2)  # (layers + 1, batch, hidden)
    return {"cls": hidden[:, :, 0, :], "mean": mean}


def linear_probes(features, labels, train_index, test_index, C=0.01, seed=0):
    """Accuracy of a logistic regression on each layer's (standardized) features.

    Args:
        features: dict pooling -> array `(layers + 1, examples, hidden)`.
        labels: int array `(examples,)`.
        train_index, test_index: index arrays of the two parts.
        C: float. Inverse L2 strength. The default `0.01` is strong: hidden
            states have hundreds of dimensions and probe sets a few thousand
            examples (on 1,600 MiniLM tweet vectors it scored higher than
            `C=1` and converged in a fifth of the iterations).

    Returns:
        dict pooling -> list of held-out accuracies, one per layer (index 0: embeddings).
    """
    # scikit-learn is the inspect extra's dependency, needed only here.
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    labels = np.asarray(labels)
    accuracies = {}
    for pooling, values in features.items():
        accuracies[pooling] = []
        for layer_values in values:
            model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, C=C, random_state=seed))
            model.fit(layer_values[train_index], labels[train_index])
            accuracies[pooling].append(float(np.mean(model.predict(layer_values[test_index]) == labels[test_index])))
    return accuracies


# Below this many held-out examples a probe's accuracy is too uncertain to read layer by layer.
MIN_HELD_OUT = 200


def held_out_warning(test_size):
    """A warning when `test_size` held-out examples give accuracies too uncertain to compare layers, else None.

    The margin is the 95% half-width of an accuracy near 0.5 (`1.96 * sqrt(0.25 / n)`), the widest there is.

    >>> held_out_warning(39)
    'The probes are scored on 39 held-out examples: each accuracy is uncertain by up to +-0.157 (95%), more than most differences between layers. Probe 1000 or more examples (--max-examples) to read the layers apart.'
    >>> held_out_warning(400) is None
    True
    """
    if test_size >= MIN_HELD_OUT:
        return None
    margin = 1.96 * math.sqrt(0.25 / max(test_size, 1))
    return (f"The probes are scored on {test_size} held-out examples: each accuracy is uncertain by up to "
            f"+-{margin:.3f} (95%), more than most differences between layers. Probe "
            f"{math.ceil(MIN_HELD_OUT / 0.2)} or more examples (--max-examples) to read the layers apart.")


def attention_statistics(inspector):
    """An empty `AttentionStatistics` for `inspector`'s model: its tokenizer's start and end-of-segment ids
    (`[CLS]`/`[SEP]`, RoBERTa's `<s>`/`</s>`) and the punctuation pieces of its vocabulary, read as its kind of
    tokenizer spells them (`is_punctuation`; special tokens excluded)."""
    tokenizer = inspector.tokenizer
    special = {tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.mask_id, tokenizer.unknown_id}
    kind = inspector.tokenizer_kind
    return AttentionStatistics(
        inspector.num_layers,
        inspector.num_heads,
        cls_id=tokenizer.cls_id,
        sep_id=tokenizer.sep_id,
        punctuation_ids=[i for i, token in enumerate(inspector.vocabulary)
                         if i not in special and is_punctuation(token, kind)],
    )


def probe(inspector, texts, labels, label_names, text_pairs=None, batch_size=32, test_fraction=0.2, seed=0, progress=None):
    """Attention statistics and linear probes of every layer over a labelled text set.

    Args:
        inspector: `bert_keras.inspection.Inspector`.
        texts: list of str.
        labels: int array of label indices.
        label_names: list of str.
        text_pairs: optional list of str.
        batch_size: int. Defaults to `32`.
        test_fraction: float. The held-out share of the probes (stratified). Defaults to `0.2`.
        seed: int. Defaults to `0`.
        progress: optional callable `progress(done, total)` after each batch.

    Returns:
        A dict ready for JSON: `attention` (see `AttentionStatistics.result`;
        and `special_tokens`, what "cls" and "sep" are in this vocabulary),
        `probe` (`accuracy` per pooling and layer, `majority_baseline`,
        `train_size`, `test_size`), `num_examples`, `truncated`, `seconds`,
        `warnings` (e.g. too few held-out examples: `held_out_warning`).
    """
    labels = np.asarray(labels)
    if len(texts) != len(labels):
        raise ValueError(f"Expected one label per text. Received: {len(texts)} texts and {len(labels)} labels")
    if len(np.unique(labels)) < 2:
        raise ValueError(f"Probing needs two or more labels; the data has {len(np.unique(labels))}.")
    stats = attention_statistics(inspector)
    features = {pooling: [] for pooling in POOLINGS}
    truncated = 0
    start = time.perf_counter()
    for begin in range(0, len(texts), batch_size):
        end = min(begin + batch_size, len(texts))
        pairs = None if text_pairs is None else text_pairs[begin:end]
        inputs, counts = inspector.encode(texts[begin:end], pairs)
        probs, hidden = inspector.run(inputs)
        stats.update(probs, inputs["input_word_ids"], inputs["input_mask"])
        for pooling, values in pooled_features(hidden, inputs["input_mask"]).items():
            features[pooling].append(values)
        special = inspector.num_special_tokens(1 if pairs is None else 2)
        truncated += int(np.sum(counts + special > inspector.seq_length))
        if progress is not None:
            progress(end, len(texts))
    forward_seconds = time.perf_counter() - start
    features = {pooling: np.concatenate(parts, axis=1) for pooling, parts in features.items()}
    train_index, test_index = stratified_split(labels, (1 - test_fraction, test_fraction), seed=seed)
    accuracies = linear_probes(features, labels, train_index, test_index, seed=seed)
    majority = np.bincount(labels[train_index], minlength=len(label_names)).argmax()
    return {
        "num_examples": len(texts),
        "truncated": truncated,
        "seq_length": inspector.seq_length,
        "attention": dict(stats.result(), special_tokens=inspector.special_tokens),
        "probe": {
            "accuracy": accuracies,
            "layers": ["embeddings"] + [f"layer {i + 1}" for i in range(inspector.num_layers)],
            "majority_baseline": float(np.mean(labels[test_index] == majority)),
            "label_names": list(label_names),
            "train_size": int(len(train_index)),
            "test_size": int(len(test_index)),
        },
        "seconds": {"forward": forward_seconds, "total": time.perf_counter() - start},
        "warnings": [w for w in [held_out_warning(len(test_index))] if w],
    }
