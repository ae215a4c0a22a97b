"""Task models: parity with transformers' heads, synthetic tasks learned, Hub encoders, round trips, errors."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_keras import BertEncoder
from bert_keras.tasks import BertClassifier, BertPretrainer, BertSpanLabeler, BertTokenClassifier
from bert_keras.text import BertPreprocessor
from bert_keras.formats import tables
from tests.helpers import assert_close, hub_inputs, run_model_test

# The task classes of the family whose head a token classifier reads, as its warnings list them.
TOKEN_CLASSIFIERS = ", ".join(name for name, part in tables.HF_TASK_ARCHITECTURES.items()
                              if part == tables.TOKEN_CLASSIFIER)

TINY = dict(vocab_size=40, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32, max_sequence_length=24)


def _inputs(batch=3, seq=10, seed=0):
    return hub_inputs([seq, seq - 3, 5][:batch], seq, TINY["vocab_size"], seed=seed, min_id=5, segment_b_from=4)


# ---------------------------------------------------------------------------
# Checkpoints fine-tuned elsewhere: transformers' task heads through from_checkpoint, on raw strings.
# ---------------------------------------------------------------------------
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
SENTIMENTS = ["negative", "neutral", "positive"]
# The folder's vocab.txt (tests/checkpoints/_models.py) is [PAD] [UNK] [CLS] [SEP] [MASK] tok0..tok34;
# "hello" and "," are not in it ([UNK]), "TOK3" is lower-cased; the last text is cut at seq_length.
TEXTS = ["tok1 tok2 tok30", "Hello, TOK3 tok4 tok5", "tok7", " ".join(f"tok{i}" for i in range(20))]
QUESTIONS = ["tok1 tok2", "tok9", "tok3 hello tok4", "tok5"]
SEQ_LENGTH = 12


@pytest.fixture(scope="module")
def task_checkpoints(tmp_path_factory):
    """Folders of a BertForTokenClassification, BertForQuestionAnswering and BertForSequenceClassification."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from tests.checkpoints._models import TINY_HF, perturb_torch, save_hf_directory

    labels = {"BertForTokenClassification": TAGS, "BertForQuestionAnswering": ["LABEL_0", "LABEL_1"],
              "BertForSequenceClassification": SENTIMENTS}
    folders, models = {}, {}
    for architecture, names in labels.items():
        config = transformers.BertConfig(**TINY_HF, id2label=dict(enumerate(names)))
        torch.manual_seed(3)  # the initial weights too: torch seeds its generator at random in each process
        models[architecture] = perturb_torch(getattr(transformers, architecture)(config), seed=3)
        folders[architecture] = save_hf_directory(models[architecture], tmp_path_factory.mktemp(architecture))
    return folders, models


def _transformers_logits(model, folder, texts, pairs=None):
    """transformers' outputs on the same strings, tokenized by BertTokenizerFast on the folder's vocab."""
    import torch
    import transformers

    tokenizer = transformers.BertTokenizerFast(os.path.join(folder, "vocab.txt"), do_lower_case=True)
    batch = tokenizer(texts, pairs, padding="max_length", truncation="only_second" if pairs else True,
                      max_length=SEQ_LENGTH, return_tensors="pt")
    with torch.no_grad():
        return {key: value.numpy() for key, value in batch.items()}, model(**batch)


@pytest.mark.parametrize("architecture", ["BertForTokenClassification", "BertForSequenceClassification"])
def test_classifier_checkpoints_of_transformers_load_in_one_call(task_checkpoints, architecture):
    folders, models = task_checkpoints
    folder, model = folders[architecture], models[architecture]
    task_class = BertTokenClassifier if architecture == "BertForTokenClassification" else BertClassifier
    task = task_class.from_checkpoint(folder, seq_length=SEQ_LENGTH)
    names = TAGS if task_class is BertTokenClassifier else SENTIMENTS
    assert task.num_classes == len(names) and task.label_names == names

    batch, expected = _transformers_logits(model, folder, TEXTS)
    packed = task.preprocessor(tf.constant(TEXTS))
    np.testing.assert_array_equal(np.asarray(packed["input_word_ids"]), batch["input_ids"])  # the same pieces
    outputs = np.asarray(task(TEXTS, training=False))
    if task_class is BertTokenClassifier:
        # Read (and trained) at real tokens: the packed encoder leaves padding's hidden states at zero.
        real = batch["attention_mask"].astype(bool)
        outputs, reference = outputs[real], expected.logits.numpy()[real]
    else:
        reference = expected.logits.numpy()
    diff = float(np.max(np.abs(outputs - reference)))
    print(f"{architecture} from_checkpoint vs transformers: max abs diff {diff:.2e}")
    assert diff <= 1e-4
    assert task.get_config()["label_names"] == names  # saved with the model (round trip: test_task_config_...)


