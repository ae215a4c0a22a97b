"""Hugging Face's `tokenizer.json` read as the family's tokenizers: what each part must say, else named and refused.

transformers 5 saves a tokenizer as `tokenizer.json` (+ `tokenizer_config.json`)
only: no `vocab.json`/`merges.txt` for RoBERTa, no `spiece.model` for ALBERT.
This module turns such a file into the constructor arguments of
`WordPieceTokenizer` (a `WordPiece` model with BERT's normalizer),
`BytePairTokenizer` (a `BPE` model), `SentencePieceTokenizer` (ALBERT's `Unigram`
model: a SentencePiece `ModelProto` is written from its pieces, scores and
`precompiled_charsmap`, the inverse of `unigram.read_pieces`) and
`UnigramTokenizer` (XLM-RoBERTa's `Unigram` model, without ALBERT's normalizer). Every part the
graph does not reproduce (another normalizer, pre-tokenizer, model option,
added token) is refused with a `TokenizerFileError` naming the file and the
part (`model.type`, `normalizer.normalizers[2]`, `added_tokens[3]`).

The file is read as data: nothing in it is executed.
"""

import base64
import binascii
import math
import struct

from bert_keras._checks import quoted
from bert_keras.text.base import TokenizerFileError, line_break
from bert_keras.text._model_proto import MAX_CHARSMAP_BYTES, MAX_SCORE, check_charsmap, check_scores, read_pieces

# SentencePiece's ModelProto.SentencePiece.Type
_NORMAL, _UNKNOWN, _CONTROL = 1, 2, 3
_WORD_START = "\u2581"
# The longest word WordPiece cuts, in characters: tensorflow-text takes its bytes (4 a character) as an int32.
# tokenizers' `max_input_chars_per_word` beyond it is as unbounded (no text holds such a word) and is read as it.
MAX_CHARS_PER_WORD = (2**31 - 1) // 4
# The largest `max_input_chars_per_word` the reference reads (a Rust usize on 64-bit machines).
MAX_USIZE = 2**64 - 1


def _refuse(path, part, reason):
    return TokenizerFileError(path, reason, key=part)


def _object(value, path, part):
    if not isinstance(value, dict):
        raise _refuse(path, part, f"expected a JSON object, found {type(value).__name__}.")
    return value


def _type(value, path, part, expected):
    """`value["type"]` (an object's), checked to be one of `expected`."""
    found = _object(value, path, part).get("type")
    if found not in expected:
        raise _refuse(path, f"{part}.type", f"expected {' or '.join(map(repr, expected))}, found {found!r:.100}: "
                      "the in-graph tokenizer cannot reproduce it.")
    return found


def _expect(fields, path, part, key, allowed):
    """Refuses `fields[key]` (absent reads as None) outside `allowed`."""
    value = fields.get(key)
    if value not in allowed:
        raise _refuse(path, f"{part}.{key}", f"expected {' or '.join(map(repr, allowed))}, found {value!r:.100}: "
                      "the in-graph tokenizer cannot reproduce it.")
    return value


