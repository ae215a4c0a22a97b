"""`bert-keras convert`: a checkpoint (Hugging Face, Google BERT, keras-nlp) into a pair of TF Hub modules.

The converter (TensorFlow) is imported in `run`: --help and the checks before TensorFlow loads must not pay for it.
"""

import os
import sys

from bert_keras.commands._common import at_least, fail, refused_output, working


def register(commands, common):
    convert = commands.add_parser(
        "convert", parents=[common],
        help="convert a checkpoint (Hugging Face of BERT or ELECTRA, DistilBERT, ALBERT, RoBERTa; Google BERT; "
        "keras-nlp) into TF Hub modules",
        description="Writes OUT/encoder and OUT/preprocess, TF Hub modules in TF Model Garden's format.",
    )
    convert.add_argument("source", help="checkpoint directory (or TF checkpoint prefix)")
    convert.add_argument("--out", required=True, help="output directory")
    convert.add_argument("--seq-length", type=at_least(3), help="default sequence length of the preprocess module (128, or the model's maximum if shorter)"
    )
    convert.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                         help="compute dtype of the encoder module (float32 inputs, outputs and variables either way); "
                         "bfloat16 needs a CPU with avx512_bf16 or amx_bf16")
    convert.add_argument("--force", action="store_true", help="replace existing modules in --out")
    convert.set_defaults(func=run)


def run(args):
    refusal = refused_output(args.out, args.force)
    if refusal:  # before TensorFlow loads
        return fail("convert", refusal)
    from bert_keras._files import OutputLockedError
    from bert_keras.export import convert_to_hub

    def progress(index, total, text):
        print(f"[{index}/{total}] {text}", flush=True)

    try:
        with working("convert", f"converting {args.source}"):
            loaded = convert_to_hub(args.source, args.out, seq_length=args.seq_length, overwrite=args.force,
                                    progress=progress, dtype=args.dtype)
    except (FileExistsError, OutputLockedError) as error:
        print(f"bert-keras convert: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as error:
        print(f"bert-keras convert: cannot convert {args.source}: {error}", file=sys.stderr)
        return 2
    print(loaded.summary)
    print(f"Wrote {os.path.join(args.out, 'encoder')} and {os.path.join(args.out, 'preprocess')}")
    return 0
