"""`bert-keras predict`: an exported classifier, tagger or reader on TEXT arguments, --input FILE or standard input,
streamed.

One sequence for every kind (`run`): the checks before TensorFlow loads (the TEXT arguments' encoding, the
arguments the kind refuses, the start of --input, a closed standard input), the model loaded, its records read
in batches, answered and printed in input order (blanks kept or, with --skip-blank, counted). What a kind's
record is, how a batch is answered and how one answer prints are the kind's (`_kinds`). The kind of an export
(a directory or a .tflite file) is read from its manifest or record (`bert_keras.export.opening`, as data); the
door that loads either (`opening.load`: TensorFlow for a directory) is imported after the checks, which must not
pay for it.
"""

import itertools
import sys

from bert_keras._checks import NotRegularFileError
from bert_keras.commands._common import at_least, fail, served_kind
from bert_keras.commands._io import InputError, Output, argument_texts, prompt, standard_input
from bert_keras.commands._kinds import KINDS
from bert_keras.commands._kinds import marked_text  # noqa: F401 - the tagger's tsv line, named here as before
from bert_keras.commands._prepared import PreparedFolder, is_transformers_folder
from bert_keras.data.texts import DataError
from bert_keras.export.manifest import ExportError


def register(commands, common):
    predict = commands.add_parser(
        "predict", parents=[common], help="classify texts, or find their entities, with an exported classifier or tagger",
        description="Classifies TEXT arguments, the records of --input FILE, or the lines of standard input, "
        "streamed in batches (constant memory), and prints one prediction per input, in input order. "
        "tsv: LABEL<TAB>SCORE<TAB>TEXT (with --top-k K: K label/score pairs), with tabs, line breaks, backslashes "
        "and control characters in the text escaped (\\t, \\x1b); json / jsonl: text, label, score and the "
        "score of every class. For a classifier of text pairs, give TEXT<TAB>TEXT_PAIR (or --text-pair-column). "
        "A blank input gives an empty prediction (or, with --skip-blank, none). On a tagger (export_tagger): "
        "each text's entities (see --aggregation). On a reader (export_reader): the answer to --question in "
        "--context, or to each record of --input (.jsonl / .csv / .tsv with question and context columns) or of "
        "standard input (QUESTION<TAB>CONTEXT per line).",
    )
    predict.add_argument("--model", required=True, help="a classifier exported by bert-keras finetune or demo, "
                         "by export_classifier, or by model.export() of a classifier built with bert_keras; a "
                         "tagger exported by export_tagger; a reader exported by export_reader; a .tflite file "
                         "of a classifier, tagger or reader (bert-keras litert); or a fine-tuned transformers folder "
                         "(config.json naming a *ForSequenceClassification, *ForTokenClassification or "
                         "*ForQuestionAnswering class the package reads, its weights and tokenizer files), answered "
                         "as transformers' pipeline(model=FOLDER) answers: exported once into "
                         "$XDG_CACHE_HOME/bert_keras/prepared (~/.cache/bert_keras/prepared), reused while its files "
                         "are unchanged")
    predict.add_argument("texts", nargs="*", metavar="TEXT", help="texts to classify (default: --input, else standard input)")
    predict.add_argument("--input", help="a file of texts: .csv, .tsv, .jsonl or .json (one object per line, or an "
                         "array, read whole) with --text-column; any other file: one text per line")
    predict.add_argument("--text-column", help="column (or JSON key) of the text in --input (default: text)")
    predict.add_argument("--text-pair-column", help="column of the second text, for classifiers of text pairs (default: text_pair)")
    predict.add_argument("--delimiter", help="field separator of a .csv or .tsv --input (default: , or tab)")
    predict.add_argument("--format", choices=("tsv", "json", "jsonl"), default="tsv", help="output format (default: tsv)")
    predict.add_argument("--top-k", type=at_least(1), help="print the K best classes (json: their scores only); for "
                         "a reader, the K best answers")
    predict.add_argument("--question", help="readers: the question (with --context)")
    predict.add_argument("--context", help="readers: the text the answer is found in (with --question)")
    predict.add_argument("--batch-size", type=at_least(1), default=64, help="texts per model call (default: 64)")
    predict.add_argument("--skip-blank", action="store_true", help="skip blank inputs (counted on standard error) "
                         "instead of printing an empty prediction")
    predict.add_argument("--aggregation", choices=AGGREGATIONS,
                         help="taggers: how word pieces make entities, as transformers' token-classification "
                         "pipeline's aggregation_strategy (default: the export's own, the strategy it was trained for: "
                         "first, each word tagged by its first piece, for bert-keras finetune's; for a transformers "
                         "folder, none, one entity per piece, as its pipeline answers). tsv prints each text with its entities "
                         "marked, [characters](TYPE SCORE); json / jsonl: {text, entities}, the entities as "
                         "load_tagger(...).predict gives them")
    predict.set_defaults(func=run)


# bert_keras.export.entity_groups.AGGREGATIONS, named here so that --help does not import TensorFlow.
AGGREGATIONS = ("simple", "first", "max", "average", "none")


def run(args):
    if args.top_k is not None and args.top_k < 1:
        return fail("predict", f"--top-k must be at least 1. Received: {args.top_k}")
    try:
        texts = list(argument_texts(args.texts))  # checked before the model loads
        folder = PreparedFolder(args.model) if is_transformers_folder(args.model) else None
        kind = KINDS[folder.kind if folder else served_kind(args.model, "predict")](args)  # a directory or a .tflite
        kind.check_arguments(texts)
        if args.input and not texts:  # so is the file's start: its columns and a first record (no TensorFlow yet)
            if next(kind.records(), None) is None:
                raise InputError(f"--input {args.input} holds no text.")
        from_standard_input = not texts and not args.input and args.question is None
        if from_standard_input:
            standard_input()  # closed: no text can come
        kind.check_before_loading()
        if folder is not None:  # a transformers folder: served from its export, prepared now or found prepared
            args.model = folder.path()
        # After the checks: they must not wait for TensorFlow. As the loaders' default: the first requests run the
        # graph as loaded, without waiting for TensorFlow's rewrites; after them a background warm-up builds the
        # rewritten graph for the rest of an input file. The scores agree to float rounding (~1e-6), below what is
        # printed.
        model = kind.load("predict", warm_up="background")
    except (InputError, DataError, NotRegularFileError, ExportError) as error:
        return fail("predict", str(error))
    refusal = kind.check_model(model)
    if refusal:
        return fail("predict", refusal)
    if from_standard_input:
        prompt()
    return _answer_all(kind, model, args)


def _answer_all(kind, model, args):
    """Each record of `kind`'s input answered by `model` and printed, in input order, a batch at a time."""
    output = Output(args.format, sys.stdout, kind.tsv, kind.json)
    seen = skipped = 0
    try:
        for batch in _batches(kind.records(model), args.batch_size):
            records = [fields for _, fields in batch]
            for fields, answer in zip(records, kind.answer(model, records)):  # a blank record: a blank answer
                seen += 1
                if args.skip_blank and not "".join(fields).strip():
                    skipped += 1
                    continue
                output.write(fields, answer)
            output.out.flush()
    except (InputError, DataError) as error:
        output.close()
        return fail("predict", str(error))
    output.close()
    if not seen:
        return fail("predict", kind.nothing)
    if skipped:
        print(f"bert-keras predict: skipped {skipped} blank input(s) of {seen}.", file=sys.stderr)
    return 0


def _batches(records, size):
    """Lists of `size` records (the last one shorter), each read only when the one before has been answered."""
    records = iter(records)
    while batch := list(itertools.islice(records, size)):
        yield batch