def _is_index(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_tokens(tokens, path, part, one_a_line=False, characters=""):
    """Refuses the first of `tokens` (a list in id order) that is not Unicode text (a lone surrogate, which JSON's
    `\\ud800` gives), or holds a line break where its file is one token a line (`one_a_line`: WordPiece's vocab.txt,
    BPE's merges.txt), or one of `characters`; the message names the token and its id."""
    for index, token in enumerate(tokens):
        try:
            token.encode("utf-8")
        except UnicodeEncodeError:
            raise _refuse(path, part, f"the token of id {index}, {quoted(token)}, is not Unicode text (it holds a "
                          "lone surrogate, which UTF-8 cannot encode).") from None
        found = line_break(token) if one_a_line else None
        if found is not None:
            raise _refuse(path, part, f"the token of id {index}, {quoted(token)}, holds a line break ({found!r}): "
                          "the files it is written to hold one token a line (vocab.txt, merges.txt), as "
                          "tensorflow-text's lookup and transformers read them, so every later id would shift. A "
                          "real vocabulary holds none (BERT's normalizer makes line breaks spaces, byte-level BPE "
                          "spells \\n as 'Ċ').")
        found = next((c for c in characters if c in token), None)
        if found is not None:
            raise _refuse(path, part, f"the token of id {index}, {quoted(token)}, holds {found!r}, which "
                          "tensorflow-text's WordPiece cannot take (no text reaches it: BERT's normalizer drops it).")


def _added_tokens(tokenizer, path, tokens):
    """The special added tokens (`added_tokens`), each checked to be the vocabulary's token of its id.

    A token that is not special is matched in the raw text before
    normalisation by the reference (`added_tokens[i].special == false`): no
    in-graph tokenizer here does that, so it is refused.
    """
    added = tokenizer.get("added_tokens", [])
    if not isinstance(added, list):
        raise _refuse(path, "added_tokens", f"expected a list, found {type(added).__name__}.")
    special = []
    for i, entry in enumerate(added):
        entry = _object(entry, path, f"added_tokens[{i}]")
        content, index = entry.get("content"), entry.get("id")
        if not isinstance(content, str) or not _is_index(index) or index >= len(tokens) or tokens[index] != content:
            raise _refuse(path, f"added_tokens[{i}]", f"{content!r:.100} with id {index!r:.30} is not the model's "
                          "token of that id: tokens added past the model's vocabulary are not read.")
        if entry.get("special") is not True:
            raise _refuse(path, f"added_tokens[{i}]", f"{content!r:.100} is not special: the reference matches it in "
                          "the raw text before anything else, which the in-graph tokenizer does not reproduce.")
        special.append(content)
    return special


def _post_processor_tokens(tokenizer, path):
    """`{cls_token, sep_token}` of a `RobertaProcessing`, `BertProcessing` or `TemplateProcessing` post-processor
    (the template's first and last special tokens of a single text); {} without one."""
    post = tokenizer.get("post_processor")
    if post is None:
        return {}
    kind = _type(post, path, "post_processor", ("RobertaProcessing", "BertProcessing", "TemplateProcessing"))
    if kind != "TemplateProcessing":
        cls, sep = post.get("cls"), post.get("sep")
        if not (isinstance(cls, list) and isinstance(sep, list) and cls and sep
                and isinstance(cls[0], str) and isinstance(sep[0], str)):
            raise _refuse(path, "post_processor", "expected its cls and sep as [token, id] pairs.")
        return {"cls_token": cls[0], "sep_token": sep[0]}
    single = post.get("single")
    specials = [item["SpecialToken"].get("id") for item in single or []
                if isinstance(item, dict) and isinstance(item.get("SpecialToken"), dict)] if isinstance(single, list) else []
    if len(specials) != 2 or not all(isinstance(token, str) for token in specials):
        raise _refuse(path, "post_processor.single", "expected one special token before the text and one after.")
    return {"cls_token": specials[0], "sep_token": specials[1]}


def wordpiece_arguments(tokenizer, path):
    """`WordPieceTokenizer`'s arguments (`vocabulary`, `lower_case`, `strip_accents`, `tokenize_chinese_chars`)
    of a `tokenizer.json` of BERT's own tokenizer: a `BertNormalizer` that cleans text and strips accents only
    where it lower-cases (its `handle_chinese_chars` either way), the `BertPreTokenizer` and a WordPiece model
    with `##` pieces and ids 0..n-1.

    Raises:
        TokenizerFileError: anything else, naming the file (and the normalizer's key at fault).
    """
    fields = tokenizer if isinstance(tokenizer, dict) else {}
    model, normalizer, pre_tokenizer = (fields.get(key) for key in ("model", "normalizer", "pre_tokenizer"))
    vocab = model.get("vocab") if isinstance(model, dict) else None
    lower_case = normalizer.get("lowercase") if isinstance(normalizer, dict) else None
    strip_accents = normalizer.get("strip_accents") if isinstance(normalizer, dict) else None
    chinese = normalizer.get("handle_chinese_chars", True) if isinstance(normalizer, dict) else None
    if isinstance(normalizer, dict) and normalizer.get("clean_text", True) is not True:
        raise TokenizerFileError(path, "expected true: the in-graph tokenizer always drops control characters "
                                 "and maps whitespace to spaces, as BertNormalizer(clean_text=True).",
                                 key="normalizer.clean_text")
    if lower_case is False and strip_accents is True:
        raise TokenizerFileError(path, "expected false or null where lowercase is false: the in-graph tokenizer "
                                 "strips accents only where it lower-cases.", key="normalizer.strip_accents")
    if not isinstance(chinese, bool):
        raise TokenizerFileError(path, f"expected true or false, found {chinese!r:.100}.",
                                 key="normalizer.handle_chinese_chars")
    ids = (sorted(vocab.values()) if isinstance(vocab, dict)
           and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in vocab.values()) else None)
    if (
        not isinstance(model, dict) or model.get("type") != "WordPiece"
        or model.get("continuing_subword_prefix", "##") != "##"
        or not isinstance(normalizer, dict) or normalizer.get("type") != "BertNormalizer"
        or not isinstance(lower_case, bool) or strip_accents not in (None, True, False)
        or not isinstance(pre_tokenizer, dict) or pre_tokenizer.get("type") != "BertPreTokenizer"
        or ids != list(range(len(ids or [])))
    ):
        raise TokenizerFileError(path, "is not BERT's WordPiece tokenizer (BertNormalizer, BertPreTokenizer, "
                                 "WordPiece with '##' pieces and ids 0..n-1), and the folder has no vocab.txt: "
                                 "put the model's vocab.txt next to its weights.")
    tokens = [None] * len(ids)
    for token, index in vocab.items():
        tokens[index] = token
    _check_tokens(tokens, path, "model.vocab", one_a_line=True, characters="\0")
    unknown = model.get("unk_token", "[UNK]")
    if not isinstance(unknown, str) or unknown not in vocab:
        raise _refuse(path, "model.unk_token", f"expected a token of the vocabulary, found {quoted(unknown)}.")
    max_chars = model.get("max_input_chars_per_word", 100)
    if not _is_index(max_chars) or max_chars > MAX_USIZE:  # as the reference: 1.0, 1e30, true, -1 are refused
        raise _refuse(path, "model.max_input_chars_per_word", f"expected a positive integer of at most "
                      f"{MAX_USIZE:,} (the reference reads a 64-bit unsigned integer), found {quoted(max_chars)}.")
    if max_chars == 0:
        raise _refuse(path, "model.max_input_chars_per_word", "expected a positive integer, found 0: the reference "
                      "makes every word [UNK] with it (a model that reads no text), which the in-graph tokenizer "
                      "does not reproduce.")
    _added_tokens(fields, path, tokens)
    arguments = {"vocabulary": tokens, "lower_case": lower_case, "strip_accents": strip_accents,
                 "tokenize_chinese_chars": chinese, "unknown_token": unknown,
                 "max_chars_per_word": min(max_chars, MAX_CHARS_PER_WORD)}
    return dict(arguments, **_post_processor_tokens(fields, path))


