"""Tag schemes and entities: the spans a sequence of tags marks, and entity-level scores, as conlleval counts them.

conlleval, the CoNLL shared tasks' scorer, is how published NER figures are
counted. Its rules read BIO and IOB1 alike and accept ill-formed sequences,
as a model may predict them (an `I-` that continues nothing begins an
entity); an entity is correct when its type and both its ends match a true
entity's. conlleval.pl (2004) predates BIOES: for `E-` and `S-` the rules
are those of its Python ports (seqeval's default mode, which the tests check
these scores against), under which a chunk ends after `E-` or `S-` and `S-`
begins one. `entity_spans` finds a sentence's entities, `entity_scores`
scores predictions and `format_entity_report` prints the scores.
`bert_keras.data.tagged` reads tagged files, strictly, in these schemes.
Neither module imports TensorFlow.
"""

__all__ = ["SCHEMES", "entity_scores", "entity_spans", "format_entity_report", "normalized_scheme", "split_tag"]

# Each scheme's prefixes, in the order `TaggedText.tag_names` lists them within a type. IOB2 and IOBES are other
# names of BIO and BIOES.
SCHEMES = {"BIO": "BI", "IOB1": "BI", "BIOES": "BIES", "BILOU": "BILU"}
ALIASES = {"IOB2": "BIO", "IOBES": "BIOES"}
BILOU_AS_BIOES = {"L": "E", "U": "S"}


def normalized_scheme(scheme, argument="scheme"):
    """`scheme`'s name in `SCHEMES` (`"iobes"` -> `"BIOES"`); a `ValueError` naming `argument` for another."""
    name = ALIASES.get(str(scheme).upper(), str(scheme).upper()) if scheme is not None else None
    if name not in SCHEMES:
        names = sorted(SCHEMES) + sorted(ALIASES)
        raise ValueError(f"Received an invalid value for argument `{argument}`, expected one of {names}. "
                         f"Received: {argument}={scheme!r}")
    return name


def split_tag(tag):
    """`"B-PER"` -> `("B", "PER")` (a type may hold `-`: `B-geo-loc`); `"O"` -> `("O", "")`; else None."""
    if tag == "O":
        return "O", ""
    prefix, dash, type_ = tag.partition("-") if isinstance(tag, str) else ("", "", "")
    return (prefix, type_) if dash and len(prefix) == 1 and type_ and type_.strip() == type_ else None



def _chunk_ends(previous, prefix, previous_type, type_):
    """conlleval's `endOfChunk` (with S-): the chunk that the previous tag is in ends before this tag."""
    return (
        previous in ("E", "S")
        or (previous in ("B", "I") and prefix in ("B", "S", "O"))
        or (previous != "O" and previous_type != type_)
    )


def _chunk_starts(previous, prefix, previous_type, type_):
    """conlleval's `startOfChunk` (with S-): this tag begins a chunk (an I- or E- after O or another type does too)."""
    return (
        prefix in ("B", "S")
        or (previous in ("E", "S", "O") and prefix in ("I", "E"))
        or (prefix != "O" and previous_type != type_)
    )


def entity_spans(tags, scheme="BIO"):
    """The entities of one sentence's tags as `(type, start, end)`, words `start` to `end - 1`.

    Chunks begin and end by conlleval's rules, which read BIO, IOB1 and BIOES
    alike and accept ill-formed sequences, as a model may predict them: an I-
    tag after `O` or after another type begins an entity, a B- tag always
    does, and a change of type ends one.

    >>> entity_spans(["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"])
    [('PER', 0, 2), ('LOC', 3, 4), ('LOC', 4, 5), ('ORG', 5, 6)]

    Args:
        tags: sequence of str, a tag per word.
        scheme: `"BIO"` (`"IOB2"`), `"IOB1"`, `"BIOES"` (`"IOBES"`), `"BILOU"`,
            or None for any of the prefixes B, I, E, S. A tag with another
            prefix is an error. Defaults to `"BIO"`.

    Returns:
        A list of `(type, start, end)` tuples, in order.
    """
    name = normalized_scheme(scheme) if scheme is not None else None
    prefixes = SCHEMES[name] if name else "BIES"
    spans, start = [], None
    previous, previous_type = "O", ""
    for w, tag in enumerate([*tags, "O"]):  # the "O" after the last word ends the last entity
        split = split_tag(tag)
        if split is None or (split[0] != "O" and split[0] not in prefixes):
            raise ValueError(f"Received an invalid tag at word {w + 1}: {tag!r} is not 'O' nor a prefix of "
                             f"{', '.join(prefixes)} joined to a type by '-'. Received: tags={list(tags)!r}")
        prefix, type_ = split
        prefix = BILOU_AS_BIOES.get(prefix, prefix) if name == "BILOU" else prefix
        starts = _chunk_starts(previous, prefix, previous_type, type_)
        if start is not None and (starts or _chunk_ends(previous, prefix, previous_type, type_)):
            spans.append((previous_type, start, w))
            start = None
        if starts:
            start = w
        previous, previous_type = prefix, type_
    return spans


