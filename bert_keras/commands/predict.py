"""`bert-keras predict`: an exported classifier or tagger on TEXT arguments, --input FILE or standard input, streamed.

The loaders (TensorFlow) are imported in `run`: --help and the checks before TensorFlow loads (the TEXT
arguments' encoding, --top-k) must not pay for it. A tagger export is told from a classifier by its manifest
(`bert_keras.export.manifest`, read as data).
"""

import argparse
import sys

from bert_keras._checks import NotRegularFileError
from bert_keras.commands._common import at_least, fail, served_kind, working
from bert_keras.commands._io import InputError, argument_texts, input_records, json_text, prompt, standard_input, tsv_field
from bert_keras.datasets import DataError
from bert_keras.export.litert import is_litert, litert_kind  # no TensorFlow
from bert_keras.export.manifest import READER, TAGGER, ExportError


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
                         "tagger exported by export_tagger; a reader exported by export_reader; or a .tflite file "
                         "of a classifier or tagger (bert-keras litert)")
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
                         "first, each word tagged by its first piece). tsv prints each text with its entities "
                         "marked, [characters](TYPE SCORE); json / jsonl: {text, entities}, the entities as "
                         "load_tagger(...).predict gives them")
    predict.set_defaults(func=run)


# bert_keras.export.entity_groups.AGGREGATIONS, named here so that --help does not import TensorFlow.
AGGREGATIONS = ("simple", "first", "max", "average", "none")


def marked_text(text, entities):
    """`text` with each entity's characters marked `[characters](TYPE SCORE)`, escaped as a tsv field."""
    parts, position = [], 0
    for entity in entities:
        if entity["start"] < position:  # entities do not overlap; kept safe if one ever did
            continue
        group = entity.get("entity_group", entity.get("entity"))
        parts += [text[position : entity["start"]],
                  f"[{text[entity['start']:entity['end']]}]({group} {entity['score']:.4f})"]
        position = entity["end"]
    parts.append(text[position:])
    return tsv_field("".join(parts))


class _EntityWriter:
    """Prints a tagger's entities: a marked text per line (tsv), `{text, entities}` (jsonl) or one JSON array."""

    def __init__(self, fmt, out):
        self.fmt, self.out, self.count = fmt, out, 0

    def write(self, text, entities):
        if self.fmt == "tsv":
            line = marked_text(text, entities)
        else:
            line = json_text({"text": text, "entities": entities})
            if self.fmt == "json":
                line = ("[" if self.count == 0 else ",") + line
        self.out.write(line + "\n")
        self.count += 1

    def close(self):
        if self.fmt == "json":
            self.out.write("[]\n" if self.count == 0 else "]\n")
        self.out.flush()


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
                scores = [cell for name, score in best for cell in (tsv_field(name), f"{score:.4f}")]
            line = "\t".join(scores + [tsv_field(field) for field in fields])
        else:
            record = {"text": fields[0]}
            if len(fields) == 2:
                record["text_pair"] = fields[1]
            if prediction["label"] is None:
                record.update(prediction)
            else:
                record.update(label=prediction["label"], score=round(prediction["score"], 6),
                              scores={name: round(score, 6) for name, score in prediction["scores"].items()})
            line = json_text(record)
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


def run(args):
    if args.top_k is not None and args.top_k < 1:
        return fail("predict", f"--top-k must be at least 1. Received: {args.top_k}")
    try:
        texts = list(argument_texts(args.texts))  # checked before the model loads
        kind = litert_kind(args.model) if is_litert(args.model) else served_kind(args.model, "predict")
        if kind == READER:
            _check_reader_arguments(args, texts)
        elif args.question is not None or args.context is not None:
            raise InputError(f"--question and --context apply to readers; {args.model} is a {kind} export.")
        if args.input and not texts:  # so is the file's start: its columns and a first record (no TensorFlow yet)
            records = _reader_records(args) if kind == READER else input_records(args, pairs=bool(args.text_pair_column))
            if next(records, None) is None:
                raise InputError(f"--input {args.input} holds no text.")
        if not texts and not args.input and args.question is None:
            standard_input()  # closed: no text can come
    except (InputError, DataError, NotRegularFileError, ExportError) as error:
        return fail("predict", str(error))
    if kind == READER:
        return _run_reader(args)
    if kind == TAGGER:
        return _run_tagger(args, texts)
    try:
        with working("predict", f"loading the classifier in {args.model}"):
            # After the checks: they must not wait for TensorFlow. A .tflite file (export_litert) loads without it.
            classifier = _litert_or(args.model, "load_classifier")  # one run of the command: nothing compiles
    except (OSError, ValueError, RuntimeError) as error:
        return fail("predict", f"cannot load a classifier from {args.model}: {error}")
    if args.top_k is not None and args.top_k > classifier.num_classes:
        return fail("predict", f"--top-k {args.top_k} exceeds the classifier's {classifier.num_classes} classes.")
    pairs = len(classifier.inputs) == 2
    if not texts and not args.input:
        prompt()
    writer = _Writer(args.format, args.top_k, sys.stdout)
    seen = skipped = 0
    try:
        for batch in _batches(input_records(args, pairs), args.batch_size):
            predictions = classifier.predict([tuple(f) if pairs else f[0] for _, f in batch], top_k=args.top_k,
                                             batch_size=args.batch_size)  # a blank text: label None
            for (_, fields), prediction in zip(batch, predictions):
                seen += 1
                if prediction["label"] is None and args.skip_blank:
                    skipped += 1
                    continue
                writer.write(fields, prediction)
            sys.stdout.flush()
    except (InputError, DataError) as error:
        writer.close()
        return fail("predict", str(error))
    writer.close()
    if not seen:
        return fail("predict", "no text given: pass TEXT arguments, --input FILE, or lines on standard input.")
    if skipped:
        print(f"bert-keras predict: skipped {skipped} blank input(s) of {seen}.", file=sys.stderr)
    return 0


