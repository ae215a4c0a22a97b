"""`bert-keras explain` and `bert-keras probe`: what a model attends to, for one text or over a labelled file.

The inspector, Keras and the file writer (TensorFlow, matplotlib) are imported in the runs: --help and the checks
before TensorFlow loads must not pay for them.
"""

import os
import sys

import numpy as np

from bert_keras.commands._common import at_least, fail, fit_verbosity, say
from bert_keras.commands._io import READER_ARGUMENTS
from bert_keras.data.texts import DataError, read_labelled_file, stratified_split


def register(commands, common):
    for name, help_text in (
        ("explain", "write the attention of one text (or pair): attention.json, attention.html, PNGs"),
        ("probe", "per-layer attention statistics and linear probes on a labelled text file"),
    ):
        command = commands.add_parser(name, parents=[common], help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        source = command.add_mutually_exclusive_group(required=True)
        source.add_argument("--modules", help="directory with encoder/ and preprocess/ Hub modules, or an encoder module")
        source.add_argument("--checkpoint", help="checkpoint directory (Hugging Face BERT, ALBERT, ELECTRA, DistilBERT, "
                            "RoBERTa, XLM-RoBERTa, DeBERTa-v3, ModernBERT with their tokenizer's files; Google BERT; keras-nlp)")
        command.add_argument("--out", required=True, help="output directory")
        command.add_argument("--seq-length", type=at_least(3), help="longer inputs are truncated (default: 128, or the model's maximum if shorter)")
        command.add_argument("--force", action="store_true", help="replace an earlier output in --out")
        if name == "explain":
            command.add_argument("text", help="the text to look at")
            command.add_argument("--text-pair", help="a second segment")
            command.set_defaults(func=run_explain)
        else:
            command.add_argument("--data", required=True, help="labelled examples (.csv, .tsv or .jsonl)")
            command.add_argument("--text-column", default="text")
            command.add_argument("--text-pair-column", help="second text column, for sentence pairs")
            command.add_argument("--label-column", default="label")
            command.add_argument("--max-examples", type=at_least(2), default=2000, help="stratified subset when the file has more")
            command.add_argument("--batch-size", type=at_least(1), default=32)
            command.add_argument("--seed", type=int, default=0)
            command.set_defaults(func=run_probe)


def _inspector(args):
    from bert_keras.inspection import Inspector

    for module in ("matplotlib", "sklearn"):  # the inspect extra; checked before a model is loaded
        try:
            __import__(module)
        except ImportError as error:
            raise ValueError(f"{error}; install the inspect extra: pip install -e \".[inspect]\"") from error
    return Inspector.from_checkpoint(args.modules or args.checkpoint, seq_length=args.seq_length)


def run_explain(args):
    for name, text in (("TEXT", args.text), ("--text-pair", args.text_pair)):
        if text is not None and not text.strip():
            return fail("explain", f"{name} is empty; give a text with at least one word.")
    from bert_keras._files import OutputLockedError, check_target  # after the checks: they must not wait for TensorFlow
    from bert_keras.inspection.outputs import write_explanation

    try:
        check_target(args.out, args.force, argument="--out", kind="explain")
        inspector = _inspector(args)
        data, files = write_explanation(
            inspector, args.text, args.out, text_pair=args.text_pair, overwrite=args.force,
            source=args.modules or args.checkpoint,
        )
    except (OSError, ValueError, TypeError, OutputLockedError) as error:
        return fail("explain", str(error))
    if data["truncated"]:
        say(f"Truncated: {data['num_wordpieces']} word pieces do not fit in --seq-length {inspector.seq_length}; "
            f"the page shows the first {len(data['tokens'])} tokens.")
    say(f"{len(data['tokens'])} tokens: {' '.join(data['tokens'])}")
    say(f"Wrote {', '.join(os.path.basename(f) for f in files[:2])} and {len(files) - 2} PNG(s) to {args.out}")
    return 0


def _print_probe(result):
    shares = result["attention"]["per_layer"]
    special = result["attention"].get("special_tokens", {"cls": "[CLS]", "sep": "[SEP]"})
    say(f"layer  {special['cls']:<5}  {special['sep']:<5}  punct  self   prev   next   entropy")
    for layer in range(len(shares["cls"])):
        say(f"{layer + 1:>5}  " + "  ".join(f"{shares[name][layer]:.3f}" for name in ("cls", "sep", "punctuation", "self", "previous", "next"))
            + f"  {shares['entropy'][layer]:.3f}")
    accuracy = result["probe"]["accuracy"]
    say(f"probe accuracy ({result['probe']['test_size']} held out; majority class {result['probe']['majority_baseline']:.3f})")
    for index, layer in enumerate(result["probe"]["layers"]):
        say(f"{layer:>10}  [CLS] {accuracy['cls'][index]:.3f}  mean {accuracy['mean'][index]:.3f}")
    for warning in result["warnings"]:
        print(f"bert-keras probe: warning: {warning}", file=sys.stderr)


def run_probe(args):
    if args.max_examples < 10:
        return fail("probe", f"--max-examples must be at least 10. Received: {args.max_examples}")
    import keras  # after the checks: they must not wait for TensorFlow

    from bert_keras._files import OutputLockedError, check_target
    from bert_keras.inspection.outputs import write_probe

    try:
        check_target(args.out, args.force, argument="--out", kind="probe")
        data = read_labelled_file(args.data, text_column=args.text_column, label_column=args.label_column,
                                  text_pair_column=args.text_pair_column, arguments=READER_ARGUMENTS)
    except (FileNotFoundError, FileExistsError, DataError, ValueError) as error:
        return fail("probe", str(error))
    if len(data.label_names) < 2:
        return fail("probe", f"{args.data}: found a single label {data.label_names}; a probe needs two or more.")
    if len(data) > args.max_examples:
        # Per-class floors can fall a few short: take a little more, then exactly --max-examples (parts are shuffled).
        share = min(1.0, (args.max_examples + len(data.label_names)) / len(data))
        data = data.subset(np.sort(stratified_split(data.labels, (share,), seed=args.seed)[0][: args.max_examples]))
    say(f"Probing {len(data)} examples of {args.data}; labels: {data.label_names}")
    try:
        inspector = _inspector(args)
        bar = keras.utils.Progbar(len(data), verbose=fit_verbosity(), unit_name="example")
        result, files = write_probe(inspector, data, args.out, batch_size=args.batch_size, seed=args.seed,
                                    overwrite=args.force, progress=lambda done, total: bar.update(done))
    except (OSError, ValueError, TypeError, OutputLockedError) as error:
        return fail("probe", str(error))
    _print_probe(result)
    say(f"Wrote {', '.join(os.path.basename(f) for f in files)} to {args.out}")
    return 0