# --- BPE (RoBERTa) ------------------------------------------------------------------------------------------------


def bpe_arguments(tokenizer, path):
    """`BytePairTokenizer`'s arguments (`vocabulary`, `merges`, `add_prefix_space`, `cls_token`, `sep_token`) of a
    `tokenizer.json` with a byte-level BPE model, as RoBERTa's.

    Taken: no normalizer; a `ByteLevel` pre-tokenizer with GPT-2's regex; a
    `BPE` model without dropout, word prefix or suffix, byte fallback or
    `ignore_merges`, its merges as `"a b"` strings or `["a", "b"]` pairs;
    special added tokens only.

    Raises:
        TokenizerFileError: anything else, naming the file and the part.
    """
    tokenizer = _object(tokenizer, path, "the file")
    model = tokenizer.get("model")
    _type(model, path, "model", ("BPE",))
    normalizer = tokenizer.get("normalizer")
    if normalizer is not None:
        found = normalizer.get("type") if isinstance(normalizer, dict) else normalizer
        raise _refuse(path, "normalizer.type", f"expected no normalizer (null), as RoBERTa's, found {found!r:.100}: "
                      "the in-graph tokenizer cannot reproduce it.")
    pre = tokenizer.get("pre_tokenizer")
    _type(pre, path, "pre_tokenizer", ("ByteLevel",))
    _expect(pre, path, "pre_tokenizer", "use_regex", (True, None))
    add_prefix_space = _expect(pre, path, "pre_tokenizer", "add_prefix_space", (True, False, None))
    for key, allowed in (("dropout", (None,)), ("continuing_subword_prefix", (None, "")),
                         ("end_of_word_suffix", (None, "")), ("byte_fallback", (None, False)),
                         ("ignore_merges", (None, False))):
        _expect(model, path, "model", key, allowed)
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not all(_is_index(i) for i in vocab.values()):
        raise _refuse(path, "model.vocab", "expected an object of tokens to ids 0..n-1.")
    tokens = [None] * len(vocab)
    for token, index in vocab.items():
        if index >= len(tokens) or tokens[index] is not None:
            raise _refuse(path, "model.vocab", f"expected ids 0..{len(vocab) - 1}, each once; found {index!r:.30} "
                          f"for {token!r:.100}.")
        tokens[index] = token
    _check_tokens(tokens, path, "model.vocab")
    merges = model.get("merges")
    if not isinstance(merges, list):
        raise _refuse(path, "model.merges", f"expected a list, found {type(merges).__name__}.")
    as_strings = []
    for i, merge in enumerate(merges):
        if isinstance(merge, list) and len(merge) == 2 and all(isinstance(m, str) and m and " " not in m
                                                               for m in merge):
            merge = " ".join(merge)
        if not isinstance(merge, str) or len(merge.split(" ")) != 2:
            raise _refuse(path, f"model.merges[{i}]", f"expected two tokens, found {merge!r:.100}.")
        found = line_break(merge)
        if found is not None:
            raise _refuse(path, f"model.merges[{i}]", f"{quoted(merge)} holds a line break ({found!r}): merges.txt, "
                          "which a module pair carries, holds one merge a line, so every later rank would shift.")
        left, right = merge.split(" ")
        # As the reference, which refuses a merge of tokens or into a token that its vocabulary lacks.
        missing = next((token for token in (left, right, left + right) if token not in vocab), None)
        if missing is not None:
            raise _refuse(path, f"model.merges[{i}]", f"{quoted(merge)} merges into or from {quoted(missing)}, "
                          "which the vocabulary lacks.")
        as_strings.append(merge)
    _added_tokens(tokenizer, path, tokens)
    arguments = {"vocabulary": tokens, "merges": as_strings, "add_prefix_space": bool(add_prefix_space)}
    return dict(arguments, **_post_processor_tokens(tokenizer, path))


