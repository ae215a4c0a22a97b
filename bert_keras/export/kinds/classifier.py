"""The classifier's answers: texts (or pairs) in, per text the label and every class's score out, on any engine.

`ClassifierAnswers` checks the texts, leaves blank ones out (they get
`predictions.blank_prediction()`), batches the rest through the engine's
scores and names the classes. The engine's side (`_scores`: string columns
-> `(batch, num_classes)` scores) and what it reads at load (`inputs`,
`num_classes`, `label_names`) are the only differences between a SavedModel
and a `.tflite` file.
"""

import numpy as np

from bert_keras._checks import check_int
from bert_keras.export.kinds._batches import length_batches
from bert_keras.predictions import as_probabilities, blank_prediction, check_top_k, labelled_predictions, text_list

# Texts up to this many characters (~512 pieces) are batched in input order: their padding costs little.


class ClassifierAnswers:
    """`predict` and `predict_proba` of a loaded classifier, over its engine's `_scores`.

    The class it is mixed into sets `inputs` (the string inputs' names:
    `["text"]` or `["text", "text_pair"]`), `num_classes` and `label_names`,
    and implements `_scores(columns)`: the model's scores `(batch,
    num_classes)` (probabilities or logits) for lists of str in `inputs`
    order.
    """

    def _scores(self, columns):
        raise NotImplementedError

    def _columns(self, texts, text_pairs):
        """`(texts, pairs_or_None, single)` from the forms `predict` accepts."""
        self.check_serves_text()
        pairs_model = len(self.inputs) == 2
        if not pairs_model:
            if text_pairs is not None:
                raise ValueError(f"This classifier takes single texts (its input: {self.inputs[0]!r}); "
                                 "`text_pairs` must be None.")
            texts, single = text_list(texts)
            return texts, None, single
        single = isinstance(texts, str) or (isinstance(texts, tuple) and text_pairs is None
                                            and len(texts) == 2 and all(isinstance(t, str) for t in texts))
        if single:
            texts = [texts]
            text_pairs = None if text_pairs is None else [text_pairs]
        texts = list(texts)
        if text_pairs is None and all(isinstance(t, (tuple, list)) and len(t) == 2 for t in texts):
            texts, text_pairs = [t[0] for t in texts], [t[1] for t in texts]
        if text_pairs is None:
            raise ValueError("This classifier takes text pairs: pass (text, text_pair) tuples or `text_pairs=`.")
        for name, column in (("texts", texts), ("text_pairs", text_pairs)):
            bad = next((item for item in column if not isinstance(item, str)), None)
            if bad is not None:
                raise TypeError(f"Expected `{name}` to hold strings. Received an item of type "
                                f"{type(bad).__name__}: {bad!r}")
        if len(text_pairs) != len(texts):
            raise ValueError(f"Received {len(texts)} texts and {len(text_pairs)} text pairs; pass as many of each.")
        return texts, list(text_pairs), single

    def predict_proba(self, texts, text_pairs=None, batch_size=64):
        """Class probabilities, a `(n, num_classes)` float32 array, in `label_names` order.

        An output that is not a probability distribution (logits of a
        `model.export()`) gets a softmax, row by row; a softmax keeps the
        order of the classes either way.
        """
        texts, text_pairs, _ = self._columns(texts, text_pairs)
        return self._probabilities(texts, text_pairs, batch_size)

    def _probabilities(self, texts, text_pairs, batch_size):
        batch_size = check_int("batch_size", batch_size, minimum=1)
        out = np.zeros((len(texts), self.num_classes), "float32")
        for part in length_batches([len(t) + (len(text_pairs[i]) if text_pairs else 0) for i, t in enumerate(texts)],
                                   batch_size):
            columns = [[texts[i] for i in part]] + ([[text_pairs[i] for i in part]] if text_pairs else [])
            out[part] = as_probabilities(self._scores(columns))
        return out

    def predict(self, texts, text_pairs=None, *, top_k=None, batch_size=64):
        """Classifies one text or many, as transformers' text-classification pipeline does.

        Args:
            texts: a str (one text), or a list (or numpy array) of str. For
                a classifier of text pairs: a `(text, text_pair)` tuple, a
                list of them, or a list of str with `text_pairs`.
            text_pairs: optional list of str, the second segments.
            top_k: optional int. Keep the `top_k` best classes in `scores`,
                best first. By default every class, in `label_names` order.
            batch_size: int. Texts per call of the model. Defaults to `64`.

        Returns:
            For one text, a dict `{"label": str, "score": float, "scores":
            {label: float}}` (the most probable class, its probability, and
            the probability of every class); for a list, a list of them. A
            blank text (empty or whitespace) gets `{"label": None, "score":
            None, "scores": {}}`: there is nothing to classify.
        """
        texts, text_pairs, single = self._columns(texts, text_pairs)
        check_top_k(top_k, self.num_classes)
        blank = [not (text + (text_pairs[i] if text_pairs else "")).strip() for i, text in enumerate(texts)]
        kept = [i for i, is_blank in enumerate(blank) if not is_blank]
        pairs = None if text_pairs is None else [text_pairs[i] for i in kept]
        probabilities = self._probabilities([texts[i] for i in kept], pairs, batch_size)
        results = iter(labelled_predictions(probabilities, self.label_names, top_k))
        results = [blank_prediction() if is_blank else next(results) for is_blank in blank]
        return results[0] if single else results
