"""`bert-keras litert`: an export (classifier, tagger, reader, sentence encoder) into one LiteRT `.tflite` file.

Everything that can be checked without TensorFlow is checked before it loads (the export's kind and every manifest
value the conversion reads, --out); the conversion (TensorFlow) is imported in `run` after them, and checks the
manifest against the graph before converting.
"""

import os

from bert_keras._locks import OutputLockedError
from bert_keras.commands._common import fail, say, working
from bert_keras.export.litert import check_litert_target, served_manifest  # no TensorFlow
from bert_keras.export.manifest import ExportError


def register(commands, common):
    litert = commands.add_parser(
        "litert", parents=[common],
        help="convert an exported classifier, tagger, reader or sentence encoder into a LiteRT .tflite file from raw "
        "strings",
        description="Writes --out, a .tflite file whose `serve` signature takes raw strings (Hugging Face's BERT "
        "normalisation and WordPiece in tensorflow-text's LiteRT kernels) and gives what the export serves, with "
        "`serve_ids` (token ids, builtin ops only) and `preprocess`; --out.json beside it records what it is. "
        "Serve it with bert-keras predict --model FILE.tflite, or bert_keras.export.load_litert(FILE).",
    )
    litert.add_argument("--model", required=True, help="an export of export_classifier, export_tagger, "
                        "export_reader or export_sentence_encoder (bert-keras finetune and demo write them)")
    litert.add_argument("--out", required=True, help="the .tflite file to write")
    litert.add_argument("--quantize", choices=("int8",), help="dynamic-range int8 weights (about a quarter of the "
                        "size, faster on CPUs; check the accuracy on your data)")
    litert.add_argument("--force", action="store_true", help="replace --out if bert-keras litert wrote it")
    litert.set_defaults(func=run)


def run(args):
    try:
        if not args.out.endswith(".tflite"):
            raise ExportError(f"--out {args.out}: expected a file name ending in .tflite.")
        served_manifest(args.model)
        check_litert_target(args.out, overwrite=args.force, argument="--out")
    except (ExportError, OSError, ValueError) as error:
        return fail("litert", str(error))
    try:
        with working("litert", f"converting {args.model}"):
            from bert_keras.export.litert import export_litert  # after the checks: they must not wait for TensorFlow

            export_litert(args.model, args.out, quantize=args.quantize, overwrite=args.force)
    except (OSError, ValueError, OutputLockedError) as error:  # ExportError: a manifest the graph contradicts
        return fail("litert", f"cannot convert {args.model}: {error}")
    say(f"Wrote {args.out} ({os.path.getsize(args.out) / 1e6:.1f} MB) and {args.out}.json")
    return 0