# --- Unigram (ALBERT) ---------------------------------------------------------------------------------------------


def _replace(step, pattern, content):
    return (isinstance(step, dict) and step.get("type") == "Replace" and step.get("pattern") == pattern
            and step.get("content") == content)


def _precompiled(step, path, part):
    """The bytes of a `Precompiled` normalizer's `precompiled_charsmap` (SentencePiece's own normalisation)."""
    part, encoded = f"{part}.precompiled_charsmap", step.get("precompiled_charsmap")
    if not isinstance(encoded, str) or not encoded:  # the reference cannot read an empty one either
        raise _refuse(path, part, f"expected a base64 string, found {quoted(encoded)}.")
    if len(encoded) > 4 * math.ceil(MAX_CHARSMAP_BYTES / 3):
        raise _refuse(path, part, f"is {len(encoded):,} characters of base64; at most {MAX_CHARSMAP_BYTES:,} "
                      "bytes are read (sentencepiece's own nmt_nfkc rule is 240,007).")
    try:
        charsmap = base64.b64decode(encoded, validate=True)
        check_charsmap(charsmap)
    except (binascii.Error, ValueError) as error:
        reason = f"is not base64 ({error})" if isinstance(error, binascii.Error) else f"is refused: {error}"
        raise _refuse(path, part, f"{reason}.") from None
    return charsmap


