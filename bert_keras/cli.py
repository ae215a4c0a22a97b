"""The `bert-keras` command line: parse arguments, call the package, print results."""

import argparse
import os
import sys


def _presets(args):
    from bert_keras.presets import PRESETS, preset_names

    rows = [("name", "L", "H", "A", "vocab", "description")]
    for name in preset_names():
        config = PRESETS[name]["config"]
        rows.append(
            (
                name,
                str(config["num_layers"]),
                str(config["hidden_size"]),
                str(config["num_heads"]),
                str(config["vocab_size"]),
                PRESETS[name]["description"],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    return 0


def _convert(args):
    from bert_keras.checkpoints.to_hub import convert_to_hub

    def progress(index, total, text):
        print(f"[{index}/{total}] {text}", flush=True)

    try:
        loaded = convert_to_hub(args.source, args.out, seq_length=args.seq_length, overwrite=args.force, progress=progress)
    except FileExistsError as error:
        print(f"bert-keras convert: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as error:
        print(f"bert-keras convert: cannot convert {args.source}: {error}", file=sys.stderr)
        return 2
    print(loaded.summary)
    print(f"Wrote {os.path.join(args.out, 'encoder')} and {os.path.join(args.out, 'preprocess')}")
    return 0


def _build_parser():
    parser = argparse.ArgumentParser(prog="bert-keras", description="BERT for Keras 3 and TensorFlow.")
    commands = parser.add_subparsers(dest="command", required=True)
    presets = commands.add_parser("presets", help="list the built-in BERT configurations")
    presets.set_defaults(func=_presets)

    convert = commands.add_parser(
        "convert",
        help="convert a checkpoint (Hugging Face, Google BERT, keras-nlp) into TF Hub modules",
        description="Writes OUT/encoder and OUT/preprocess, TF Hub modules in TF Model Garden's format.",
    )
    convert.add_argument("source", help="checkpoint directory (or TF checkpoint prefix)")
    convert.add_argument("--out", required=True, help="output directory")
    convert.add_argument("--seq-length", type=int, default=128, help="default sequence length of the preprocess module")
    convert.add_argument("--force", action="store_true", help="replace existing modules in --out")
    convert.set_defaults(func=_convert)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = _build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
