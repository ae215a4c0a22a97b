"""The sentence encoder's answers: texts in, one embedding per text out, in input order, on any engine.

`SentenceEncoderAnswers.encode` checks the texts, cuts them into batches of
similar lengths (longest first: less padding per batch, as
sentence-transformers batches; a long document only beside texts of more
than half its length, `kinds._batches`) and puts each batch's rows back in input
order; the engine embeds the batches (`_embed_batches`: the SavedModel two
batches per call, LiteRT one). Pooling and normalisation are in the model's
graph, the same on both engines.
"""

import numpy as np

from bert_keras._checks import check_int
from bert_keras.export.kinds._batches import length_batches
from bert_keras.predictions import text_list


class SentenceEncoderAnswers:
    """`encode` of a loaded sentence encoder, over its engine's `_embed_batches`.

    The class it is mixed into sets `embedding_dim` and implements
    `_embed_batches(batches)`: a list of lists of texts -> one float32
    `(len(batch), dim)` array per batch, in order. `_text_batch` turns what a
    caller passes into `(list of texts, single)` (`predictions.text_list`;
    the SavedModel engine also takes a string tensor).
    """

    _text_batch = staticmethod(text_list)

    def _embed_batches(self, batches):
        raise NotImplementedError

    def encode(self, texts, batch_size=32):
        """Embeddings of texts, float32 `(len(texts), dim)` in input order (`(dim,)` for a single str).

        Args:
            texts: a str, or a list (or numpy array) of str.
            batch_size: int. Texts per call of the model. Defaults to `32`.
        """
        self.check_serves_text()
        texts, single = self._text_batch(texts)
        batch_size = check_int("batch_size", batch_size, minimum=1)
        output = np.zeros((len(texts), self.embedding_dim), dtype="float32")
        batches = length_batches([len(text) for text in texts], batch_size, sort_short=True)
        for rows, vectors in zip(batches, self._embed_batches([[texts[i] for i in rows] for rows in batches])):
            output[rows] = np.asarray(vectors)
        self.answered()
        return output[0] if single else output
