"""`bert-keras evaluate`: an exported classifier scored on a labelled file (report, confusion matrix), or an
exported tagger on a tagged file (entity-level precision, recall and F1, as conlleval counts them).

The loaders, the report writer and the file writer (TensorFlow, matplotlib) are imported in `run`:
--help and the checks before TensorFlow loads must not pay for them.
"""

import json
import os

from bert_keras._checks import NotRegularFileError
from bert_keras.commands._common import at_least, fail, say, served_kind, working
from bert_keras.commands._io import READER_ARGUMENTS
from bert_keras.export.manifest import TAGGER, ExportError
from bert_keras.datasets import DataError, read_labelled_file
from bert_keras.entities import entity_scores, format_entity_report
from bert_keras.tagged_data import read_tagged_file

ENTITY_REPORT_FILE = "evaluation.json"


def register(commands, common):
    evaluate = commands.add_parser(
        "evaluate", parents=[common], help="score an exported classifier on a labelled file, or a tagger on a tagged file",
        description="Prints accuracy, macro-F1, per-class precision / recall / F1 / support and the confusion "
        "matrix; with --out also writes evaluation.json and confusion_matrix.png. On a tagger (export_tagger), "
        "--data is a CoNLL file (a word and its tag per line) or JSONL with tokens and tags: each word is tagged by "
        "its first word piece, and entity-level precision / recall / F1 (micro and per type, conlleval's counts) "
        "are printed, and with --out written to evaluation.json.",
    )
    evaluate.add_argument("--model", required=True, help="an exported classifier or tagger (as for predict)")
    evaluate.add_argument("--data", required=True, help="labelled examples (.csv, .tsv, .json or .jsonl); for a "
                          "tagger, tagged sentences (CoNLL, or .jsonl with tokens and tags)")
    evaluate.add_argument("--text-column", default="text")
    evaluate.add_argument("--text-pair-column", help="second text column, for sentence pairs")
    evaluate.add_argument("--label-column", default="label")
    evaluate.add_argument("--delimiter", help="field separator of a .csv or .tsv file (default: , or tab)")
    evaluate.add_argument("--batch-size", type=at_least(1), default=64)
    evaluate.add_argument("--out", help="directory for evaluation.json and confusion_matrix.png")
    evaluate.add_argument("--force", action="store_true", help="replace an earlier output in --out")
    evaluate.set_defaults(func=run)


def _read(args, label_names=None):
    return read_labelled_file(args.data, text_column=args.text_column, label_column=args.label_column,
                              text_pair_column=args.text_pair_column, label_names=label_names,
                              delimiter=args.delimiter, arguments=READER_ARGUMENTS)


def run(args):
    try:
        kind = served_kind(args.model, "evaluate")
    except (NotRegularFileError, ExportError) as error:  # a manifest that is a FIFO, damaged, or another kind's
        return fail("evaluate", str(error))
    if kind == TAGGER:
        return _run_tagger(args)
    try:  # the data's own errors first: they must not wait for TensorFlow and the model (its labels are checked after)
        _read(args)
    except (FileNotFoundError, DataError, ValueError) as error:
        return fail("evaluate", str(error))
    from bert_keras._files import OutputLockedError, check_target  # after the data: they import TensorFlow
    from bert_keras.evaluate import classification_report, format_report, write_report
    from bert_keras.export import load_classifier

    try:  # before any work: never evaluate for an output that cannot be written
        if args.out:
            check_target(args.out, args.force, argument="--out", kind="evaluation")
    except (OSError, ValueError) as error:
        return fail("evaluate", str(error))
    try:
        with working("evaluate", f"loading the classifier in {args.model}"):
            classifier = load_classifier(args.model, warm_up=False)  # one run of the command: nothing compiles
    except (OSError, ValueError, RuntimeError) as error:
        return fail("evaluate", f"cannot load a classifier from {args.model}: {error}")
    pairs = len(classifier.inputs) == 2
    if pairs and not args.text_pair_column:
        return fail("evaluate", f"{args.model} classifies text pairs: pass --text-pair-column.")
    try:
        data = _read(args, classifier.label_names)
    except (FileNotFoundError, DataError, ValueError) as error:
        return fail("evaluate", f"{error} (the classifier's labels: {classifier.label_names})")
    probabilities = classifier.predict_proba(data.texts, data.text_pairs, batch_size=args.batch_size)
    report = classification_report(data.labels, probabilities, classifier.label_names)
    say(format_report(report))
    if args.out:
        try:
            files = write_report(args.out, report, overwrite=args.force)
        except (OSError, ValueError, OutputLockedError) as error:
            return fail("evaluate", str(error))
        say(f"Wrote {', '.join(os.path.basename(f) for f in files)} to {args.out}")
    return 0


def _run_tagger(args):
    """`evaluate` on a tagger export: entity scores of the words' tags (each word's first piece's tag)."""
    try:  # the data's own errors first: they must not wait for TensorFlow and the model (its tags are checked after)
        read_tagged_file(args.data)
    except (FileNotFoundError, DataError, ValueError) as error:
        return fail("evaluate", str(error))
    from bert_keras._files import OutputLockedError, check_target, staged_directory  # they import TensorFlow
    from bert_keras.export import load_tagger

    try:  # before any work: never evaluate for an output that cannot be written
        if args.out:
            check_target(args.out, args.force, argument="--out", kind="evaluation")
    except (OSError, ValueError) as error:
        return fail("evaluate", str(error))
    try:
        with working("evaluate", f"loading the tagger in {args.model}"):
            tagger = load_tagger(args.model, warm_up=False)
    except (OSError, ValueError, RuntimeError) as error:
        return fail("evaluate", f"cannot load a tagger from {args.model}: {error}")
    try:
        data = read_tagged_file(args.data, tag_names=tagger.tag_names)
    except (FileNotFoundError, DataError, ValueError) as error:
        return fail("evaluate", f"{error} (the tagger's tags: {tagger.tag_names})")
    predicted = tagger.tag_words(data.words, batch_size=args.batch_size)
    try:
        scores = entity_scores(data.tags, predicted, scheme=data.scheme)
    except ValueError as error:  # a tag of the model's outside B-, I-, E-, S-
        return fail("evaluate", f"cannot score the tagger's tags {tagger.tag_names}: {error}")
    say(format_entity_report(scores))
    if args.out:
        try:
            with staged_directory(args.out, args.force, kind="evaluation", argument="--out") as staging:
                with open(os.path.join(staging, ENTITY_REPORT_FILE), "w") as f:
                    json.dump(scores, f, indent=2)
        except (OSError, ValueError, OutputLockedError) as error:
            return fail("evaluate", str(error))
        say(f"Wrote {ENTITY_REPORT_FILE} to {args.out}")
    return 0
