"""The commands of `bert-keras`, one module per command (or per small group of commands), as transformers' `commands/`.

Each module's `register(commands, common)` adds its parser(s) to the `commands` subparsers (`common`: the parent
parser of -v/-q), with its arguments and `func=run`; its checks run before TensorFlow loads, and its `run(args)`
returns the exit status. `bert_keras.cli` only gathers them. What several commands share lives in `_common`
(messages, argument types, verbosity, the strategy) and `_io` (TEXT / --input / standard input, tsv and JSON output).
"""
