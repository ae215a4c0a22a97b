"""`bert-keras evaluate`: an exported classifier scored on a labelled file (report, confusion matrix), or an
exported tagger on a tagged file (entity-level precision, recall and F1, as conlleval counts them); the export's
directory or its LiteRT file (`.tflite`), answered by the same kind's code.

One flow for both kinds (`run`): the data's own errors before TensorFlow loads, the output checked before any
work, the model loaded, the data read against its names, scored, the report printed and written. How a kind
reads its data, scores it and writes its report is the kind's (`_kinds`). The loaders, the report writer and the
file writer (TensorFlow, matplotlib) are imported after the data's check: --help and the checks before TensorFlow
loads must not pay for them.
"""

import os

from bert_keras._checks import NotRegularFileError
from bert_keras.commands._common import at_least, fail, say, served_kind
from bert_keras.commands._io import InputError
from bert_keras.commands._kinds import KINDS
from bert_keras.data.texts import DataError
from bert_keras.export.manifest import ExportError


def register(commands, common):
    evaluate = commands.add_parser(
        "evaluate", parents=[common], help="score an exported classifier on a labelled file, or a tagger on a tagged file",
        description="Prints accuracy, macro-F1, per-class precision / recall / F1 / support and the confusion "
        "matrix; with --out also writes evaluation.json and confusion_matrix.png. On a tagger (export_tagger), "
        "--data is a CoNLL file (a word and its tag per line) or JSONL with tokens and tags: each word is tagged by "
        "its first word piece, and entity-level precision / recall / F1 (micro and per type, conlleval's counts) "
        "are printed, and with --out written to evaluation.json.",
    )
    evaluate.add_argument("--model", required=True, help="an exported classifier or tagger (as for predict), or a "
                          ".tflite file of one (bert-keras litert)")
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


def run(args):
    try:
        kind = KINDS[served_kind(args.model, "evaluate")](args)  # a directory or a .tflite file
    except (NotRegularFileError, ExportError) as error:  # a manifest that is a FIFO, damaged, or another kind's
        return fail("evaluate", str(error))
    try:  # the data's own errors first: they must not wait for TensorFlow and the model (its names are checked after)
        kind.read_data()
    except (FileNotFoundError, DataError, ValueError) as error:
        return fail("evaluate", str(error))
    from bert_keras._files import OutputLockedError, check_target  # after the data: they import TensorFlow

    try:  # before any work: never evaluate for an output that cannot be written
        if args.out:
            check_target(args.out, args.force, argument="--out", kind="evaluation")
    except (OSError, ValueError) as error:
        return fail("evaluate", str(error))
    try:
        model = kind.load("evaluate", warm_up=False)  # one run of the command: nothing compiles
    except InputError as error:
        return fail("evaluate", str(error))
    refusal = kind.check_scored(model)
    if refusal:
        return fail("evaluate", refusal)
    try:
        data = kind.read_data(kind.names(model))
    except (FileNotFoundError, DataError, ValueError) as error:
        return fail("evaluate", f"{error} ({kind.names_are}: {kind.names(model)})")
    try:
        report = kind.score(model, data)
    except InputError as error:
        return fail("evaluate", str(error))
    say(kind.format_report(report))
    if args.out:
        try:
            files = kind.write_report(report)
        except (OSError, ValueError, OutputLockedError) as error:
            return fail("evaluate", str(error))
        say(f"Wrote {', '.join(os.path.basename(f) for f in files)} to {args.out}")
    return 0
