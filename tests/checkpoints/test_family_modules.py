"""BERT's family through the other formats: Hub modules read back, keras-nlp refused, ELECTRA's discriminator head.

A family encoder (ALBERT, DistilBERT, RoBERTa, ELECTRA options) exported as a Hub module is read back with its
architecture recovered from the module alone; keras-nlp's `BertBackbone` cannot hold the options and says which;
ELECTRA's replaced-token detection head is built and matches transformers' `ElectraForPreTraining`.
"""

import json
import shutil

import keras
import numpy as np
import pytest

from bert_keras import BertEncoder
from bert_keras._contract import ARCHITECTURE_FILE
from bert_keras.checkpoints import _build, load_checkpoint, to_keras_nlp
from bert_keras.export import export_encoder, export_module_pair
from bert_keras.formats import read_hub_module, tables
from bert_keras.formats._common import resolve_target
from bert_keras.formats._read import expected_shape
from bert_keras.heads import DiscriminatorHead
from tests.checkpoints._models import max_diff, write_vocab
from tests.helpers import hub_inputs

VOCAB = 60
_BASE = dict(vocab_size=VOCAB, num_layers=3, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=20)
# name: the family's options on BertEncoder (as the Hugging Face reader sets them for that family).
FAMILY_OPTIONS = {
    "albert": dict(embedding_size=8, shared_layers=True, activation="gelu_approximate"),
    "distilbert": dict(type_vocab_size=0, use_pooler=False),
    "roberta": dict(position_offset=2, type_vocab_size=1, layer_norm_epsilon=1e-5),
    "electra": dict(embedding_size=8, use_pooler=False),
}
# The options the reader must recover, for each family (num_layers: ALBERT holds one block, called 3 times).
RECOVERED = ("num_layers", "embedding_size", "shared_layers", "type_vocab_size", "position_offset",
             "max_sequence_length", "use_pooler", "layer_norm_epsilon", "activation", "hidden_size")


def family_encoder(name, seed=0):
    """A tiny family encoder with every weight perturbed (LayerNorms and biases not at their initial values)."""
    encoder = BertEncoder(**_BASE, **FAMILY_OPTIONS[name], dropout=0.0, attention_dropout=0.0)
    rng = np.random.default_rng(seed)
    for variable in encoder.weights:
        variable.assign(variable.numpy() + rng.normal(0, 0.05, variable.shape).astype("float32"))
    return encoder


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """name -> (encoder, its exported encoder module's directory; DistilBERT's: a module pair's directory)."""
    root = tmp_path_factory.mktemp("family_modules")
    vocab = str(root / "vocab.txt")
    write_vocab(vocab, VOCAB)
    built = {}
    for name in FAMILY_OPTIONS:
        encoder = family_encoder(name)
        if name == "distilbert":  # as `bert-keras convert` writes: encoder/ and preprocess/
            export_module_pair(str(root / name), encoder, vocab, do_lower_case=True, seq_length=16)
            built[name] = (encoder, str(root / name))
        else:
            built[name] = (encoder, export_encoder(encoder, str(root / name), vocab, do_lower_case=True))
    return built


@pytest.mark.slow  # the module fixture exports four families (~16 s)
@pytest.mark.parametrize("name", sorted(FAMILY_OPTIONS))
def test_family_module_reads_back_with_its_architecture(modules, name):
    encoder, directory = modules[name]
    loaded = load_checkpoint(directory)
    config, expected = loaded.encoder.get_config(), encoder.get_config()
    assert {key: config[key] for key in RECOVERED} == {key: expected[key] for key in RECOVERED}
    assert loaded.encoder.count_params() == encoder.count_params()

    # Types 0/1 where the family has two segment types; DistilBERT and RoBERTa ignore or have one.
    inputs = hub_inputs([12, 9, 4], 12, VOCAB, seed=1, min_id=5,
                        segment_b_from="half" if encoder.type_vocab_size > 1 else None)
    ours, theirs = loaded.encoder(inputs, training=False), encoder(inputs, training=False)
    real = inputs["input_mask"].astype(bool)
    sequence = max_diff(np.asarray(ours["sequence_output"])[real], np.asarray(theirs["sequence_output"])[real])
    pooled = max_diff(ours["pooled_output"], theirs["pooled_output"])
    assert sequence <= 1e-6 and pooled <= 1e-6, (sequence, pooled)
    assert len(ours["encoder_outputs"]) == 3


@pytest.mark.slow  # the module fixture exports four families (~16 s)
def test_albert_module_reads_back_sharing_one_block(modules):
    loaded = load_checkpoint(modules["albert"][1])
    encoder = loaded.encoder
    assert encoder.shared_layers is True and len(encoder.transformer_layers) == 1
    # One block's variables, not three copies: 16 block weights + 7 embedding weights (+ projection) + pooler 2.
    assert len(encoder.weights) == 16 + 7 + 2
    # Loaded as one set: the summary lists the block's 16 tensors once.
    assert sum(target.startswith("encoder.transformer_layers.") for _, target in loaded.summary.loaded) == 16


