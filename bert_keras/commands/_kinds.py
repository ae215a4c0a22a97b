"""The kinds of export `predict` and `evaluate` serve, each as the few things in which it differs from the others.

Both commands run one sequence for every kind (`predict.run`, `evaluate.run`). A kind, made for one run from its
parsed arguments, says what else it refuses before TensorFlow loads, what one of its records is, how its model
answers a batch of records and how one answer prints (a tsv line, a JSON value: `_io.Output` writes either);
a kind that is scored says how `evaluate` reads its data, scores it and writes its report.

The loaders, the scorers and the report writers (TensorFlow, matplotlib) are imported inside the methods that use
them: --help and the checks before TensorFlow loads must not pay for them.
"""

import argparse
import json
import os

from bert_keras.commands._common import working
from bert_keras.commands._io import READER_ARGUMENTS, InputError, input_records, tsv_field
from bert_keras.data.texts import read_labelled_file
from bert_keras.entities import entity_scores, format_entity_report
from bert_keras.export.manifest import CLASSIFIER, READER, TAGGER
from bert_keras.data.tagged import read_tagged_file

ENTITY_REPORT_FILE = "evaluation.json"


class _Kind:
    """What every kind does alike; a kind names itself (`name`) and what it says when nothing came."""

    name = None
    nothing = "no text given: pass TEXT arguments, --input FILE, or lines on standard input."

    def __init__(self, args):
        self.args = args

    def load(self, command, warm_up):
        """The export of --model, a directory or a .tflite file, loaded through the one door (`export.load`).

        Says so on standard error while it takes long; a model that cannot be loaded is an `InputError` whose
        message names the kind and the export.
        """
        model = self.args.model
        try:
            with working(command, f"loading the {self.name} in {model}"):
                from bert_keras.export.opening import load  # a .tflite file loads without TensorFlow

                return load(model, kind=self.name, warm_up=warm_up)
        except (OSError, ValueError, RuntimeError) as error:
            raise InputError(f"cannot load a {self.name} from {model}: {error}") from None

    # --- predict ---

    def check_arguments(self, texts):
        """Refuses, before the input is read, what this kind does not take (an `InputError`)."""
        if self.args.question is not None or self.args.context is not None:
            raise InputError(f"--question and --context apply to readers; {self.args.model} is a {self.name} export.")

    def check_before_loading(self):
        """Refuses what this kind does not take, once the input's start is read, before the model loads."""

    def records(self, model=None):
        """`(number, fields)` of TEXT arguments, --input or standard input, streamed, for `model` to answer.

        Before the model loads (`model` None: the check of --input's start), --text-pair-column says whether the
        records are pairs.
        """
        return input_records(self.args, bool(self.args.text_pair_column) if model is None else self.pairs(model))

    @staticmethod
    def pairs(model):
        """Whether `model` answers pairs of texts."""
        return False

    def check_model(self, model):
        """What makes the loaded `model` refuse these arguments (a message), or None."""
        return None

    # --- evaluate ---

    def check_scored(self, model):
        """What keeps the loaded `model` from being scored on these arguments (a message), or None."""
        return None


class Classifier(_Kind):
    """A classifier: a record is a text (or a text and its pair); an answer its label, score and scores."""

    name = CLASSIFIER

    @staticmethod
    def pairs(model):
        return len(model.inputs) == 2

    def check_model(self, model):
        if self.args.top_k is not None and self.args.top_k > model.num_classes:
            return f"--top-k {self.args.top_k} exceeds the classifier's {model.num_classes} classes."
        return None

    def answer(self, model, records):
        """Each record's prediction; a blank text gets label None."""
        pairs = self.pairs(model)
        return model.predict([tuple(fields) if pairs else fields[0] for fields in records], top_k=self.args.top_k,
                             batch_size=self.args.batch_size)

    def tsv(self, fields, prediction):
        """LABEL<TAB>SCORE (--top-k K: K pairs, an empty pair each for a blank text), then the record's fields."""
        top_k = self.args.top_k or 1
        if prediction["label"] is None:
            scores = ["", ""] * top_k
        else:
            best = sorted(prediction["scores"].items(), key=lambda item: -item[1])[:top_k]
            scores = [cell for name, score in best for cell in (tsv_field(name), f"{score:.4f}")]
        return "\t".join(scores + [tsv_field(field) for field in fields])

    def json(self, fields, prediction):
        record = {"text": fields[0]}
        if len(fields) == 2:
            record["text_pair"] = fields[1]
        if prediction["label"] is None:
            record.update(prediction)
        else:
            record.update(label=prediction["label"], score=round(prediction["score"], 6),
                          scores={name: round(score, 6) for name, score in prediction["scores"].items()})
        return record

    # --- evaluate ---

    names_are = "the classifier's labels"

    def read_data(self, names=None):
        """The labelled examples of --data (labels checked against `names`, the model's, when given)."""
        args = self.args
        return read_labelled_file(args.data, text_column=args.text_column, label_column=args.label_column,
                                  text_pair_column=args.text_pair_column, label_names=names,
                                  delimiter=args.delimiter, arguments=READER_ARGUMENTS)

    @staticmethod
    def names(model):
        return model.label_names

    def check_scored(self, model):
        if self.pairs(model) and not self.args.text_pair_column:
            return f"{self.args.model} classifies text pairs: pass --text-pair-column."
        return None

    def score(self, model, data):
        from bert_keras.evaluate import classification_report  # TensorFlow: loaded with the model

        probabilities = model.predict_proba(data.texts, data.text_pairs, batch_size=self.args.batch_size)
        return classification_report(data.labels, probabilities, model.label_names)

    @staticmethod
    def format_report(report):
        from bert_keras.evaluate import format_report  # TensorFlow: loaded with the model

        return format_report(report)

    def write_report(self, report):
        """Writes evaluation.json and confusion_matrix.png in --out; returns their paths."""
        from bert_keras.evaluate import write_report  # TensorFlow and matplotlib: loaded with the model

        return write_report(self.args.out, report, overwrite=self.args.force)


