"""`bert-keras embed` and `bert-keras index`: texts into sentence embeddings, a file or an index directory.

Also what `search` shares with them: the sentence model's arguments and its loading. The sentence encoder, its
loaders and the writers (TensorFlow) are imported where they are used, in a run: --help and the checks before
TensorFlow loads must not pay for them.
"""

import itertools
import os

from bert_keras.commands._common import (embedding_model, fail, progress, say,
                                         sentence_model_arguments)
from bert_keras.commands._io import InputError, input_records, prompt
from bert_keras.data.texts import DataError


def register(commands, common):
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
        sentence_model_arguments(command, required=True)
        if name == "embed":
            command.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed (default: --input, else standard input)")
            command.add_argument("--out", required=True, help="FILE.npy (a float32 array, one row per text) or FILE.jsonl "
                                 "(one {\"text\", \"embedding\"} per line); an existing file is never replaced")
            command.set_defaults(func=run_embed)
        else:
            command.set_defaults(func=run_index, texts=[])
            command.add_argument("--out", required=True, help="the index directory")
            command.add_argument("--force", action="store_true", help="replace an earlier index of bert-keras in --out")
        command.add_argument("--input", help="a file of texts: .csv, .tsv, .jsonl or .json with --text-column; any other "
                             "file: one text per line")
        command.add_argument("--text-column", help="column (or JSON key) of the text in --input (default: text)")
        command.add_argument("--delimiter", help="field separator of a .csv or .tsv --input (default: , or tab)")
        command.set_defaults(text_pair_column=None)


def _embedding_inputs(args):
    """The texts to embed, streamed (TEXT arguments, --input, or standard input); at least one, checked first."""
    records = input_records(args, pairs=False)
    first = next(records, None)
    if first is None:
        raise InputError("no text given: pass TEXT arguments, --input FILE, or lines on standard input.")
    return (fields[0] for _, fields in itertools.chain([first], records))


def run_embed(args):
    if os.path.splitext(args.out)[1].lower() not in (".npy", ".jsonl"):
        return fail("embed", f"--out must name a .npy or .jsonl file. Received: {args.out}")
    if os.path.lexists(args.out):
        return fail("embed", f"--out {args.out} exists; it is never replaced. Pick another name, or remove it yourself.")
    if not args.texts and not args.input:
        prompt()
    try:
        texts = _embedding_inputs(args)  # the first text read and checked before the model loads
    except (InputError, DataError) as error:
        return fail("embed", str(error))
    model = embedding_model(args, "embed")
    from bert_keras.embedding_files import write_embeddings

    try:
        count = write_embeddings(model, texts, args.out, batch_size=args.batch_size,
                                 progress=progress("embed"))
    except (InputError, DataError, OSError, ValueError) as error:
        return fail("embed", str(error))
    say(f"Wrote {count} embeddings of dimension {model.embedding_dim} to {args.out}")
    return 0


def run_index(args):
    try:
        texts = _embedding_inputs(args)  # the first text read and checked before TensorFlow and the model load
    except (InputError, DataError) as error:
        return fail("index", str(error))
    from bert_keras._files import OutputLockedError, check_target  # after the data: they import TensorFlow
    from bert_keras.search import build_index

    try:  # before any work: never embed for an index that cannot be written
        check_target(args.out, args.force, argument="--out", kind="sentence_index")
    except (OSError, ValueError) as error:
        return fail("index", str(error))
    model = embedding_model(args, "index")
    try:
        index = build_index(model, texts, args.out, batch_size=args.batch_size,
                            overwrite=args.force, input_name=args.input or "standard input", progress=progress("index"))
    except (InputError, DataError, OSError, ValueError, OutputLockedError) as error:
        return fail("index", str(error))
    say(f"Indexed {index.count} texts ({index.dimension}-dimensional vectors) in {args.out}")
    return 0