@pytest.mark.slow  # the module fixture exports four families (~16 s)
def test_roberta_position_offset_tried_recorded_first_then_two(modules, tmp_path):
    directory = modules["roberta"][1]
    # The exporter records the offset: it is read first.
    first = read_hub_module(directory).encoder_configs[0]
    assert (first["position_offset"], first["max_sequence_length"], first["num_heads"]) == (2, 20, 2)
    assert load_checkpoint(directory).encoder.position_offset == 2

    # A module without the record (written by an earlier version): the shapes do not show the offset, so offset 0
    # first, then RoBERTa's 2 (of the 22 rows), and the probe picks.
    copy = tmp_path / "roberta"
    shutil.copytree(directory, copy)
    record = copy / ARCHITECTURE_FILE
    record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "position_offset"}))
    configs = read_hub_module(str(copy)).encoder_configs
    assert [(c.get("position_offset", 0), c["max_sequence_length"]) for c in configs[:2]] == [(0, 22), (2, 20)]
    assert load_checkpoint(str(copy)).encoder.position_offset == 2


@pytest.mark.slow  # the module fixture exports four families (~16 s)
def test_distilbert_module_has_no_token_types_and_no_pooler(modules):
    encoder, directory = modules["distilbert"]
    loaded = load_checkpoint(directory)
    assert loaded.encoder.embeddings.type_embeddings is None and loaded.encoder.pooler is None
    assert loaded.summary.not_in_checkpoint == []  # no pooler to miss: it has none
    inputs = hub_inputs([8, 5], 8, VOCAB, seed=2, min_id=5)
    outputs = loaded.encoder(inputs, training=False)
    # Without a pooler, pooled_output is the first token's sequence output.
    np.testing.assert_array_equal(outputs["pooled_output"], np.asarray(outputs["sequence_output"])[:, 0])


# ---------------------------------------------------------------------------
# keras-nlp's BertBackbone holds none of the family's options.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, named",
    [
        (dict(shared_layers=True), "shared_layers=False.*Received: shared_layers=True"),
        (dict(type_vocab_size=0), "type_vocab_size.*Received: type_vocab_size=0"),
        (dict(position_offset=2), "position_offset=0.*Received: position_offset=2"),
        (dict(embedding_size=8), "embedding_size=None.*Received: embedding_size=8"),
        (dict(use_pooler=False), "use_pooler=True.*Received: use_pooler=False"),
    ],
    ids=["shared_layers", "no_token_types", "position_offset", "projection", "no_pooler"],
)
def test_keras_nlp_refuses_family_options(options, named):
    encoder = BertEncoder(**dict(_BASE, num_layers=1), **options, activation="gelu_approximate")
    with pytest.raises(ValueError, match="BertBackbone cannot hold this encoder.*" + named):
        to_keras_nlp(encoder)


# ---------------------------------------------------------------------------
# ELECTRA's discriminator head.
# ---------------------------------------------------------------------------


def test_discriminator_head_config_round_trip_and_shape():
    head = DiscriminatorHead(activation="gelu_approximate", name="discriminator")
    logits = head(np.random.default_rng(0).normal(size=(2, 5, 16)).astype("float32"))
    assert tuple(logits.shape) == (2, 5)  # one logit a token: "replaced or not"
    config = head.get_config()
    assert config["activation"] == "gelu_approximate"
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(head))
    assert type(clone) is DiscriminatorHead and clone.get_config() == config
    assert [w.shape for w in head.weights] == [(16, 16), (16,), (16, 1), (1,)]
    with pytest.raises(ValueError, match="activation"):
        DiscriminatorHead(activation="no_such_activation")


def test_discriminator_head_built_with_the_shapes_the_reader_checks():
    config = dict(_BASE, embedding_size=8, use_pooler=False, activation="relu")
    roots = _build.build_models(config, [tables.DISCRIMINATOR], mlm_activation="gelu")
    head = roots[tables.DISCRIMINATOR]
    assert head.activation == "relu"  # the encoder's, as ElectraDiscriminatorPredictions applies hidden_act
    for target, _, _ in tables.HF_ELECTRA_WEIGHTS[tables.DISCRIMINATOR]:
        assert tuple(resolve_target(roots, target).shape) == expected_shape(target, config), target


def test_discriminator_head_matches_electra_for_pretraining(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from tests.checkpoints._models import perturb_torch

    config = transformers.ElectraConfig(vocab_size=VOCAB, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=20)
    torch.manual_seed(0)
    model = perturb_torch(transformers.ElectraForPreTraining(config))
    model.save_pretrained(str(tmp_path))
    loaded = load_checkpoint(str(tmp_path), with_heads=[tables.DISCRIMINATOR])
    head = loaded.heads[tables.DISCRIMINATOR]
    assert isinstance(head, DiscriminatorHead) and head.activation == "gelu"
    assert load_checkpoint(str(tmp_path), with_heads=False).heads == {}

    inputs = hub_inputs([10, 7, 4], 10, VOCAB, seed=3, min_id=5, segment_b_from="half")
    logits = np.asarray(head(loaded.encoder(inputs, training=False)["sequence_output"]))
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
                         attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
                         token_type_ids=torch.tensor(inputs["input_type_ids"], dtype=torch.long)).logits.numpy()
    real = inputs["input_mask"].astype(bool)
    difference = max_diff(logits[real], expected[real])
    assert difference <= 1e-5, difference
    assert np.std(expected[real]) > 0.01  # the logits differ from token to token: the comparison means something