def _ratio(numerator, denominator):
    return numerator / denominator if denominator else 0.0


def _scores(correct, predicted, true):
    precision, recall = _ratio(correct, predicted), _ratio(correct, true)
    return {"precision": precision, "recall": recall, "f1": _ratio(2 * precision * recall, precision + recall)}


def entity_scores(true_tags, predicted_tags, scheme="BIO"):
    """Entity-level precision, recall and F1, micro and per type, as conlleval computes them.

    A predicted entity is correct when a true entity has its type, start and
    end (`entity_spans` of each sentence). A score whose denominator is 0 is 0.

    >>> scores = entity_scores([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "B-ORG"]])
    >>> scores["precision"], scores["recall"], scores["per_type"]["PER"]
    (0.5, 0.5, {'precision': 1.0, 'recall': 1.0, 'f1': 1.0, 'support': 1})

    Args:
        true_tags: sequence of sentences, each a sequence of str tags.
        predicted_tags: sequence of sentences of predicted tags, as long as
            `true_tags`'s one by one.
        scheme: the tags' scheme, as for `entity_spans`. Defaults to `"BIO"`.

    Returns:
        A JSON-ready dict: `precision`, `recall`, `f1` (micro: over every
        entity), `per_type` (`{type: {precision, recall, f1, support}}`,
        types sorted; `support` is the number of true entities),
        `true_entities`, `predicted_entities`, `correct_entities`,
        `accuracy` (of the tags, word by word), `num_sentences`, `num_words`.
    """
    true_tags, predicted_tags = list(true_tags), list(predicted_tags)
    if len(true_tags) != len(predicted_tags):
        raise ValueError(f"Received {len(true_tags)} sentences of true tags and {len(predicted_tags)} of "
                         "predicted tags; expected as many.")
    counts = {}  # type -> [true, predicted, correct]
    words = same = 0
    for s, (true, predicted) in enumerate(zip(true_tags, predicted_tags)):
        true, predicted = list(true), list(predicted)
        if len(true) != len(predicted):
            raise ValueError(f"Sentence {s + 1} has {len(true)} true tags and {len(predicted)} predicted tags; "
                             "expected one of each per word.")
        words += len(true)
        same += sum(a == b for a, b in zip(true, predicted))
        true_spans, predicted_spans = set(entity_spans(true, scheme)), set(entity_spans(predicted, scheme))
        for spans, column in ((true_spans, 0), (predicted_spans, 1), (true_spans & predicted_spans, 2)):
            for type_, _, _ in spans:
                counts.setdefault(type_, [0, 0, 0])[column] += 1
    total = [sum(count[i] for count in counts.values()) for i in range(3)]
    return {
        **_scores(total[2], total[1], total[0]),
        "per_type": {type_: {**_scores(c, p, t), "support": t} for type_, (t, p, c) in sorted(counts.items())},
        "true_entities": total[0],
        "predicted_entities": total[1],
        "correct_entities": total[2],
        "accuracy": _ratio(same, words),
        "num_sentences": len(true_tags),
        "num_words": words,
    }


def format_entity_report(scores):
    """`entity_scores` as text: a row per type, then the micro average and the counts.

    >>> print(format_entity_report(entity_scores([["B-PER", "O", "B-LOC"]], [["B-PER", "O", "O"]])))
    type       precision  recall  f1      support
    LOC        0.0000     0.0000  0.0000  1
    PER        1.0000     1.0000  1.0000  1
    micro avg  1.0000     0.5000  0.6667  2
    entities: 2 true, 1 predicted, 1 correct; tag accuracy 0.6667 (3 words, 1 sentence)
    """
    rows = [["type", "precision", "recall", "f1", "support"]]
    for name, values in [*scores["per_type"].items(), ("micro avg", {**scores, "support": scores["true_entities"]})]:
        rows.append([name] + [f"{values[key]:.4f}" for key in ("precision", "recall", "f1")] + [str(values["support"])])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    sentences = scores["num_sentences"]
    return "\n".join(table + [
        f"entities: {scores['true_entities']} true, {scores['predicted_entities']} predicted, "
        f"{scores['correct_entities']} correct; tag accuracy {scores['accuracy']:.4f} "
        f"({scores['num_words']} words, {sentences} sentence{'' if sentences == 1 else 's'})"
    ])
