"""Word pieces' tags -> entities, with the semantics of transformers' token-classification pipeline.

Pure Python and numpy over what a tagger export returns per text (tags'
scores, each piece's token and its character span from the graph): no
tokenization happens here. The rules are the pipeline's
(`TokenClassificationPipeline.gather_pre_entities`, `aggregate`,
`group_entities`, `aggregate_overlapping_entities`), reimplemented:

- a piece continues its word ("subword"): for WordPiece, whose model has a
  continuing-subword prefix, when its token's length differs from its span's
  (`##ing` against `ing`); for SentencePiece and byte-level BPE (no such
  prefix), the pipeline's fallback: when it does not start the text and no
  space (U+0020) is just before or at its first character. An unknown piece
  never does, and its word is the text it spans;
- `"simple"` tags each piece by its best score, `"first"` / `"max"` /
  `"average"` tag each word by its first piece, its most confident piece, or
  its pieces' averaged scores; then adjacent items of one type are grouped
  unless the next one's tag begins with `B-` (a group's score is the mean of
  its items'), and groups of tag `O` are left out;
- a word is its tokens joined as the tokenizer's decoder joins them
  (WordPiece: `##` pieces glued, the others after a space, spaces before
  `. ? ! ,` dropped; SentencePiece: "▁" read as a space, the first one
  dropped; byte-level BPE: the tokens' bytes as UTF-8, so " New York" keeps
  the space its pieces hold);
- an over-long text's windows are aggregated one by one, then entities that
  overlap are merged: of two, the longer one stays (equal lengths: the
  higher score).
"""

import numpy as np

# The kinds' decoding without TensorFlow: a LiteRT tagger groups its entities here without importing it.
from bert_keras.text.decoding import DECODINGS, decoding_of

AGGREGATIONS = ("simple", "first", "max", "average", "none")
IGNORED = ("O",)


def check_aggregation(aggregation):
    """`aggregation` if it is one of `AGGREGATIONS`, else a `ValueError` naming it."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"Received an invalid value for argument `aggregation`, expected one of "
                         f"{', '.join(repr(a) for a in AGGREGATIONS)}. Received: aggregation={aggregation!r}")
    return aggregation


def check_tokenizer_kind(kind):
    """The decoding of tokenizer `kind` (`text.decoding`: one per kind of `text.kinds.TOKENIZER_KINDS`), else a
    `ValueError` naming `tokenizer`."""
    if kind not in DECODINGS:
        raise ValueError(f"Received an invalid value for argument `tokenizer`, expected one of "
                         f"{', '.join(repr(k) for k in DECODINGS)}. Received: tokenizer={kind!r}")
    return decoding_of(kind)


def tokens_to_string(tokens, suffix_indicator="##", tokenizer="wordpiece"):
    """Word pieces as one string, as transformers' fast tokenizer of that kind decodes them (the kind's own
    `tokens_to_string`).

    >>> tokens_to_string(["new", "york", "##er", ",", "hi"])
    'new yorker, hi'
    >>> tokens_to_string(["\u2581new", "\u2581york", "er"], tokenizer="sentencepiece")
    'new yorker'
    >>> tokens_to_string(["\u0120New", "\u0120York"], tokenizer="byte_bpe")
    ' New York'
    """
    return check_tokenizer_kind(tokenizer).tokens_to_string(tokens, suffix_indicator)


def _pre_entities(text, pieces, entries, unknown_token, kind):
    """The pipeline's "pre-entities" of `entries` (indices into the per-piece arrays `pieces`), in order."""
    items = []
    for i in entries:
        start, end = int(pieces["char_starts"][i]), int(pieces["char_ends"][i])
        token, span = pieces["tokens"][i], text[start:end]
        unknown = token == unknown_token
        items.append({
            "word": span if unknown else token,
            "scores": pieces["scores"][i],
            "start": start,
            "end": end,
            "index": int(pieces["piece_index"][i]) + 1,  # after [CLS], as the pipeline counts
            "is_subword": not unknown and not kind.piece_starts_word(token, text, start, end),
        })
    return items


def _tagged(item, scores, tag_names):
    best = int(np.argmax(scores))
    return {"entity": tag_names[best], "score": scores[best], **item}


def _word(items, tag_names, aggregation, decoding):
    """One word's pieces as one item (`aggregate_word`)."""
    if aggregation == "first":
        scores = items[0]["scores"]
    elif aggregation == "max":
        scores = max(items, key=lambda item: item["scores"].max())["scores"]  # the first of equal maxima
    else:  # average
        scores = np.nanmean(np.stack([item["scores"] for item in items]), axis=0)
    best = int(np.argmax(scores))
    return {"entity": tag_names[best], "score": scores[best],
            "word": decoding[1].tokens_to_string([item["word"] for item in items], decoding[0]),
            "start": items[0]["start"], "end": items[-1]["end"]}


