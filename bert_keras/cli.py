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


def _build_parser():
    parser = argparse.ArgumentParser(prog="bert-keras", description="BERT for Keras 3 and TensorFlow.")
    commands = parser.add_subparsers(dest="command", required=True)
    presets = commands.add_parser("presets", help="list the built-in BERT configurations")
    presets.set_defaults(func=_presets)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = _build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
