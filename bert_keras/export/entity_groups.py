"""Word pieces' tags -> entities, with the semantics of transformers' token-classification pipeline.

Pure Python and numpy over what a tagger export returns per text (tags'
scores, each piece's token and its character span from the graph): no
tokenization happens here. The rules are the pipeline's
(`TokenClassificationPipeline.gather_pre_entities`, `aggregate`,
`group_entities`, `aggregate_overlapping_entities`), reimplemented:

- a piece continues its word ("subword") when its token's length differs
  from its span's (`##ing` against `ing`); an unknown piece (`[UNK]`) never
  does, and its word is the text it spans;
- `"simple"` tags each piece by its best score, `"first"` / `"max"` /
  `"average"` tag each word by its first piece, its most confident piece, or
  its pieces' averaged scores; then adjacent items of one type are grouped
  unless the next one's tag begins with `B-` (a group's score is the mean of
  its items'), and groups of tag `O` are left out;
- a word is its tokens joined as the WordPiece decoder joins them (`##`
  pieces glued, the others after a space, spaces before `. ? ! ,` dropped);
- an over-long text's windows are aggregated one by one, then entities that
  overlap are merged: of two, the longer one stays (equal lengths: the
  higher score).
"""

import numpy as np

AGGREGATIONS = ("simple", "first", "max", "average", "none")
IGNORED = ("O",)
# The WordPiece decoder's clean-up (tokenizers' `decoders.WordPiece(cleanup=True)`), token by token.
_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def check_aggregation(aggregation):
    """`aggregation` if it is one of `AGGREGATIONS`, else a `ValueError` naming it."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"Received an invalid value for argument `aggregation`, expected one of "
                         f"{', '.join(repr(a) for a in AGGREGATIONS)}. Received: aggregation={aggregation!r}")
    return aggregation


def tokens_to_string(tokens, suffix_indicator="##"):
    """Word pieces as one string, as transformers' BERT tokenizer decodes them.

    >>> tokens_to_string(["new", "york", "##er", ",", "hi"])
    'new yorker, hi'
    """
    words = []
    for i, token in enumerate(tokens):
        if i:
            token = token[len(suffix_indicator):] if token.startswith(suffix_indicator) else " " + token
        for dirty, clean in _CLEANUP:
            token = token.replace(dirty, clean)
        words.append(token)
    return "".join(words)


def _pre_entities(text, pieces, entries, unknown_token):
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
            "is_subword": not unknown and len(token) != len(span),
        })
    return items


def _tagged(item, scores, tag_names):
    best = int(np.argmax(scores))
    return {"entity": tag_names[best], "score": scores[best], **item}


def _word(items, tag_names, aggregation, suffix_indicator):
    """One word's pieces as one item (`aggregate_word`)."""
    if aggregation == "first":
        scores = items[0]["scores"]
    elif aggregation == "max":
        scores = max(items, key=lambda item: item["scores"].max())["scores"]  # the first of equal maxima
    else:  # average
        scores = np.nanmean(np.stack([item["scores"] for item in items]), axis=0)
    best = int(np.argmax(scores))
    return {"entity": tag_names[best], "score": scores[best],
            "word": tokens_to_string([item["word"] for item in items], suffix_indicator),
            "start": items[0]["start"], "end": items[-1]["end"]}


def _words(items, tag_names, aggregation, suffix_indicator):
    """The items grouped into words (a piece that is not a subword begins one), each tagged once."""
    words = []
    for item in items:
        if words and item["is_subword"]:
            words[-1].append(item)
        else:
            words.append([item])
    return [_word(word, tag_names, aggregation, suffix_indicator) for word in words]


def _bi_tag(name):
    """`("B", "PER")` for `B-PER`, `("I", "PER")` for `I-PER`, else `("I", name)` (a continuation)."""
    if name.startswith("B-") or name.startswith("I-"):
        return name[0], name[2:]
    return "I", name


def _group(items, suffix_indicator):
    return {
        "entity_group": items[0]["entity"].split("-", 1)[-1],
        "score": float(np.mean(np.nanmean([item["score"] for item in items]))),
        "word": tokens_to_string([item["word"] for item in items], suffix_indicator),
        "start": items[0]["start"],
        "end": items[-1]["end"],
    }


def _groups(items, suffix_indicator):
    """Adjacent items of one type grouped; an item tagged `B-` begins a new group (`group_entities`)."""
    groups = []
    for item in items:
        bi, tag = _bi_tag(item["entity"])
        if groups and bi != "B" and tag == _bi_tag(groups[-1][-1]["entity"])[1]:
            groups[-1].append(item)
        else:
            groups.append([item])
    return [_group(group, suffix_indicator) for group in groups]


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


def text_entities(text, pieces, tag_names, aggregation="simple", unknown_token="[UNK]", suffix_indicator="##"):
    """One text's entities from a tagger export's per-piece outputs (see `TextTagger.predict`).

    Args:
        text: str, the text as given to the export.
        pieces: dict of the export's outputs for this text, padding cut:
            `scores` `(entries, num_tags)`, `char_starts`, `char_ends`,
            `tokens` (list of str), `window`, `piece_index`, `primary`.
        tag_names: list of str.
        aggregation: one of `AGGREGATIONS`.
        unknown_token: str. The vocabulary's unknown token.
        suffix_indicator: str. The prefix of word pieces that continue a word.

    Returns:
        A list of dicts (see `TextTagger.predict`).
    """
    check_aggregation(aggregation)
    windows = np.asarray(pieces["window"])
    if aggregation == "none":  # each piece once: its primary copy, in the text's order
        entries = sorted(np.flatnonzero(pieces["primary"]), key=lambda i: int(pieces["piece_index"][i]))
        items = [_tagged(item, item.pop("scores"), tag_names)
                 for item in _pre_entities(text, pieces, entries, unknown_token)]
        return [{key: float(item["score"]) if key == "score" else item[key]
                 for key in ("entity", "score", "index", "word", "start", "end")}
                for item in items if item["entity"] not in IGNORED]
    entities = []
    for window in np.unique(windows):
        items = _pre_entities(text, pieces, np.flatnonzero(windows == window), unknown_token)
        if aggregation == "simple":
            items = [_tagged(item, item["scores"], tag_names) for item in items]
        else:
            items = _words(items, tag_names, aggregation, suffix_indicator)
        entities.extend(group for group in _groups(items, suffix_indicator) if group["entity_group"] not in IGNORED)
    return _merge_overlapping(entities) if len(np.unique(windows)) > 1 else entities
