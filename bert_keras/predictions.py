"""A model's outputs as a user reads them, on every engine: labels and scores, embeddings compared.

A classifier's probabilities as label, score and every class's score, as
transformers' pipeline: shared by the Keras task
(`BertClassifier.predict_labels`) and the loaded exports
(`kinds.classifier`), so that all answer in one shape. A sentence
encoder's `encode_query`, `encode_documents` and `similarity`
(`EmbeddingMethods`, over `cosine_similarity`): shared by the Keras task,
its SavedModel export and its LiteRT file. Plain numpy: no TensorFlow.
"""

import collections.abc

import numpy as np


def blank_prediction():
    """What `predict` gives a blank text (empty or only whitespace): no label, as `bert-keras predict` prints it."""
    return {"label": None, "score": None, "scores": {}}


def check_top_k(top_k, num_classes):
    """`top_k` if it is None or an int from 1 to `num_classes`, else a `ValueError` that names it.

    >>> check_top_k(4, 3)
    Traceback (most recent call last):
    ...
    ValueError: Received an invalid value for argument `top_k`, expected an integer from 1 to 3 (the number of classes). Received: top_k=4
    """
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= num_classes):
        raise ValueError(f"Received an invalid value for argument `top_k`, expected an integer from 1 to "
                         f"{num_classes} (the number of classes). Received: top_k={top_k!r}")
    return top_k


def labelled_predictions(probabilities, label_names, top_k=None):
    """Per row of `probabilities` `(n, num_classes)`: `{"label", "score", "scores"}` (the best class, its
    probability, and every class's, or the `top_k` best first).

    >>> labelled_predictions([[0.25, 0.75]], ["neg", "pos"])
    [{'label': 'pos', 'score': 0.75, 'scores': {'neg': 0.25, 'pos': 0.75}}]
    """
    results = []
    for row in np.asarray(probabilities, dtype="float32"):
        best = int(row.argmax())
        order = range(len(row)) if top_k is None else np.argsort(-row, kind="stable")[:top_k]
        results.append({
            "label": label_names[best],
            "score": float(row[best]),
            "scores": {label_names[i]: float(row[i]) for i in order},
        })
    return results


def as_probabilities(outputs):
    """`outputs` `(batch, num_classes)` as probabilities: rows that are not distributions get a softmax.

    >>> as_probabilities([[0.0, 0.0], [0.2, 0.8]]).tolist()
    [[0.5, 0.5], [0.20000000298023224, 0.800000011920929]]
    """
    outputs = np.asarray(outputs, dtype="float32")
    is_distribution = np.all(outputs >= 0, axis=-1) & (np.abs(outputs.sum(axis=-1) - 1) <= 1e-3)
    shifted = np.exp(outputs - outputs.max(axis=-1, keepdims=True))
    return np.where(is_distribution[:, None], outputs, shifted / shifted.sum(axis=-1, keepdims=True))


def text_list(texts, name="texts"):
    """`(list of str, single)` from one str, a list of str or a numpy array of them; a `TypeError` naming `name` for
    anything else (a mapping or a set, whose order is not the caller's, bytes) or an item that is not a str (what the
    loaders' `predict` take)."""
    if isinstance(texts, (collections.abc.Mapping, collections.abc.Set, bytes, bytearray)):
        raise TypeError(f"Expected `{name}` to be a str or a list of str. Received a {type(texts).__name__}.")
    single = isinstance(texts, str)
    if isinstance(texts, np.ndarray):
        texts = texts.tolist() if texts.ndim else [texts.item()]
    texts = [texts] if single else list(texts)
    bad = next((text for text in texts if not isinstance(text, str)), None)
    if bad is not None:
        raise TypeError(f"Expected `{name}` to hold strings. Received an item of type {type(bad).__name__}: {bad!r}")
    return texts, single


def cosine_similarity(a, b):
    """Cosine similarities of every row of `a` with every row of `b`, by one matrix product.

    Args:
        a: array `(n, dim)` or `(dim,)`.
        b: array `(m, dim)` or `(dim,)`.

    Returns:
        float32 numpy array `(n, m)`.

    Example:
    >>> cosine_similarity([[1.0, 0.0], [1.0, 1.0]], [[2.0, 0.0], [0.0, 3.0]]).round(4)
    array([[1.    , 0.    ],
           [0.7071, 0.7071]], dtype=float32)
    """
    a, b = (np.atleast_2d(np.asarray(x, dtype="float32")) for x in (a, b))
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"Expected embeddings of one dimension, (n, dim) and (m, dim). Received: {a.shape} and {b.shape}")
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)  # (n, dim)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)  # (m, dim)
    return a @ b.T  # (n, m)


class EmbeddingMethods:
    """`encode_query`, `encode_documents` and `similarity` (keras-hub's text embedder names) over `encode`."""

    def encode_query(self, queries, batch_size=32):
        """Embeddings of queries, `(n, dim)` (a single str is one query). The model has no query prompt."""
        return self.encode([queries] if isinstance(queries, str) else queries, batch_size=batch_size)

    def encode_documents(self, documents, batch_size=32):
        """Embeddings of documents, `(n, dim)` (a single str is one document)."""
        return self.encode([documents] if isinstance(documents, str) else documents, batch_size=batch_size)

    def similarity(self, query_embeddings, document_embeddings):
        """Cosine similarities `(num_queries, num_documents)` (`cosine_similarity`): dot products when normalised."""
        return cosine_similarity(query_embeddings, document_embeddings)