def test_question_answering_checkpoint_of_transformers_loads_in_one_call(task_checkpoints):
    folders, models = task_checkpoints
    folder, model = folders["BertForQuestionAnswering"], models["BertForQuestionAnswering"]
    labeler = BertSpanLabeler.from_checkpoint(folder, seq_length=SEQ_LENGTH)
    # transformers scores every position; context_segment_id=None does too.
    unmasked = BertSpanLabeler(labeler.encoder, preprocessor=labeler.preprocessor, context_segment_id=None)
    unmasked.span_head.set_weights(labeler.span_head.get_weights())
    batch, expected = _transformers_logits(model, folder, QUESTIONS, TEXTS)
    real = batch["attention_mask"].astype(bool)
    context = _answerable(batch["attention_mask"], batch["token_type_ids"])
    outputs, everywhere = labeler([QUESTIONS, TEXTS]), unmasked([QUESTIONS, TEXTS])
    for key in ("start_logits", "end_logits"):
        reference = getattr(expected, key).numpy()
        assert float(np.max(np.abs(np.asarray(outputs[key])[context] - reference[context]))) <= 1e-4
        assert (np.asarray(outputs[key])[~context] == -1e9).all()  # the answer lies in the context (or is [CLS])
        assert float(np.max(np.abs(np.asarray(everywhere[key])[real] - reference[real]))) <= 1e-4


def test_from_checkpoint_refuses_another_number_of_classes(task_checkpoints):
    folders, _ = task_checkpoints
    folder = folders["BertForTokenClassification"]
    with pytest.raises(ValueError, match=r"`num_classes`, expected the 5 classes of the head in the checkpoint "
                       r"'.*' \(O, B-PER, I-PER, B-LOC, I-LOC\)\. Received: num_classes=3\. Omit num_classes"):
        BertTokenClassifier.from_checkpoint(folder, seq_length=SEQ_LENGTH, num_classes=3)
    with pytest.raises(ValueError, match=r"`label_names`, expected the checkpoint's classes in the order of its "
                       r"head's outputs: \['negative', 'neutral', 'positive'\]"):
        BertClassifier.from_checkpoint(folders["BertForSequenceClassification"], seq_length=SEQ_LENGTH,
                                       label_names=["positive", "neutral", "negative"])
    # The same number, and names of the user's own: they rename the outputs.
    tagger = BertTokenClassifier.from_checkpoint(folder, seq_length=SEQ_LENGTH, num_classes=5,
                                                 label_names=["o", "bp", "ip", "bl", "il"])
    assert tagger.label_names == ["o", "bp", "ip", "bl", "il"]


def test_another_tasks_checkpoint_gives_the_encoder_and_a_new_head(task_checkpoints, caplog):
    folders, models = task_checkpoints
    folder = folders["BertForQuestionAnswering"]
    with caplog.at_level("WARNING", logger="bert_keras.tasks"):
        tagger = BertTokenClassifier.from_checkpoint(folder, seq_length=SEQ_LENGTH, num_classes=4)
    warnings = [r.getMessage() for r in caplog.records if r.name == "bert_keras.tasks"]
    assert len(warnings) == 1 and "holds a task head for BertForQuestionAnswering (qa_outputs.bias, " \
        f"qa_outputs.weight), not one of {TOKEN_CLASSIFIERS}: BertTokenClassifier.from_checkpoint loads its encoder " \
        "only, with a new, randomly initialized head" in warnings[0]
    assert TOKEN_CLASSIFIERS.startswith("BertForTokenClassification, AlbertForTokenClassification, ")  # the family's
    assert tagger.num_classes == 4 and tagger.label_names is None
    # The encoder is the checkpoint's: the same word embeddings as transformers'.
    np.testing.assert_array_equal(tagger.encoder.embeddings.word_embeddings.embeddings.numpy(),
                                  models["BertForQuestionAnswering"].bert.embeddings.word_embeddings.weight.detach().numpy())
    caplog.clear()
    with caplog.at_level("WARNING", logger="bert_keras.tasks"):  # the checkpoint's own head: nothing to say
        BertSpanLabeler.from_checkpoint(folder, seq_length=SEQ_LENGTH)
    assert [r for r in caplog.records if r.name == "bert_keras.tasks"] == []