def _albert_normalizer(tokenizer, path):
    """`(lower_case, keep_accents, charsmap)` of ALBERT's normalizer: the quote replacements, NFKD and
    StripAccents (unless `keep_accents`), Lowercase (`do_lower_case`), Precompiled (SentencePiece's own), and
    optionally the collapse of runs of spaces, in that order."""
    normalizer = tokenizer.get("normalizer")
    _type(normalizer, path, "normalizer", ("Sequence",))
    steps = normalizer.get("normalizers")
    if not isinstance(steps, list):
        raise _refuse(path, "normalizer.normalizers", "expected a list.")
    steps = list(steps)
    expected = "Replace '``' and \"''\" by '\"', [NFKD, StripAccents], [Lowercase], Precompiled, [Replace ' {2,}']"
    at = 0

    def take(test):
        nonlocal at
        if at < len(steps) and test(steps[at]):
            at += 1
            return True
        return False

    def is_type(name):
        return lambda step: isinstance(step, dict) and step.get("type") == name

    if not (take(lambda s: _replace(s, {"String": "``"}, '"')) and take(lambda s: _replace(s, {"String": "''"}, '"'))):
        raise _refuse(path, f"normalizer.normalizers[{at}]", f"expected ALBERT's normalizer ({expected}).")
    keep_accents = not take(is_type("NFKD"))
    if not keep_accents and not take(is_type("StripAccents")):
        raise _refuse(path, f"normalizer.normalizers[{at}]", f"expected ALBERT's normalizer ({expected}).")
    lower_case = take(is_type("Lowercase"))
    charsmap = b""
    if at < len(steps) and is_type("Precompiled")(steps[at]):
        charsmap = _precompiled(steps[at], path, f"normalizer.normalizers[{at}]")
        at += 1
    take(lambda s: _replace(s, {"Regex": " {2,}"}, " "))
    if at != len(steps):
        raise _refuse(path, f"normalizer.normalizers[{at}]", f"expected ALBERT's normalizer ({expected}); "
                      "the in-graph tokenizer cannot reproduce another step.")
    return lower_case, keep_accents, charsmap


def _metaspace(step, path, part):
    _type(step, path, part, ("Metaspace",))
    _expect(step, path, part, "replacement", (_WORD_START,))
    if step.get("prepend_scheme", "always") != "always" or step.get("add_prefix_space", True) is not True:
        raise _refuse(path, f"{part}.prepend_scheme", "expected 'always' (a '\u2581' before every word): the "
                      "in-graph tokenizer cannot reproduce another.")
    _expect(step, path, part, "split", (True, None))


def _albert_pre_tokenizer(tokenizer, path):
    """WhitespaceSplit then Metaspace, as transformers 5 writes ALBERT's. A Metaspace alone (older files) splits on
    U+0020 only and keeps a "▁" where the charsmap made a space at a text's end, which SentencePiece drops."""
    pre = tokenizer.get("pre_tokenizer")
    _type(pre, path, "pre_tokenizer", ("Sequence",))
    steps = pre.get("pretokenizers")
    if not isinstance(steps, list) or len(steps) != 2:
        raise _refuse(path, "pre_tokenizer.pretokenizers", "expected WhitespaceSplit then Metaspace.")
    _type(steps[0], path, "pre_tokenizer.pretokenizers[0]", ("WhitespaceSplit",))
    _metaspace(steps[1], path, "pre_tokenizer.pretokenizers[1]")


def _bytes_field(number, data):
    return _varint((number << 3) | 2) + _varint(len(data)) + data