def _litert_or(model, loader):
    """`load_litert(model)` for a .tflite file (no TensorFlow imported), else the export `loader` (its name)."""
    import bert_keras.export

    if is_litert(model):
        return bert_keras.export.load_litert(model)
    # As the loaders' default: the first requests run the graph as loaded, without waiting seconds for TensorFlow's
    # rewrites (a tagger's first call 2.1 -> 0.95 s); after them a background warm-up builds the rewritten graph for
    # the rest of an input file. The scores agree to float rounding (~1e-6), below what is printed.
    return getattr(bert_keras.export, loader)(model, warm_up="background")


def _run_tagger(args, texts):
    """`predict` on a tagger export: each text's entities, in input order."""
    if args.top_k is not None or args.text_pair_column:
        flag = "--top-k" if args.top_k is not None else "--text-pair-column"
        return fail("predict", f"{flag} applies to classifiers; {args.model} is a tagger (use --aggregation).")
    try:
        with working("predict", f"loading the tagger in {args.model}"):
            # After the checks: they must not wait for TensorFlow. A .tflite file (export_litert) loads without it.
            tagger = _litert_or(args.model, "load_tagger")  # one run of the command: only its lengths trace
    except (OSError, ValueError, RuntimeError) as error:
        return fail("predict", f"cannot load a tagger from {args.model}: {error}")
    if not texts and not args.input:
        prompt()
    writer = _EntityWriter(args.format, sys.stdout)
    seen = skipped = 0
    try:
        for batch in _batches(input_records(args, False), args.batch_size):
            batch_texts = [fields[0] for _, fields in batch]
            predictions = tagger.predict(batch_texts, aggregation=args.aggregation, batch_size=args.batch_size)
            for text, entities in zip(batch_texts, predictions):
                seen += 1
                if args.skip_blank and not text.strip():
                    skipped += 1
                    continue
                writer.write(text, entities)
            sys.stdout.flush()
    except (InputError, DataError) as error:
        writer.close()
        return fail("predict", str(error))
    writer.close()
    if not seen:
        return fail("predict", "no text given: pass TEXT arguments, --input FILE, or lines on standard input.")
    if skipped:
        print(f"bert-keras predict: skipped {skipped} blank input(s) of {seen}.", file=sys.stderr)
    return 0


def _check_reader_arguments(args, texts):
    """The reader's inputs, checked before TensorFlow loads: --question with --context, or records of two fields."""
    if texts:
        raise InputError(f"{args.model} is a reader: pass --question QUESTION --context CONTEXT (or --input FILE of "
                         "question and context columns), not TEXT arguments.")
    if (args.question is None) != (args.context is None):
        raise InputError("pass --question and --context together.")
    if args.question is not None and args.input:
        raise InputError("pass --question and --context, or --input FILE, not both.")
    if args.text_pair_column or args.skip_blank:
        flag = "--text-pair-column" if args.text_pair_column else "--skip-blank"
        raise InputError(f"{flag} applies to classifiers; {args.model} is a reader (its columns: --text-column "
                         "names the question's, default question; the context's is context).")


def _reader_records(args):
    """`(number, [question, context])` from --question/--context, --input (question and context columns) or stdin."""
    if args.question is not None:
        return iter([(1, [args.question, args.context])])
    reading = argparse.Namespace(**vars(args))
    if args.input and not args.text_column:  # a file's columns: question and context; lines: QUESTION<TAB>CONTEXT
        reading.text_column, reading.text_pair_column = "question", "context"
    try:
        return input_records(reading, pairs=True)
    except InputError:
        reading.text_column = reading.text_pair_column = None  # one record per line: the file has no columns
        return input_records(reading, pairs=True)


def _run_reader(args):
    """`predict` on a reader export: each question's answer in its context, in input order."""
    try:
        with working("predict", f"loading the reader in {args.model}"):
            from bert_keras.export import load_reader  # after the checks: they must not wait for TensorFlow

            reader = load_reader(args.model, warm_up="background")  # as the other kinds: see `_litert_or`
    except (OSError, ValueError, RuntimeError) as error:
        return fail("predict", f"cannot load a reader from {args.model}: {error}")
    if args.question is None and not args.input:
        prompt()
    out, seen, top_k = sys.stdout, 0, args.top_k or 1
    try:
        for batch in _batches(_reader_records(args), args.batch_size):
            questions, contexts = [fields[0] for _, fields in batch], [fields[1] for _, fields in batch]
            answers = reader.predict(questions, contexts, top_k=top_k, batch_size=args.batch_size)
            for question, answer in zip(questions, answers):
                seen += 1
                found = answer if top_k > 1 else [answer]
                if args.format == "tsv":
                    cells = [cell for a in found for cell in (f"{a['score']:.4f}", tsv_field(a["answer"]))]
                    out.write("\t".join(cells + [tsv_field(question)]) + "\n")
                else:
                    line = json_text({"question": question, "answers": [
                        dict(a, score=round(a["score"], 6)) for a in found]})
                    out.write(("[" if seen == 1 else ",") + line + "\n" if args.format == "json" else line + "\n")
            out.flush()
    except (InputError, DataError) as error:
        return fail("predict", str(error))
    if args.format == "json":
        out.write("[]\n" if not seen else "]\n")
    if not seen:
        return fail("predict", "no question given: pass --question and --context, --input FILE, or "
                    "QUESTION<TAB>CONTEXT lines on standard input.")
    return 0