# ---------------------------------------------------------------------------
# Synthetic tasks learned to >= 95%.
# ---------------------------------------------------------------------------
SYNTH = dict(vocab_size=30, num_layers=2, hidden_size=32, num_heads=4, intermediate_size=64, max_sequence_length=24,
             dropout=0.0, attention_dropout=0.0)
ENTITY = range(20, 30)  # entity tokens; 5..19 are other words


def _tagging_data(count, seq=16, seed=0):
    """NER-like BIO tags: a run of entity tokens is B I I ...; other tokens O. Needs the previous token."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((count, seq), "int32")
    tags = np.zeros((count, seq), "int32")
    lengths = rng.integers(6, seq + 1, size=count)
    for row, length in enumerate(lengths):
        ids[row, 0], ids[row, length - 1] = 2, 3
        position = 1
        while position < length - 1:
            if rng.random() < 0.35:
                run = min(int(rng.integers(1, 4)), length - 1 - position)
                ids[row, position : position + run] = rng.integers(20, 30, size=run)
                tags[row, position] = 1  # B
                tags[row, position + 1 : position + run] = 2  # I
                position += run
                if position < length - 1:  # runs are separated by a word
                    ids[row, position] = rng.integers(5, 20)
                    position += 1
            else:
                ids[row, position] = rng.integers(5, 20)
                position += 1
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype("int32")
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}, tags


@pytest.mark.slow
def test_token_classifier_learns_bio_tagging():
    keras.utils.set_random_seed(0)
    tagger = BertTokenClassifier(BertEncoder(**SYNTH), num_classes=3, dropout=0.0)
    tagger.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=["accuracy"],
    )
    x, y = _tagging_data(2048)
    tagger.fit(x, y, sample_weight=x["input_mask"].astype("float32"), epochs=12, batch_size=64, verbose=0)
    x_test, y_test = _tagging_data(512, seed=1)
    predicted = tagger.predict(x_test, verbose=0).argmax(-1)
    real = x_test["input_mask"] == 1
    accuracy = float((predicted[real] == y_test[real]).mean())
    entity = real & (y_test > 0)
    entity_accuracy = float((predicted[entity] == y_test[entity]).mean())  # B vs I needs context
    print(f"token classification: accuracy {accuracy:.4f}, on entity tokens {entity_accuracy:.4f}")
    assert accuracy >= 0.95 and entity_accuracy >= 0.95


def _qa_data(count, seq=20, seed=0):
    """[CLS] q q 5 6 [SEP] context [SEP]: the answer runs from token 5 to token 6 of the context.

    The question holds the markers too, so only the context mask tells the right ones.
    """
    rng = np.random.default_rng(seed)
    ids = np.zeros((count, seq), "int32")
    types = np.zeros((count, seq), "int32")
    starts = np.zeros(count, "int32")
    ends = np.zeros(count, "int32")
    for row in range(count):
        question = [2, int(rng.integers(7, 30)), 5, 6, 3]
        context = list(rng.integers(7, 30, size=seq - len(question) - 1))
        start = int(rng.integers(0, len(context) - 1))
        end = int(rng.integers(start + 1, min(start + 4, len(context))))
        context[start], context[end] = 5, 6
        ids[row] = question + context + [3]
        types[row, len(question) :] = 1
        starts[row], ends[row] = len(question) + start, len(question) + end
    inputs = {"input_word_ids": ids, "input_mask": np.ones_like(ids), "input_type_ids": types}
    return inputs, {"start_logits": starts, "end_logits": ends}


@pytest.mark.slow
def test_span_labeler_learns_synthetic_qa():
    keras.utils.set_random_seed(0)
    labeler = BertSpanLabeler(BertEncoder(**SYNTH))
    labeler.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss={key: keras.losses.SparseCategoricalCrossentropy(from_logits=True) for key in ("start_logits", "end_logits")},
    )
    x, y = _qa_data(1024)
    labeler.fit(x, y, epochs=6, batch_size=64, verbose=0)
    x_test, y_test = _qa_data(512, seed=1)
    outputs = labeler.predict(x_test, verbose=0)
    start, end = outputs["start_logits"].argmax(-1), outputs["end_logits"].argmax(-1)
    exact = float(((start == y_test["start_logits"]) & (end == y_test["end_logits"])).mean())
    # The question's markers are never picked: they are masked out. [CLS] (position 0) is scored: the null answer.
    assert (start >= 5).all() and (end >= 5).all()
    assert outputs["start_logits"][:, 1:5].max() <= -1e8 and outputs["start_logits"][:, 0].min() > -1e8
    print(f"span QA: exact match {exact:.4f}")
    assert exact >= 0.95


# ---------------------------------------------------------------------------
# Structure, freezing, round trips.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "build, own_config",
    [
        (
            lambda e: BertClassifier(e, num_classes=3, dropout=0.2, label_names=["neg", "neu", "pos"]),
            {"num_classes": 3, "dropout": 0.2, "activation": None, "text_pairs": False, "label_names": ["neg", "neu", "pos"]},
        ),
        (
            lambda e: BertTokenClassifier(e, num_classes=3, label_names=["O", "B-PER", "I-PER"]),
            {"num_classes": 3, "dropout": 0.1, "text_pairs": False, "label_names": ["O", "B-PER", "I-PER"],
             "head_transform": None},
        ),
        (lambda e: BertSpanLabeler(e), {"context_segment_id": 1, "head_transform": None}),
    ],
)
def test_task_config_freezing_and_keras_round_trip(tmp_path, build, own_config):
    encoder = BertEncoder(**TINY)
    task = build(encoder)
    assert task.encoder is encoder
    config = task.get_config()
    assert set(config) == {"name", "trainable", "encoder", "preprocessor"} | set(own_config)
    assert config["preprocessor"] is None
    assert {key: config[key] for key in own_config} == own_config

    inputs = _inputs()
    task.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    task.encoder.trainable = False
    head_weights = len(task.trainable_weights)
    assert head_weights == 2  # the head's kernel and bias only
    task.encoder.trainable = True
    assert len(task.trainable_weights) == len(encoder.trainable_weights) + 2

    _, restored = run_model_test(task, inputs, tmp_path)
    assert isinstance(restored.encoder, BertEncoder)


def _answerable(mask, type_ids):
    """[CLS] and the context's pieces (segment 1 without its closing [SEP]): transformers' pipeline's p_mask."""
    mask = np.asarray(mask)
    position = np.arange(mask.shape[1])[None, :]
    closing = position == mask.sum(axis=1, keepdims=True) - 1
    return (position == 0) | ((mask == 1) & (np.asarray(type_ids) == 1) & ~closing)


