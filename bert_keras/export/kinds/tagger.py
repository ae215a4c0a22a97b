"""The tagger's answers: texts in, per text its entities with their exact characters out, on any engine.

`TaggerAnswers` batches texts through the engine's per-piece outputs
(`_piece_batch`: a list of str -> one dict per text, `piece_rows` of the
signature's padded outputs) and groups the pieces into entities as
transformers' token-classification pipeline does
(`bert_keras.export.entity_groups`), with the offsets the model's graph
gives: Python never tokenizes again.
"""

from bert_keras._checks import check_int
from bert_keras.export.entity_groups import check_aggregation, text_entities  # no TensorFlow (text.decoding)
from bert_keras.predictions import text_list

# What a tagger's `serving_default` (and a LiteRT tagger's `serve`) returns, per text padded to the batch's longest.
OUTPUTS = ("tag_ids", "scores", "char_starts", "char_ends", "tokens", "token_ids", "window", "piece_index",
           "primary", "lengths")


def piece_rows(outputs):
    """One dict per text from a batch of the tagger's padded outputs (numpy, `OUTPUTS`): each text's `lengths`
    entries kept, its `tokens` decoded to str."""
    outputs = dict(outputs)
    rows = []
    for row, length in enumerate(outputs.pop("lengths")):
        piece = {name: value[row, :length] for name, value in outputs.items()}
        piece["tokens"] = [token.decode("utf-8") for token in piece["tokens"]]
        rows.append(piece)
    return rows


class TaggerAnswers:
    """`tag_pieces` and `predict` of a loaded tagger, over its engine's `_piece_batch`.

    The class it is mixed into sets `tag_names`, `aggregation` (the
    export's default strategy), `tokenizer_kind`, `_unknown_token` and
    `_suffix_indicator` (how its pieces make words), and implements
    `_piece_batch(texts)`: one dict of per-piece outputs per text.
    """

    def _piece_batch(self, texts):
        raise NotImplementedError

    def tag_pieces(self, texts, batch_size=32):
        """The per-piece outputs for `texts` (a list of str), as numpy arrays, one dict per text, padding cut."""
        self.check_serves_text()
        texts, _ = text_list(texts)
        batch_size = check_int("batch_size", batch_size, minimum=1)
        rows = []
        for begin in range(0, len(texts), batch_size):
            rows.extend(self._piece_batch(texts[begin : begin + batch_size]))
        self.answered()
        return rows

    def predict(self, texts, aggregation=None, batch_size=32):
        """The entities of one text or many, as transformers' token-classification pipeline gives them.

        Args:
            texts: a str, or a list (or numpy array) of str.
            aggregation: str. The pipeline's `aggregation_strategy`:
                `"simple"` (adjacent pieces of one type grouped, a `B-`
                starting a new group), `"first"`, `"max"`, `"average"` (each
                word gets one tag: its first piece's, its most confident
                piece's, or the best of its pieces' averaged scores, then
                grouped), or `"none"` (one dict per piece). Defaults to the
                export's own (`aggregation`: the strategy it was trained
                for, `"first"` for taggers of this version; `"simple"` for
                one written before it recorded one).
            batch_size: int. Texts per call of the model. Defaults to `32`.

        Returns:
            Per text a list of entities `{"entity_group", "score", "word",
            "start", "end"}` (for `"none"`: `{"entity", "score", "index",
            "word", "start", "end"}`, `index` the piece's place after
            `[CLS]`), tag `O` left out; `text[start:end]` is the entity's
            characters. For one str, its list; for a list, a list of them.
            Over-long texts: see `export_tagger` (each window aggregated,
            overlapping entities merged, the longest kept).
        """
        aggregation = check_aggregation(self.aggregation if aggregation is None else aggregation)
        self.check_serves_text()
        texts, single = text_list(texts)
        pieces = self.tag_pieces(texts, batch_size=batch_size)
        results = [text_entities(text, piece, self.tag_names, aggregation, self._unknown_token,
                                 self._suffix_indicator, self.tokenizer_kind)
                   for text, piece in zip(texts, pieces)]
        return results[0] if single else results
