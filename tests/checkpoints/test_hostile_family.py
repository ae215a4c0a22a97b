"""Hostile files in the family's folders: ALBERT's `spiece.model` and config, RoBERTa's `vocab.json`, `merges.txt`
and `tokenizer_config.json`. Each is refused with one message naming the file (a `ValueError`, which the commands
turn into exit status 2), before a model is built and without a trace that grows with the file.

The folders are tiny random transformers models (vocabularies of 12 and about 30) with hand-written tokenizers.
"""

import io
import json
import os
import re
import shutil
import struct

import pytest
import tensorflow as tf

from bert_keras import cli
from bert_keras.checkpoints import CheckpointError, ConfigError, _build, load_checkpoint
from bert_keras.formats.google_family import albert_config_to_kwargs
from bert_keras.text.byte_bpe import BytePairTokenizer, load_bpe_files
from bert_keras.text.sentencepiece import SentencePieceTokenizer
from bert_keras.text.unigram import MAX_PIECE_CHARS, MAX_PREFIX_CHARS, read_pieces
from tests.checkpoints._models import hf_pretraining_model, save_hf_directory

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
spm = pytest.importorskip("sentencepiece")

BPE_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "a", "b", "c", "Ġ", "Ġa", "ab", "Ġab"]
BPE_MERGES = ["a b", "Ġ a", "Ġa b"]
_SIZES = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)


def _varint(n):
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


def piece_field(text, score=-5.0, kind=1):
    """A `ModelProto.pieces` entry (field 1) holding `text` (str, or raw bytes), appended to a model's bytes."""
    raw = text if isinstance(text, bytes) else text.encode("utf-8")
    body = b"\x0a" + _varint(len(raw)) + raw + b"\x15" + struct.pack("<f", score) + b"\x18" + _varint(kind)
    return b"\x0a" + _varint(len(body)) + body


def _sentencepiece_model():
    model = io.BytesIO()
    corpus = ["the cat sat on the mat", "a dog ran far away", "the mat and the cat", "far away dogs sat"] * 20
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=model, vocab_size=40, model_type="unigram", pad_id=0, unk_id=1,
        bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"], hard_vocab_limit=False, minloglevel=2,
        num_threads=1,
    )
    return model.getvalue()