def test_span_labeler_masks_everything_outside_the_context():
    labeler = BertSpanLabeler(BertEncoder(**TINY))
    inputs = _inputs()
    outputs = labeler(inputs)
    context = _answerable(inputs["input_mask"], inputs["input_type_ids"])
    assert context[:, 0].all() and not context[np.arange(3), inputs["input_mask"].sum(axis=1) - 1].any()
    for key in ("start_logits", "end_logits"):
        logits = np.asarray(outputs[key])
        assert logits.shape == (3, 10)
        assert (logits[~context] == -1e9).all() and (np.abs(logits[context]) < 100).all()
    unmasked = BertSpanLabeler(labeler.encoder, context_segment_id=None)
    unmasked.span_head.set_weights(labeler.span_head.get_weights())
    assert_close(np.asarray(unmasked(inputs)["start_logits"])[context], np.asarray(outputs["start_logits"])[context])


@pytest.mark.slow
def test_pretrainer_default_compile_ignores_padded_predictions():
    encoder = BertEncoder(**TINY, dropout=0.0, attention_dropout=0.0)
    pretrainer = BertPretrainer(encoder)
    pretrainer.compile(optimizer="adam")
    inputs = dict(_inputs(), masked_lm_positions=np.array([[1, 2, 0], [3, 0, 0], [1, 4, 0]], "int32"))
    mlm_labels = np.array([[7, 8, 0], [9, 0, 0], [10, 11, 0]])
    weights = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 0]], "float32")
    nsp_labels = np.array([0, 1, 0])
    results = pretrainer.evaluate(
        inputs,
        {"mlm_logits": mlm_labels, "nsp_logits": nsp_labels},
        sample_weight={"mlm_logits": weights, "nsp_logits": np.ones(3, "float32")},
        return_dict=True,
        verbose=0,
    )
    outputs = pretrainer.predict(inputs, verbose=0)
    log_probs = outputs["mlm_logits"] - np.log(np.exp(outputs["mlm_logits"]).sum(-1, keepdims=True))
    token_losses = -np.take_along_axis(log_probs, mlm_labels[:, :, None], axis=-1)[:, :, 0]
    expected_mlm = float((token_losses * weights).sum() / weights.sum())  # mean over the 5 real predictions
    predicted = outputs["mlm_logits"].argmax(-1)
    expected_accuracy = float(((predicted == mlm_labels) * weights).sum() / weights.sum())
    assert abs(results["mlm_logits_loss"] - expected_mlm) <= 1e-4
    assert abs(results["mlm_logits_mlm_accuracy"] - expected_accuracy) <= 1e-6
    assert {"nsp_logits_loss", "nsp_logits_nsp_accuracy", "loss"} <= set(results)
    assert abs(results["loss"] - results["mlm_logits_loss"] - results["nsp_logits_loss"]) <= 1e-4