class Tagger(_Kind):
    """A tagger: a record is a text; an answer its entities (--aggregation)."""

    name = TAGGER

    def check_before_loading(self):
        if self.args.top_k is not None or self.args.text_pair_column:
            flag = "--top-k" if self.args.top_k is not None else "--text-pair-column"
            raise InputError(f"{flag} applies to classifiers; {self.args.model} is a tagger (use --aggregation).")

    def answer(self, model, records):
        return model.predict([fields[0] for fields in records], aggregation=self.args.aggregation,
                             batch_size=self.args.batch_size)

    @staticmethod
    def tsv(fields, entities):
        return marked_text(fields[0], entities)

    @staticmethod
    def json(fields, entities):
        return {"text": fields[0], "entities": entities}

    # --- evaluate ---

    names_are = "the tagger's tags"

    def read_data(self, names=None):
        """The tagged sentences of --data (tags checked against `names`, the model's, when given)."""
        return read_tagged_file(self.args.data, tag_names=names)

    @staticmethod
    def names(model):
        return model.tag_names

    def score(self, model, data):
        """Entity scores of the words' tags (each word's first piece's tag, as the tagger is trained)."""
        from bert_keras.export.tagger import sentence_tags  # TensorFlow: loaded with the commands' reports

        # The export's or the .tflite file's `tag_pieces`: each engine's tagger is read one way.
        predicted = sentence_tags(model.tag_pieces, data.words, model.tag_names, batch_size=self.args.batch_size)
        try:
            return entity_scores(data.tags, predicted, scheme=data.scheme)
        except ValueError as error:  # a tag of the model's outside B-, I-, E-, S-
            raise InputError(f"cannot score the tagger's tags {model.tag_names}: {error}") from None

    @staticmethod
    def format_report(scores):
        return format_entity_report(scores)

    def write_report(self, scores):
        """Writes evaluation.json in --out, staged; returns its name."""
        from bert_keras._files import staged_directory  # TensorFlow: loaded with the model

        with staged_directory(self.args.out, self.args.force, kind="evaluation", argument="--out") as staging:
            with open(os.path.join(staging, ENTITY_REPORT_FILE), "w") as f:
                json.dump(scores, f, indent=2)
        return [ENTITY_REPORT_FILE]


class Reader(_Kind):
    """A reader: a record is a question and its context; an answer its --top-k answers (one by default)."""

    name = READER
    nothing = ("no question given: pass --question and --context, --input FILE, or QUESTION<TAB>CONTEXT lines on "
               "standard input.")

    def check_arguments(self, texts):
        """--question with --context, or records of two fields; no TEXT arguments."""
        args = self.args
        if texts:
            raise InputError(f"{args.model} is a reader: pass --question QUESTION --context CONTEXT (or --input FILE "
                             "of question and context columns), not TEXT arguments.")
        if (args.question is None) != (args.context is None):
            raise InputError("pass --question and --context together.")
        if args.question is not None and args.input:
            raise InputError("pass --question and --context, or --input FILE, not both.")
        if args.text_pair_column or args.skip_blank:
            flag = "--text-pair-column" if args.text_pair_column else "--skip-blank"
            raise InputError(f"{flag} applies to classifiers; {args.model} is a reader (its columns: --text-column "
                             "names the question's, default question; the context's is context).")

    def records(self, model=None):
        """`(number, [question, context])` from --question/--context, --input (its columns) or standard input."""
        if self.args.question is not None:
            return iter([(1, [self.args.question, self.args.context])])
        reading = argparse.Namespace(**vars(self.args))
        if reading.input and not reading.text_column:  # a file's columns: question and context; lines: Q<TAB>C
            reading.text_column, reading.text_pair_column = "question", "context"
        try:
            return input_records(reading, pairs=True)
        except InputError:
            reading.text_column = reading.text_pair_column = None  # one record per line: the file has no columns
            return input_records(reading, pairs=True)

    def answer(self, model, records):
        """Each question's answers, a list (of one, without --top-k)."""
        top_k = self.args.top_k or 1
        answers = model.predict([fields[0] for fields in records], [fields[1] for fields in records], top_k=top_k,
                                batch_size=self.args.batch_size)
        return [found if top_k > 1 else [found] for found in answers]

    @staticmethod
    def tsv(fields, answers):
        """SCORE<TAB>ANSWER per answer, then the question."""
        cells = [cell for answer in answers for cell in (f"{answer['score']:.4f}", tsv_field(answer["answer"]))]
        return "\t".join(cells + [tsv_field(fields[0])])

    @staticmethod
    def json(fields, answers):
        return {"question": fields[0], "answers": [dict(answer, score=round(answer["score"], 6)) for answer in answers]}


KINDS = {kind.name: kind for kind in (Classifier, Tagger, Reader)}


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