def _varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def write_model_proto(pieces, charsmap=b""):
    """A serialized SentencePiece unigram `ModelProto` of `(piece, score, type)` triples and a normaliser's
    `precompiled_charsmap` (empty: no normalisation), as `spm_train` writes them (whitespace escaped, extra
    whitespace removed, a dummy prefix added): the inverse of `unigram.read_pieces`.

    >>> from bert_keras.text.unigram import read_pieces
    >>> [(piece, float(score), kind) for piece, score, kind in read_pieces(
    ...     write_model_proto([("<unk>", 0.0, 2), ("\u2581a", -1.5, 1)]))]
    [('<unk>', 0.0, 2), ('▁a', -1.5, 1)]
    """
    out = bytearray()
    for piece, score, kind in pieces:
        body = _bytes_field(1, piece.encode("utf-8")) + _varint(2 << 3 | 5) + struct.pack("<f", score)
        if kind != _NORMAL:
            body += _varint(3 << 3) + _varint(kind)
        out += _bytes_field(1, body)
    out += _bytes_field(2, _varint(3 << 3) + _varint(1))  # trainer_spec.model_type = UNIGRAM
    name = b"nmt_nfkc" if charsmap else b"identity"
    out += _bytes_field(3, _bytes_field(1, name) + (_bytes_field(2, charsmap) if charsmap else b""))
    return bytes(out)


def unigram_arguments(tokenizer, path):
    """`SentencePieceTokenizer`'s arguments (`proto`, `lower_case`, `keep_accents`, the special tokens) of a
    `tokenizer.json` with a Unigram model, as ALBERT's (transformers 5 saves no `spiece.model`).

    Taken: ALBERT's normalizer (`_albert_normalizer`), a `Metaspace`
    pre-tokenizer (after `WhitespaceSplit`) that puts "▁" before every word,
    a `Unigram` model with its `unk_id`, without byte fallback; special added
    tokens only (they become SentencePiece's control pieces, never matched in
    text). The pieces, scores and charsmap are written as a SentencePiece
    model (`write_model_proto`).

    Raises:
        TokenizerFileError: anything else, naming the file and the part.
    """
    tokenizer = _object(tokenizer, path, "the file")
    _type(tokenizer.get("model"), path, "model", ("Unigram",))
    lower_case, keep_accents, charsmap = _albert_normalizer(tokenizer, path)
    _albert_pre_tokenizer(tokenizer, path)
    return dict(_unigram_model(tokenizer, path, charsmap), lower_case=lower_case, keep_accents=keep_accents)


def _xlm_roberta_normalizer(tokenizer, path):
    """The charsmap of XLM-RoBERTa's normalizer: none (a Unigram model trained with `tokenizers`), `Precompiled`
    (SentencePiece's own, as transformers 5 writes a converted model's), optionally followed by the collapse of runs
    of spaces (older converted files), which splitting the words at whitespace makes no difference to."""
    normalizer = tokenizer.get("normalizer")
    if normalizer is None:
        return b""
    kind = _type(normalizer, path, "normalizer", ("Precompiled", "Sequence"))
    if kind == "Precompiled":
        return _precompiled(normalizer, path, "normalizer")
    steps = normalizer.get("normalizers")
    if not (isinstance(steps, list) and 1 <= len(steps) <= 2 and isinstance(steps[0], dict)
            and steps[0].get("type") == "Precompiled" and steps[1:] in ([], [{"type": "Replace",
                                                                               "pattern": {"Regex": " {2,}"},
                                                                               "content": " "}])):
        raise _refuse(path, "normalizer.normalizers", "expected XLM-RoBERTa's normalizer (Precompiled, then "
                      "optionally Replace ' {2,}' by ' '): the in-graph tokenizer cannot reproduce another.")
    return _precompiled(steps[0], path, "normalizer.normalizers[0]")


def xlm_roberta_unigram_arguments(tokenizer, path):
    """`UnigramTokenizer`'s arguments (`proto` and the special tokens) of a `tokenizer.json` with a Unigram model and
    no text preprocessing of ALBERT's, as XLM-RoBERTa's.

    Taken: no normalizer or SentencePiece's `Precompiled` one
    (`_xlm_roberta_normalizer`), `WhitespaceSplit` then a `Metaspace` that
    puts "▁" before every word, a `Unigram` model with its `unk_id`, without
    byte fallback, its pieces in the file's id order (XLM-RoBERTa's fairseq
    layout: `<s> <pad> </s> <unk>`, the pieces, `<mask>` last); special added
    tokens only, which stay pieces of the model: as the reference's Unigram
    model does, a literal "<mask>" in the text is its piece where the
    special tokens are not matched first (`encode_special_tokens`).

    Raises:
        TokenizerFileError: anything else, naming the file and the part.
    """
    tokenizer = _object(tokenizer, path, "the file")
    _type(tokenizer.get("model"), path, "model", ("Unigram",))
    charsmap = _xlm_roberta_normalizer(tokenizer, path)
    _albert_pre_tokenizer(tokenizer, path)
    arguments = _unigram_model(tokenizer, path, charsmap, control_specials=False)
    # The scores as transformers 5 reads them, Python's float64 nearest each number (see `unigram_scores`).
    return dict(arguments, scores=unigram_scores(tokenizer["model"]["vocab"]))