# ---------------------------------------------------------------------------
# Tasks on a Hub encoder (bert_keras.hub.KerasLayer).
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def encoder_module(tmp_path_factory):
    from bert_keras.export import export_encoder

    directory = tmp_path_factory.mktemp("hub")
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]) + "\n")
    keras.utils.set_random_seed(3)
    encoder = BertEncoder(**TINY, dropout=0.0, attention_dropout=0.0)
    return encoder, export_encoder(encoder, str(directory / "encoder"), str(vocab), do_lower_case=True)


@pytest.mark.slow
def test_classifier_on_a_hub_encoder_trains_and_round_trips(encoder_module, tmp_path):
    from bert_keras import hub

    reference, module_dir = encoder_module
    layer = hub.KerasLayer(module_dir, trainable=True)
    classifier = BertClassifier(layer, num_classes=2, dropout=0.0)
    assert classifier.encoder is layer
    inputs = _inputs()
    # Same pooled output as the encoder that was exported.
    pooled = np.asarray(reference(inputs)["pooled_output"])
    assert_close(classifier.classifier_head.dense(layer(inputs)["pooled_output"]), classifier(inputs), atol=1e-6)
    assert_close(layer(inputs)["pooled_output"], pooled, atol=1e-5)

    classifier.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    labels = np.array([0, 1, 1])
    before = [w.numpy().copy() for w in layer.trainable_weights]
    classifier.fit(inputs, labels, epochs=3, verbose=0)
    assert any(not np.array_equal(b, w.numpy()) for b, w in zip(before, layer.trainable_weights))

    path = str(tmp_path / "hub_classifier.keras")
    classifier.save(path)
    restored = keras.saving.load_model(path, safe_mode=False)  # it loads the module the file names
    assert isinstance(restored.encoder, hub.KerasLayer)
    np.testing.assert_array_equal(restored.predict(inputs, verbose=0), classifier.predict(inputs, verbose=0))


def test_token_classifier_span_labeler_and_pretrainer_on_a_hub_encoder(encoder_module):
    from bert_keras import hub

    _, module_dir = encoder_module
    layer = hub.KerasLayer(module_dir)
    inputs = _inputs()
    assert BertTokenClassifier(layer, num_classes=4)(inputs).shape == (3, 10, 4)
    assert BertSpanLabeler(layer)(inputs)["end_logits"].shape == (3, 10)
    pretrainer = BertPretrainer(layer, vocab_size=40)
    outputs = pretrainer(dict(inputs, masked_lm_positions=np.zeros((3, 2), "int32")))
    assert outputs["mlm_logits"].shape == (3, 2, 40) and outputs["nsp_logits"].shape == (3, 2)
    assert pretrainer.mlm_head.embedding is None  # a Hub module does not expose its embedding layer
    assert pretrainer.get_config()["vocab_size"] == 40


