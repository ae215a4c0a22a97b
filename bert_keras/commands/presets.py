"""`bert-keras presets`: the built-in architectures as a table (plain data: no TensorFlow)."""

import re

from bert_keras.presets import PRESETS


def register(commands, common):
    presets = commands.add_parser("presets", parents=[common], help="list the built-in BERT architectures (no weights)")
    presets.set_defaults(func=run)


def _natural(name):
    """Sort key: digits by value, so `L-2` comes before `L-10`."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part]


def run(args):
    rows = [("name", "L", "H", "A", "vocab", "description")]
    for name in sorted(PRESETS, key=_natural):
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
    print("\nThese are architectures only: none carries weights. BertEncoder.from_architecture(name) builds one with "
          "random weights; pretrained weights come from a checkpoint (finetune --checkpoint, bert-keras convert).")
    return 0