def unigram_scores(vocab):
    """A Unigram model's scores as transformers 5 gives them to the `tokenizers` library: its tokenizer classes read
    the file with Python's `json`, whose float64 is the nearest to each number, and build the model from that list.

    Equal paths of a word break their tie by the last bit of their sums, so these bits decide some pieces. The
    `tokenizers` library reading the same file itself (serde_json without `float_roundtrip`) takes some numbers one
    unit in the last place off (30 of the 600 scores of a Unigram model trained by it); then ties may break the other
    way (tests/checkpoints/test_xlm_roberta.py keeps a word where they do). Ours follow transformers, the tokenizer a
    model's users run.
    """
    return [float(score) for _, score in vocab]


def _unigram_model(tokenizer, path, charsmap, control_specials=True):
    """The arguments a `Unigram` model gives (`proto`, `unknown_token`, `float64_scores`, the post-processor's special
    tokens): its pieces, scores and `charsmap` written as a SentencePiece model; the special added tokens as control
    pieces, never matched in text (`control_specials`), else as the model's other pieces."""
    model = tokenizer.get("model")
    _expect(model, path, "model", "byte_fallback", (None, False))
    vocab = model.get("vocab")
    if not isinstance(vocab, list) or not vocab:
        raise _refuse(path, "model.vocab", "expected a non-empty list of [piece, score] pairs.")
    pieces = []
    for i, entry in enumerate(vocab):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and entry[0]
                and isinstance(entry[1], (int, float)) and not isinstance(entry[1], bool)):
            raise _refuse(path, f"model.vocab[{i}]", f"expected a [piece, score] pair, found {quoted(entry, 100)}.")
        score = entry[1]  # JSON's 1e400 reads as inf, NaN as nan; an integer may exceed any float
        if isinstance(score, float) and not math.isfinite(score) or abs(score) > MAX_SCORE:
            raise _refuse(path, f"model.vocab[{i}]", f"the score of {quoted(entry[0])} is {quoted(entry[1], 40)}; "
                          "expected a finite number within float32's range, as the SentencePiece model written from "
                          "it stores (real scores are log probabilities, between about -30 and 0).")
        pieces.append(entry[0])
    _check_tokens(pieces, path, "model.vocab")
    unk_id = model.get("unk_id")
    if not _is_index(unk_id) or unk_id >= len(pieces):
        raise _refuse(path, "model.unk_id", f"expected the id of the unknown piece, found {unk_id!r:.30}.")
    control = set(_added_tokens(tokenizer, path, pieces)) - {pieces[unk_id]}
    if not control_specials:  # the reference's Unigram matches them in text as any piece (with encode_special_tokens)
        control = set()
    types = [_UNKNOWN if i == unk_id else _CONTROL if piece in control else _NORMAL for i, piece in enumerate(pieces)]
    proto = write_model_proto([(p, float(s), t) for (p, s), t in zip(vocab, types)], charsmap)
    try:  # what the segmenter and the library refuse (a piece twice, too long, scores too large), named here
        check_scores(read_pieces(proto))
    except ValueError as error:
        raise _refuse(path, "model.vocab", f"is refused: {error}.") from None
    # tokenizers adds the scores in float64 (the sentencepiece library, which spiece.model is read as, in float32).
    arguments = {"proto": proto, "unknown_token": pieces[unk_id], "float64_scores": True}
    return dict(arguments, **_post_processor_tokens(tokenizer, path))