def test_task_argument_errors():
    encoder = BertEncoder(**TINY)
    for build in (
        lambda e: BertClassifier(e, num_classes=2),
        lambda e: BertTokenClassifier(e, num_classes=2),
        lambda e: BertSpanLabeler(e),
    ):
        with pytest.raises(ValueError, match="encoder"):
            build("bert")
        with pytest.raises(ValueError, match="encoder"):
            build(keras.layers.Dense(3))
    with pytest.raises(ValueError, match="num_classes"):
        BertClassifier(encoder, num_classes=0)
    with pytest.raises(ValueError, match="num_classes"):
        BertTokenClassifier(encoder, num_classes=-1)
    with pytest.raises(ValueError, match=r"`label_names`, expected 2 distinct names \(num_classes=2\)"):
        BertTokenClassifier(encoder, num_classes=2, label_names=["O", "O"])
    with pytest.raises(ValueError, match="dropout"):
        BertClassifier(encoder, num_classes=2, dropout=1.5)
    with pytest.raises(ValueError, match="context_segment_id"):
        BertSpanLabeler(encoder, context_segment_id=-1)
    with pytest.raises(ValueError, match="vocab_size"):
        BertPretrainer(encoder, vocab_size=41)
    with pytest.raises(ValueError, match="encoder"):
        BertPretrainer(keras.layers.Dense(3), vocab_size=40)


# ---------------------------------------------------------------------------
# One model path: from_checkpoint, raw strings, Hub layers == native encoder.
# ---------------------------------------------------------------------------
@pytest.mark.slow
def test_classifier_from_the_minilm_checkpoint_takes_raw_strings_and_matches_transformers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bert_keras.text.corpora import load_tweets, minilm_vocab_path

    directory = os.path.dirname(minilm_vocab_path())
    classifier = BertClassifier.from_checkpoint(directory, num_classes=3, seq_length=64)
    texts = load_tweets()[0][:16]
    assert tuple(classifier(keras.ops.convert_to_tensor(texts)).shape) == (16, 3)
    ours = np.asarray(classifier.encoder(classifier.preprocessor(keras.ops.convert_to_tensor(texts)))["pooled_output"])

    tokenizer = transformers.BertTokenizerFast.from_pretrained(directory)
    model = transformers.BertModel.from_pretrained(directory).eval()
    batch = tokenizer(texts, padding="max_length", truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).pooler_output.numpy()
    diff = float(np.max(np.abs(ours - expected)))
    print(f"from_checkpoint(MiniLM) pooled_output vs transformers: max abs diff {diff:.2e}")
    assert diff <= 1e-4


@pytest.fixture(scope="module")
def module_pair(tmp_path_factory):
    from bert_keras.export import export_module_pair

    directory = tmp_path_factory.mktemp("pair")
    vocab = directory / "vocab.txt"
    words = ["good", "great", "fun", "bad", "awful", "boring", "movie", "the", "was", "plot"]
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + [f"w{i}" for i in range(25)]) + "\n")
    keras.utils.set_random_seed(5)
    encoder = BertEncoder(**TINY, dropout=0.0, attention_dropout=0.0)
    export_module_pair(str(directory / "modules"), encoder, str(vocab), do_lower_case=True, seq_length=12)
    return encoder, str(vocab), str(directory / "modules")