def _words(items, tag_names, aggregation, decoding):
    """The items grouped into words (a piece that is not a subword begins one), each tagged once."""
    words = []
    for item in items:
        if words and item["is_subword"]:
            words[-1].append(item)
        else:
            words.append([item])
    return [_word(word, tag_names, aggregation, decoding) for word in words]


def _bi_tag(name):
    """`("B", "PER")` for `B-PER`, `("I", "PER")` for `I-PER`, else `("I", name)` (a continuation)."""
    if name.startswith("B-") or name.startswith("I-"):
        return name[0], name[2:]
    return "I", name


def _group(items, decoding):
    return {
        "entity_group": items[0]["entity"].split("-", 1)[-1],
        "score": float(np.mean(np.nanmean([item["score"] for item in items]))),
        "word": decoding[1].tokens_to_string([item["word"] for item in items], decoding[0]),
        "start": items[0]["start"],
        "end": items[-1]["end"],
    }


def _groups(items, decoding):
    """Adjacent items of one type grouped; an item tagged `B-` begins a new group (`group_entities`); groups of an
    ignored type (`O`) left out."""
    groups = []
    for item in items:
        bi, tag = _bi_tag(item["entity"])
        if groups and bi != "B" and tag == _bi_tag(groups[-1][-1]["entity"])[1]:
            groups[-1].append(item)
        else:
            groups.append([item])
    return [_group(group, decoding) for group in groups if group[0]["entity"].split("-", 1)[-1] not in IGNORED]


def _merge_overlapping(entities):
    """Of entities that overlap (from windows that share pieces), the longer; equal lengths, the higher score."""
    if not entities:
        return entities
    entities = sorted(entities, key=lambda entity: entity["start"])
    merged, previous = [], entities[0]
    for entity in entities:
        if previous["start"] <= entity["start"] < previous["end"]:
            length, previous_length = entity["end"] - entity["start"], previous["end"] - previous["start"]
            if length > previous_length or (length == previous_length and entity["score"] > previous["score"]):
                previous = entity
        else:
            merged.append(previous)
            previous = entity
    merged.append(previous)
    return merged


def text_entities(text, pieces, tag_names, aggregation="simple", unknown_token="[UNK]", suffix_indicator="##",
                  tokenizer="wordpiece"):
    """One text's entities from a tagger export's per-piece outputs (see `TextTagger.predict`).

    Args:
        text: str, the text as given to the export.
        pieces: dict of the export's outputs for this text, padding cut:
            `scores` `(entries, num_tags)`, `char_starts`, `char_ends`,
            `tokens` (list of str), `window`, `piece_index`, `primary`.
        tag_names: list of str.
        aggregation: one of `AGGREGATIONS`.
        unknown_token: str. The vocabulary's unknown token.
        suffix_indicator: str. The prefix of word pieces that continue a word
            (WordPiece).
        tokenizer: str, one of `TOKENIZER_KINDS`: the kind of tokenizer that
            cut the pieces (how words are found and joined). Defaults to
            `"wordpiece"`.

    Returns:
        A list of dicts (see `TextTagger.predict`).
    """
    check_aggregation(aggregation)
    kind = check_tokenizer_kind(tokenizer)
    decoding = (suffix_indicator, kind)
    windows = np.asarray(pieces["window"])
    if aggregation == "none":  # each piece once: its primary copy, in the text's order
        entries = sorted(np.flatnonzero(pieces["primary"]), key=lambda i: int(pieces["piece_index"][i]))
        items = [_tagged(item, item.pop("scores"), tag_names)
                 for item in _pre_entities(text, pieces, entries, unknown_token, kind)]
        return [{key: float(item["score"]) if key == "score" else item[key]
                 for key in ("entity", "score", "index", "word", "start", "end")}
                for item in items if item["entity"] not in IGNORED]
    order = np.argsort(windows, kind="stable")  # each window's entries, in order: one pass, not one per window
    by_window = np.split(order, np.flatnonzero(np.diff(windows[order])) + 1) if len(order) else []
    entities = []
    for entries in by_window:
        items = _pre_entities(text, pieces, entries, unknown_token, kind)
        if aggregation == "simple":
            items = [_tagged(item, item["scores"], tag_names) for item in items]
        else:
            items = _words(items, tag_names, aggregation, decoding)
        entities.extend(_groups(items, decoding))
    return _merge_overlapping(entities) if len(by_window) > 1 else entities