def _save(model, folder):
    torch.manual_seed(0)
    model.save_pretrained(str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """name -> a tiny family folder: `"roberta"` (vocab.json, merges.txt), `"albert"` (spiece.model)."""
    root = tmp_path_factory.mktemp("family")
    torch.manual_seed(0)
    roberta = _save(transformers.RobertaModel(transformers.RobertaConfig(
        **_SIZES, vocab_size=len(BPE_TOKENS), max_position_embeddings=22, type_vocab_size=1, pad_token_id=1)),
        root / "roberta")
    with open(os.path.join(roberta, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({token: i for i, token in enumerate(BPE_TOKENS)}, f)
    with open(os.path.join(roberta, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(BPE_MERGES) + "\n")
    proto = _sentencepiece_model()
    pieces = spm.SentencePieceProcessor(model_proto=proto).get_piece_size()
    albert = _save(transformers.AlbertModel(transformers.AlbertConfig(
        **_SIZES, vocab_size=pieces, embedding_size=8, max_position_embeddings=20)), root / "albert")
    with open(os.path.join(albert, "spiece.model"), "wb") as f:
        f.write(proto)
    return {"roberta": roberta, "albert": albert}


@pytest.fixture
def folder(originals, tmp_path):
    """`folder(name)`: a copy of a tiny family folder to spoil."""

    def copy(name):
        return str(shutil.copytree(originals[name], tmp_path / name))

    return copy


@pytest.fixture
def no_build(monkeypatch):
    """Fails the test if a conversion gets as far as building a model."""

    def build_models(*args, **kwargs):
        raise AssertionError("a model was built before the checkpoint's files were checked")

    monkeypatch.setattr(_build, "build_models", build_models)


def _edit_json(path, **changes):
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config.update(changes)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return str(path)


def _append(path, data):
    with open(path, "ab") as f:
        f.write(data)
    return str(path)


@pytest.mark.slow
def test_the_tiny_folders_load_with_their_tokenizers(originals):
    """The folders every other test spoils are sound: what is refused below is the spoiling."""
    for name, size in (("roberta", len(BPE_TOKENS)), ("albert", None)):
        loaded = load_checkpoint(originals[name], with_heads=False)
        tokenizer = loaded.tokenizer(originals[name])
        assert len(tokenizer.vocabulary) == (size or loaded.encoder.vocab_size) == loaded.encoder.vocab_size
    tokenizer = BytePairTokenizer.from_folder(originals["roberta"])
    assert tokenizer.tokenize(tf.constant(["ab a"])).to_list() == [[[10], [9]]]  # "ab", "Ġa"


# --- 1. ALBERT's layer count: no stored tensor counts the layers of its shared block ---


@pytest.mark.parametrize("layers", [10**9, 129])
def test_an_albert_config_of_too_many_layers_is_refused_before_building(folder, no_build, layers):
    config = _edit_json(os.path.join(folder("albert"), "config.json"), num_hidden_layers=layers)
    with pytest.raises(ConfigError) as info:
        load_checkpoint(os.path.dirname(config))
    assert (info.value.file, info.value.tensor) == (config, "num_hidden_layers")
    assert str(info.value).startswith(f"{config}, field 'num_hidden_layers': is {layers}; ALBERT's shared block is "
                                      "applied at most 128 times here (released ALBERTs: 12 or 24 layers;")


def test_a_google_albert_config_of_too_many_layers_is_refused():
    config = dict(vocab_size=30, hidden_size=16, num_hidden_layers=10**9, num_attention_heads=2,
                  intermediate_size=32, embedding_size=8)
    with pytest.raises(ConfigError, match=r"^albert_config\.json, field 'num_hidden_layers': is 1000000000; "):
        albert_config_to_kwargs(config, "albert_config.json")
    assert albert_config_to_kwargs(dict(config, num_hidden_layers=24), "albert_config.json")["num_layers"] == 24


@pytest.mark.parametrize("index", ["200", "9" * 5000])
def test_a_stored_block_past_the_bound_is_refused_naming_the_tensor(tmp_path, no_build, index):
    """A count read from the tensors' names is bounded too: each block's tensors are listed before they are read."""
    from safetensors.numpy import load_file, save_file

    directory = save_hf_directory(hf_pretraining_model(), tmp_path / "bert")
    weights = os.path.join(directory, "model.safetensors")
    tensors = load_file(weights)
    name = f"bert.encoder.layer.{index}.output.dense.bias"
    tensors[name] = tensors["bert.encoder.layer.0.output.dense.bias"]
    save_file(tensors, weights)
    _edit_json(os.path.join(directory, "config.json"), num_hidden_layers=201 if index == "200" else 10**9)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(directory)
    assert (info.value.file, info.value.tensor) == (weights, name)
    shown = index if len(index) < 20 else index[:20] + "..."
    assert str(info.value).endswith(f": names Transformer block {shown}; at most 128 blocks are read (the deepest "
                                    "models of BERT's family have 48).")


def test_convert_refuses_a_billion_albert_layers_with_exit_status_2(folder, tmp_path, capsys):
    source = folder("albert")
    config = _edit_json(os.path.join(source, "config.json"), num_hidden_layers=10**9)
    assert cli.main(["convert", source, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bert-keras convert: cannot convert {source}: {config}, field 'num_hidden_layers': is "
                          "1000000000; ALBERT's shared block is applied at most 128 times here")
    assert not os.path.exists(tmp_path / "out")


# --- 2. A piece longer than any real model's: refused, and the trace does not grow with the longest piece ---


def test_a_piece_longer_than_the_bound_is_refused_naming_the_file(folder, no_build):
    source = folder("albert")
    model = os.path.join(source, "spiece.model")
    with open(model, "rb") as f:
        size = spm.SentencePieceProcessor(model_proto=f.read()).get_piece_size()
    _append(model, piece_field("▁" + "x" * 249))
    with pytest.raises(ValueError) as info:
        SentencePieceTokenizer.from_folder(source)
    expected = (f"{model}: is not a SentencePiece model (piece {size} ('▁xxxxxxxxxxxxxxxxxxx'...) has 250 "
                f"characters; at most {MAX_PIECE_CHARS} are read: sentencepiece's trainer makes pieces of at most "
                "max_sentencepiece_length characters, 16 by default, as in ALBERT's, T5's and XLNet's models).")
    assert str(info.value) == expected
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(source)
    assert info.value.file == model and str(info.value) == expected


@pytest.mark.slow
def test_a_piece_of_the_bound_is_read_and_the_trace_does_not_grow_with_it(originals):
    with open(os.path.join(originals["albert"], "spiece.model"), "rb") as f:
        proto = f.read()
    long_piece = "▁" + "x" * (MAX_PIECE_CHARS - 1)
    plain, longest = SentencePieceTokenizer(proto), SentencePieceTokenizer(proto + piece_field(long_piece, 1.0))
    # "▁" and 64 x: the long piece, then an unknown "x".
    assert longest.tokenize(tf.constant(["x" * MAX_PIECE_CHARS])).to_list() == [[[len(plain.vocabulary), 1]]]

    def operations(tokenizer):
        graph = tokenizer._traced.tokenize_rows.get_concrete_function().graph
        return len(graph.get_operations())

    assert operations(longest) == operations(plain)


def _long_pieces(count, length=MAX_PIECE_CHARS):
    """`count` distinct pieces of `length` characters, as `ModelProto` fields."""
    return b"".join(piece_field(f"{i:06d}".ljust(length, "q")) for i in range(count))


def test_pieces_whose_prefixes_pass_the_bound_are_refused_naming_the_file(folder, no_build):
    """50,000 pieces of 64 characters (3.4 MB) made a table of 2.1 GB of prefixes; the count stops at the bound."""
    source = folder("albert")
    model = os.path.join(source, "spiece.model")
    with open(model, "rb") as f:
        size = len(read_pieces(f.read()))
    _append(model, _long_pieces(50_000))
    per_piece = MAX_PIECE_CHARS * (MAX_PIECE_CHARS - 1) // 2
    last = size + MAX_PREFIX_CHARS // per_piece  # the first piece past the bound
    expected = (f"{model}: is not a SentencePiece model (the prefixes of pieces 0 to {last} have "
                f"{{:,}} characters in all; at most {MAX_PREFIX_CHARS:,} are read: the search keeps every prefix "
                "of every piece (a model trained with ALBERT's settings, 30,000 pieces, has about 465,000)).")
    with pytest.raises(ValueError) as info:
        SentencePieceTokenizer.from_folder(source)
    total = int(re.search(r"have ([0-9,]+) characters", str(info.value)).group(1).replace(",", ""))
    assert str(info.value) == expected.format(total) and MAX_PREFIX_CHARS < total <= MAX_PREFIX_CHARS + per_piece
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(source)
    assert info.value.file == model and str(info.value) == expected.format(total)


def test_pieces_whose_prefixes_reach_the_bound_are_read(originals):
    with open(os.path.join(originals["albert"], "spiece.model"), "rb") as f:
        proto = f.read()
    own = sum(len(piece) * (len(piece) - 1) // 2 for piece, _, _ in read_pieces(proto))
    count = (MAX_PREFIX_CHARS - own) // (MAX_PIECE_CHARS * (MAX_PIECE_CHARS - 1) // 2)
    assert len(read_pieces(proto + _long_pieces(count))) == len(read_pieces(proto)) + count
    with pytest.raises(ValueError, match=f"at most {MAX_PREFIX_CHARS:,} are read"):
        read_pieces(proto + _long_pieces(count + 1))


@pytest.mark.parametrize("name", ["spiece.model", "tokenizer_config.json"])
def test_a_fifo_in_an_albert_folder_is_refused_without_waiting(folder, no_build, name):
    from tests.commands.test_hostile_commands import FIFO_MESSAGE, _without_waiting

    source = folder("albert")
    fifo = os.path.join(source, name)
    if os.path.exists(fifo):
        os.remove(fifo)
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError) as info:
        _without_waiting(load_checkpoint, source, fifos=[fifo])
    assert str(info.value).startswith(f"{fifo}: " + FIFO_MESSAGE.split(": ", 1)[1]), str(info.value)
    with pytest.raises(ValueError, match=re.escape(fifo)):
        _without_waiting(SentencePieceTokenizer.from_folder, source, fifos=[fifo])


# --- 3. A tokenizer of more ids than the embedding table ---


def test_a_bpe_vocabulary_larger_than_the_embeddings_is_refused_naming_vocab_json(folder, no_build):
    source = folder("roberta")
    vocab = _edit_json(os.path.join(source, "vocab.json"), **{"bc": len(BPE_TOKENS)})
    _append(os.path.join(source, "merges.txt"), b"b c\n")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(source)
    assert info.value.file == vocab
    assert str(info.value) == (
        f"{vocab}, tensor 'embeddings.word_embeddings.weight': the vocabulary has 13 tokens but the word "
        f"embeddings 'embeddings.word_embeddings.weight' in {os.path.join(source, 'model.safetensors')} "
        "have 12 rows. The vocabulary does not belong to these weights.")


def test_a_sentencepiece_model_larger_than_the_embeddings_is_refused_naming_it(folder, no_build):
    source = folder("albert")
    model = os.path.join(source, "spiece.model")
    with open(model, "rb") as f:
        rows = spm.SentencePieceProcessor(model_proto=f.read()).get_piece_size()
    _append(model, piece_field("▁zz") + piece_field("▁zzz"))
    with pytest.raises(CheckpointError, match=re.escape(
            f"{model}, tensor 'embeddings.word_embeddings.weight': the vocabulary has {rows + 2} tokens but the word "
            f"embeddings 'embeddings.word_embeddings.weight' in {os.path.join(source, 'model.safetensors')} have "
            f"{rows} rows.")):
        load_checkpoint(source)


@pytest.mark.parametrize("command", ["convert", "embed"])
def test_commands_refuse_a_tokenizer_larger_than_the_embeddings_with_exit_status_2(folder, tmp_path, capsys, command):
    source = folder("roberta")
    vocab = _edit_json(os.path.join(source, "vocab.json"), **{"bc": len(BPE_TOKENS)})
    _append(os.path.join(source, "merges.txt"), b"b c\n")
    out = str(tmp_path / ("out" if command == "convert" else "out.npy"))
    args = (["convert", source, "--out", out] if command == "convert"
            else ["embed", "--checkpoint", source, "--pooling", "mean", "--out", out, "a b c"])
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bert-keras {command}: cannot ")
    assert f"{vocab}, tensor 'embeddings.word_embeddings.weight': the vocabulary has 13 tokens but the word" in err
    assert "Traceback" not in err and not os.path.exists(out)


# --- 7 and 9. Values of the wrong type, and files that are not UTF-8 or JSON, named ---

_DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("file, content, reason", [
    ("vocab.json", json.dumps({**{t: i for i, t in enumerate(BPE_TOKENS)}, "c": {}}),
     "maps 'c' to {}; expected a JSON object of token -> integer id."),
    ("vocab.json", json.dumps({**{t: i for i, t in enumerate(BPE_TOKENS)}, "c": True}),
     "maps 'c' to True; expected a JSON object of token -> integer id."),
    ("vocab.json", json.dumps({**{t: i for i, t in enumerate(BPE_TOKENS)}, "c": 3}),
     "its ids must run from 0 to 11 without gaps or repeats; id 3 is given to 2 tokens."),
    ("vocab.json", json.dumps(BPE_TOKENS[:3] + [5]), "expected a JSON object of token -> id, found a JSON list."),
    ("vocab.json", _DEEP, "is not valid JSON (maximum recursion depth exceeded"),
    ("vocab.json", b'{"\xff": 0}', "is not valid JSON ('utf-8' codec can't decode byte 0xff in position 2: invalid "
                                   "start byte)."),
    ("merges.txt", "#version: 0.2\na b\nĠ a\na b\n", "line 4 repeats line 2 ('a b'); each pair of tokens is merged "
                                                     "at one rank, so it may be listed once."),
    ("merges.txt", "a b\nab\n", "line 2 is 'ab'; expected two tokens separated by one space (\"left right\")."),
    ("merges.txt", b"a b\n\xc3\x28 b\n", "is not UTF-8 text ('utf-8' codec can't decode byte 0xc3 in position 4: "
                                         "invalid continuation byte)."),
    ("tokenizer_config.json", json.dumps([{"add_prefix_space": True}]), "expected a JSON object, found list."),
    ("tokenizer_config.json", "{add_prefix_space: true}", "is not valid JSON (Expecting property name enclosed in "
                                                          "double quotes: line 1 column 2 (char 1))."),
    ("tokenizer_config.json", _DEEP, "is not valid JSON (maximum recursion depth exceeded"),
])
def test_hostile_bpe_files_are_refused_naming_the_file(folder, no_build, file, content, reason):
    source = folder("roberta")
    path = os.path.join(source, file)
    with open(path, "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode("utf-8"))
    expected = re.escape(f"{path}: {reason}")
    with pytest.raises(ValueError, match="^" + expected):
        BytePairTokenizer.from_folder(source)
    with pytest.raises(CheckpointError, match="^" + expected) as info:
        load_checkpoint(source)
    assert info.value.file == path
    assert isinstance(info.value, ConfigError) == (file == "tokenizer_config.json")


def test_a_non_boolean_option_is_refused_naming_the_key(folder, no_build):
    source = folder("roberta")
    path = os.path.join(source, "tokenizer_config.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"add_prefix_space": {"yes": 1}, "model_max_length": 512}, f)
    expected = f"{path}, field 'add_prefix_space': expected true or false, found {{'yes': 1}}."
    with pytest.raises(ValueError, match="^" + re.escape(expected)):
        BytePairTokenizer.from_folder(source)
    with pytest.raises(ConfigError, match="^" + re.escape(expected)):
        load_checkpoint(source)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"add_prefix_space": None, "model_max_length": 512}, f)  # null: the default
    assert BytePairTokenizer.from_folder(source).add_prefix_space is False


def test_bpe_lists_with_a_repeated_merge_are_refused_naming_the_argument():
    with pytest.raises(ValueError, match=r"^Received an invalid value for argument `merges`: merge 2 repeats merge 1 "
                                         r"\('a b'\)"):
        load_bpe_files(BPE_TOKENS, ["a b", "a b"])
    with pytest.raises(ValueError, match=r"^Received an invalid value for argument `vocabulary`: maps 'a' to 0\.5;"):
        load_bpe_files({"a": 0.5}, [])


@pytest.mark.parametrize("spoil, reason", [
    (lambda proto: proto + piece_field(b"\xff\xfe"), r"is not a SentencePiece model \(piece \d+ is not UTF-8 "
                                                     r"\('utf-8' codec can't decode byte 0xff in position 0"),
    (lambda proto: proto + piece_field("▁cat"),
     r"is not a SentencePiece model \(piece \d+ \('▁cat'\) repeats piece \d+\)\."),
    (lambda proto: proto[:-3], r"is not a SentencePiece model \("),
])
def test_hostile_sentencepiece_models_are_refused_naming_the_file(folder, no_build, spoil, reason):
    source = folder("albert")
    model = os.path.join(source, "spiece.model")
    with open(model, "rb") as f:
        proto = f.read()
    with open(model, "wb") as f:
        f.write(spoil(proto))
    with pytest.raises(ValueError, match="^" + re.escape(f"{model}: ") + reason):
        SentencePieceTokenizer.from_folder(source)
    with pytest.raises(CheckpointError, match="^" + re.escape(f"{model}: ") + reason):
        load_checkpoint(source)


@pytest.mark.parametrize("content, reason", [
    ("[true]", "expected a JSON object, found list."),
    ("{'do_lower_case': true}", "is not valid JSON (Expecting property name enclosed in double quotes"),
    ('{"keep_accents": "no"}', None),
])
def test_hostile_albert_tokenizer_configs_are_refused_naming_the_file(folder, no_build, content, reason):
    source = folder("albert")
    path = os.path.join(source, "tokenizer_config.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
    expected = f"{path}: {reason}" if reason else f"{path}, field 'keep_accents': expected true or false, found 'no'."
    with pytest.raises(ValueError, match="^" + re.escape(expected)):
        SentencePieceTokenizer.from_folder(source)
    with pytest.raises(ConfigError, match="^" + re.escape(expected)):
        load_checkpoint(source)


@pytest.mark.parametrize("family, field, value, message", [
    ("roberta", "hidden_act", {"name": "gelu"}, "unsupported activation {'name': 'gelu'}; supported: "),
    ("albert", "hidden_act", ["gelu"], "unsupported activation ['gelu']; supported: "),
    ("roberta", "layer_norm_eps", [1e-5], "expected a number in (0, 1), found [1e-05]."),
    ("roberta", "layer_norm_eps", 0, "expected a number in (0, 1), found 0."),
    ("albert", "layer_norm_eps", float("nan"), "expected a number in (0, 1), found nan."),
    ("roberta", "hidden_dropout_prob", 1.5, "expected a dropout rate in [0, 1), found 1.5."),
    ("roberta", "attention_probs_dropout_prob", "0.1", "expected a dropout rate in [0, 1), found '0.1'."),
    pytest.param("albert", "initializer_range", 10**400, "expected a positive number, found 1000000000",
                 id="albert-initializer_range-401_digits"),
])
def test_config_values_of_the_wrong_type_are_refused_naming_the_field(folder, no_build, family, field, value, message):
    config = _edit_json(os.path.join(folder(family), "config.json"), **{field: value})
    with pytest.raises(ConfigError, match="^" + re.escape(f"{config}, field {field!r}: {message}")):
        load_checkpoint(os.path.dirname(config))


def test_convert_refuses_a_hostile_tokenizer_config_with_exit_status_2(folder, tmp_path, capsys):
    source = folder("roberta")
    path = os.path.join(source, "tokenizer_config.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(["add_prefix_space"], f)
    assert cli.main(["convert", source, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"bert-keras convert: cannot convert {source}: {path}: expected a JSON object, found list.\n"
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("architectures", [5, [5], ["BertModel", 5]])
def test_a_malformed_architectures_without_model_type_is_refused_naming_the_field(folder, no_build, architectures):
    config = os.path.join(folder("roberta"), "config.json")
    with open(config, encoding="utf-8") as f:
        values = {key: value for key, value in json.load(f).items() if key != "model_type"}
    values["architectures"] = architectures
    with open(config, "w", encoding="utf-8") as f:
        json.dump(values, f)
    field = "architectures" if architectures == ["BertModel", 5] else "model_type"
    with pytest.raises(ConfigError, match="^" + re.escape(f"{config}, field {field!r}: ")):
        load_checkpoint(os.path.dirname(config))