@pytest.mark.slow
def test_the_same_classifier_on_hub_layers_and_on_the_native_encoder(module_pair, tmp_path):
    from bert_keras import hub
    from bert_keras.training import finetune
    from bert_keras.export import export_classifier, load_classifier
    from bert_keras.text import BertPreprocessor

    encoder, vocab, modules = module_pair
    on_hub = BertClassifier.from_checkpoint(modules, num_classes=2, seq_length=12, dropout=0.0)
    assert isinstance(on_hub.encoder, hub.KerasLayer) and isinstance(on_hub.preprocessor, hub.PreprocessLayer)
    native = BertClassifier(encoder, num_classes=2, preprocessor=BertPreprocessor(vocab, seq_length=12), dropout=0.0)
    for ours, theirs in zip(native.classifier_head.weights, on_hub.classifier_head.weights):
        ours.assign(theirs)
    texts = ["the movie was good", "awful plot", "boring boring boring", "great fun w3 w7"]
    diff = float(np.max(np.abs(np.asarray(native(keras.ops.convert_to_tensor(texts))) - np.asarray(on_hub(keras.ops.convert_to_tensor(texts))))))
    assert diff <= 1e-5, diff

    # Frozen, then unfrozen; exported; reloaded.
    labels = np.array([1, 0, 0, 1] * 4, dtype="int32")
    data = tf.data.Dataset.from_tensor_slices((tf.constant(texts * 4), labels)).batch(4)
    frozen = [w.numpy().copy() for w in on_hub.encoder.weights]
    history = finetune(on_hub, data, head_epochs=1, epochs=2, learning_rate=1e-3, verbose=0)
    assert len(history.head["loss"]) == 1 and len(history.full["loss"]) == 2
    assert any(not np.array_equal(a, w.numpy()) for a, w in zip(frozen, on_hub.encoder.weights))
    logits = np.asarray(on_hub.predict(tf.constant(texts), verbose=0))
    export_dir = str(tmp_path / "classifier")
    export_classifier(on_hub, export_dir, ["neg", "pos"])
    loaded = load_classifier(export_dir, warm_up=False)
    probabilities, names = loaded.predict_proba(texts), [prediction["label"] for prediction in loaded.predict(texts)]
    np.testing.assert_allclose(probabilities, keras.ops.convert_to_numpy(keras.ops.softmax(logits)), atol=1e-6)
    assert names == [["neg", "pos"][i] for i in logits.argmax(-1)]


@pytest.mark.slow
def test_classifier_with_a_preprocessor_round_trips_and_takes_pairs(module_pair, tmp_path):
    from bert_keras.text import BertPreprocessor

    encoder, vocab, _ = module_pair
    classifier = BertClassifier(
        encoder, num_classes=3, preprocessor=BertPreprocessor(vocab, seq_length=12), activation="softmax", text_pairs=True
    )
    assert [i.name for i in classifier.inputs] == ["text", "text_pair"]
    pairs = [tf.constant(["good movie", "bad"]), tf.constant(["great", "awful plot"])]
    probabilities = np.asarray(classifier(pairs))
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-6)
    assert classifier.get_config()["activation"] == "softmax" and classifier.get_config()["text_pairs"] is True
    run_model_test(classifier, pairs, tmp_path)  # no Hub layer inside: safe mode loads it


@pytest.mark.slow
def test_from_checkpoint_errors(module_pair, tmp_path):
    _, _, modules = module_pair
    with pytest.raises(ValueError, match=r"`activation`, expected one of \[None, 'softmax'\]. Received: activation='relu'"):
        BertClassifier.from_checkpoint(modules, num_classes=2, seq_length=12, activation="relu")
    with pytest.raises(ValueError, match=r"`seq_length`, expected at most the encoder module's 24 positions. Received: seq_length=128"):
        BertClassifier.from_checkpoint(modules, num_classes=2, seq_length=128)
    # Without one, 128 cut to the encoder's positions.
    assert BertClassifier.from_checkpoint(modules, num_classes=2).preprocessor.seq_length == 24
    with pytest.raises(ValueError, match=r"`seq_length`, expected an integer >= 3. Received: seq_length=2"):
        BertClassifier.from_checkpoint(modules, num_classes=2, seq_length=2)
    with pytest.raises(ValueError, match=r"pair of Hub handles"):
        BertClassifier.from_checkpoint(("a", "b", "c"), num_classes=2)
    with pytest.raises(ValueError, match=r"`preprocessor`, expected a BertPreprocessor"):
        BertClassifier(BertEncoder(**TINY), num_classes=2, preprocessor="vocab.txt")


