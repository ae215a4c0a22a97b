"""`bert-keras pretrain`: BERT pre-trained (masked LM + next sentence) on plain text, then written as Hub modules.

The training recipe and the file writer (TensorFlow) are imported in `run`: --help and the checks before TensorFlow
loads must not pay for them.
"""

import os

from bert_keras.commands._common import (at_least, distributed_arguments, fail, positive_float, say, strategy,
                                         warn_emulated_bfloat16)
from bert_keras.text.corpora import minilm_vocab_path


def register(commands, common):
    pretrain = commands.add_parser(
        "pretrain", parents=[common, distributed_arguments()],
        help="pre-train BERT (masked LM + next sentence) on plain text, then write Hub modules",
        description="Corpus format: one sentence per line, a blank line between documents. "
        "An interrupted run resumes from its last epoch when started again with the same arguments.",
    )
    pretrain.add_argument("--corpus", required=True, nargs="+", help="text file(s)")
    pretrain.add_argument("--out", required=True, help="output directory (backups, then encoder/ and preprocess/)")
    pretrain.add_argument("--vocab", help="vocab.txt (default: the uncased vocabulary of the installed MiniLM)")
    pretrain.add_argument("--cased", action="store_true", help="the vocabulary is cased")
    pretrain.add_argument("--preset", help="architecture from `bert-keras presets` (random weights)")
    pretrain.add_argument("--num-layers", type=at_least(1), default=2)
    pretrain.add_argument("--hidden-size", type=at_least(1), default=128)
    pretrain.add_argument("--num-heads", type=at_least(1), default=2)
    pretrain.add_argument("--intermediate-size", type=at_least(1))
    pretrain.add_argument("--seq-length", type=at_least(3), default=128)
    pretrain.add_argument("--batch-size", type=at_least(1), default=32)
    pretrain.add_argument("--epochs", type=at_least(1), default=1)
    pretrain.add_argument("--steps-per-epoch", type=at_least(1))
    pretrain.add_argument("--learning-rate", type=positive_float, default=1e-4)
    pretrain.add_argument("--max-predictions-per-seq", type=at_least(1), default=20)
    pretrain.add_argument("--whole-word-masking", action="store_true")
    pretrain.add_argument("--masked-lm-prob", type=float, default=0.15)
    pretrain.add_argument("--short-seq-prob", type=float, default=0.1)
    pretrain.add_argument("--dupe-factor", type=at_least(1), default=1, help="differently cut passes over the corpus")
    pretrain.add_argument("--warmup-steps", type=at_least(0), help="default: 10%% of all steps")
    pretrain.add_argument("--weight-decay", type=float, default=0.01)
    pretrain.add_argument("--validation-corpus", nargs="+")
    pretrain.add_argument("--seed", type=int, default=0)
    pretrain.add_argument("--dtype", choices=("float32", "mixed_bfloat16", "mixed_float16"),
                          help="Keras dtype policy of the model (default: float32); mixed_bfloat16 computes in bfloat16 "
                          "with float32 weights and losses")
    pretrain.add_argument("--force", action="store_true", help="replace existing modules in --out")
    pretrain.set_defaults(func=run)


def _model(args):
    """`run_pretraining`'s architecture arguments: a preset, or an encoder config from the size flags."""
    if args.preset:
        return dict(preset=args.preset)
    return dict(encoder_config=dict(num_layers=args.num_layers, hidden_size=args.hidden_size, num_heads=args.num_heads,
                                    intermediate_size=args.intermediate_size or 4 * args.hidden_size,
                                    max_sequence_length=max(args.seq_length, 512)))


def run(args):
    if not args.force:  # before TensorFlow loads; a backup in --out is resumed, modules are replaced only with --force
        for name in ("encoder", "preprocess"):
            if os.path.lexists(os.path.join(args.out, name)):
                return fail("pretrain", f"{os.path.join(args.out, name)} already exists; pass --force to replace the "
                            "modules in --out, or pick another --out.")
    from bert_keras._files import OutputLockedError
    from bert_keras.training import PretrainConfig, run_pretraining

    distribution = strategy(args, "pretrain")
    warn_emulated_bfloat16(args, "pretrain")
    vocab = args.vocab if args.vocab is not None else minilm_vocab_path()
    model = _model(args)

    def progress(step, total, logs):
        shown = ", ".join(f"{key} {value:.4f}" for key, value in sorted(logs.items()) if isinstance(value, float))
        say(f"step {step}/{total}: {shown}")

    say(f"Pre-training on {', '.join(args.corpus)} (vocab {vocab}); backups in {os.path.join(args.out, 'backup')}")
    try:
        config = PretrainConfig(
            seq_length=args.seq_length, batch_size=args.batch_size, epochs=args.epochs,
            steps_per_epoch=args.steps_per_epoch, learning_rate=args.learning_rate,
            max_predictions_per_seq=args.max_predictions_per_seq, whole_word_masking=args.whole_word_masking,
            masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob, dupe_factor=args.dupe_factor,
            warmup_steps=args.warmup_steps, weight_decay=args.weight_decay, seed=args.seed, dtype=args.dtype,
        )
        result = run_pretraining(
            args.corpus, args.out, vocab, config, do_lower_case=not args.cased, **model,
            validation_corpus=args.validation_corpus, progress=progress, overwrite=args.force, strategy=distribution,
        )
    except FileExistsError as error:
        return fail("pretrain", str(error))
    except (OSError, ValueError, OutputLockedError) as error:
        return fail("pretrain", str(error))
    if result.encoder_dir is not None:
        say(f"Wrote the Hub modules {result.encoder_dir} (with mlm) and {result.preprocess_dir}")
    return 0