# ---------------------------------------------------------------------------
# The classifier's serving computation (what bert_keras.export traces).
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("activation", [None, "softmax"])
@pytest.mark.parametrize("text_pairs", [False, True], ids=["single", "pairs"])
def test_serving_outputs_equal_the_forward_pass(module_pair, activation, text_pairs):
    from bert_keras.text import BertPreprocessor

    encoder, vocab, _ = module_pair
    keras.utils.set_random_seed(7)
    classifier = BertClassifier(encoder, num_classes=3, preprocessor=BertPreprocessor(vocab, seq_length=12),
                                activation=activation, text_pairs=text_pairs)
    texts = ["the movie was good", "awful plot", "", "great fun w3 w7 w9 w1 w2 w4 w5"]
    pairs = ["bad", "", "boring boring", "the plot"]
    as_lists = [texts, pairs] if text_pairs else texts  # Python lists of str
    as_tensors = [tf.constant(texts), tf.constant(pairs)] if text_pairs else tf.constant(texts)
    expected = np.asarray(classifier(as_tensors, training=False))
    for first_token_only in (True, False):
        for inputs in (as_lists, as_tensors):
            served = np.asarray(classifier.serving_outputs(inputs, first_token_only=first_token_only))
            assert served.shape == (4, 3) and served.dtype == np.float32
            np.testing.assert_allclose(served, expected, atol=1e-6)
    packed = classifier.preprocessor(as_tensors)  # the Hub input dict, as the export passes it
    np.testing.assert_allclose(np.asarray(classifier.serving_outputs(packed)), expected, atol=1e-6)
    if activation == "softmax":
        np.testing.assert_allclose(expected.sum(-1), 1.0, atol=1e-6)
    assert classifier.with_native_encoder() is classifier  # a BertEncoder already


@pytest.mark.slow
def test_serving_outputs_without_a_preprocessor_and_on_hub_layers(module_pair):
    from bert_keras import hub

    encoder, _, modules = module_pair
    plain = BertClassifier(encoder, num_classes=2)
    inputs = _inputs(batch=3, seq=10)
    np.testing.assert_allclose(np.asarray(plain.serving_outputs(inputs)), np.asarray(plain(inputs)), atol=1e-6)
    with pytest.raises(ValueError, match="this classifier has no preprocessor"):
        plain.serving_outputs(["good movie"])

    on_hub = BertClassifier.from_checkpoint(modules, num_classes=2, seq_length=12, dropout=0.0, activation="softmax")
    texts = ["the movie was good", "awful plot"]
    expected = np.asarray(on_hub(tf.constant(texts)))
    for first_token_only in (True, False):  # the module's graph either way
        np.testing.assert_allclose(np.asarray(on_hub.serving_outputs(texts, first_token_only=first_token_only)),
                                   expected, atol=1e-6)
    native = on_hub.with_native_encoder()
    # The pair records its tokenizer, which packs as its preprocess module: the copy's preprocessor is ours.
    assert isinstance(native.encoder, BertEncoder) and isinstance(native.preprocessor, BertPreprocessor)
    assert native.preprocessor.seq_length == 12 and native.preprocessor.tokenizer.lower_case is True
    np.testing.assert_allclose(np.asarray(native.serving_outputs(texts)), expected, atol=1e-6)
    odd = BertClassifier(hub.KerasLayer(os.path.join(modules, "encoder"), name="plain"), num_classes=2)
    odd.encoder.handle = None  # as a layer built from a callable: no module directory to read the architecture from
    with pytest.raises(ValueError, match=r"Cannot rebuild the encoder 'plain' \(KerasLayer\) as a BertEncoder"):
        odd.with_native_encoder()


@pytest.mark.slow
def test_a_preprocess_module_that_packs_unlike_the_encoders_tokenizer_is_kept(module_pair, tmp_path, monkeypatch):
    from bert_keras import hub
    from bert_keras.export import export_preprocessor
    from bert_keras.tasks import classifier as classifier_task

    _, vocab, modules = module_pair
    export_preprocessor(str(tmp_path / "cased"), vocab, do_lower_case=False, seq_length=12)  # not the pair's casing
    monkeypatch.setattr(classifier_task, "PROBE_TEXTS", ("The Movie was GOOD",))
    cased = BertClassifier(hub.KerasLayer(os.path.join(modules, "encoder"), trainable=True), num_classes=2,
                           preprocessor=hub.PreprocessLayer(str(tmp_path / "cased"), seq_length=12))
    native = cased.with_native_encoder()
    assert isinstance(native.encoder, BertEncoder) and native.preprocessor is cased.preprocessor
    uncased = BertClassifier(hub.KerasLayer(os.path.join(modules, "encoder"), trainable=True), num_classes=2,
                             preprocessor=hub.PreprocessLayer(os.path.join(modules, "preprocess"), seq_length=12))
    assert isinstance(uncased.with_native_encoder().preprocessor, BertPreprocessor)
