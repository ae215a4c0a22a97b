"""One benchmark measurement in a fresh process (called by `run_all.py`).

Each call builds one peer (our `BertEncoder`, keras-nlp's `BertBackbone`,
transformers' `BertModel` on torch, our exported Hub SavedModel, or a plain
GEMM), runs `--warmup` untimed steps (tracing, XLA compilation, allocator
warm-up), then `--repeats` timed steps, and prints one line
`RESULT {"seconds": [...], ...}` on stdout. Environment switches such as
`TF_ENABLE_ONEDNN_OPTS` are set by the caller before this process starts,
because TensorFlow reads them when it is imported.

    python benchmarks/worker.py infer ours --model minilm --batch 32 --seq 128
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

# Architectures, in our vocabulary of names.
MODELS = {
    "minilm": dict(vocab_size=30522, num_layers=6, hidden_size=384, num_heads=12, intermediate_size=1536),
    "base": dict(vocab_size=30522, num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072),
}
NUM_CLASSES = 2


def minilm_dir():
    from bert_keras.text.corpora import minilm_vocab_path

    return os.path.dirname(minilm_vocab_path())


LENGTHS = ("ragged", "full", "tweets")


def make_inputs(batch, seq, seed=0, lengths="ragged"):
    """The same inputs for every peer: ids, mask, segment ids, labels.

    `lengths`: "ragged" random ids, row lengths uniform in [seq/2, seq], the first
    row full (so no peer can trim the batch); "full" random ids, no padding;
    "tweets" the first `batch` tweets of the corpus, tokenized and padded to `seq`.
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, size=batch).astype("int32")
    if lengths == "tweets":
        from bert_keras.text import BertPreprocessor
        from bert_keras.text.corpora import load_tweets, minilm_vocab_path

        texts, _ = load_tweets()
        packed = BertPreprocessor(minilm_vocab_path(), seq_length=seq)(np.array(texts[:batch], dtype=object))
        ids, mask, types = (np.asarray(packed[key]) for key in ("input_word_ids", "input_mask", "input_type_ids"))
        return ids, mask, types, labels
    ids = rng.integers(1000, 30000, size=(batch, seq)).astype("int32")
    row_lengths = rng.integers(seq // 2, seq + 1, size=batch)
    row_lengths[0] = seq
    if lengths == "full":
        row_lengths[:] = seq
    mask = (np.arange(seq)[None, :] < row_lengths[:, None]).astype("int32")
    ids[:, 0], ids[mask == 0] = 101, 0
    types = np.zeros_like(ids)
    return ids, mask, types, labels


def computed_tokens(mask, packed):
    """Token rows the dense layers compute: all, or the packed ones (real + first of each row)."""
    if not packed:
        return int(mask.size)
    return int(((mask > 0) | (np.arange(mask.shape[1]) == 0)).sum())


def busy_cpu_seconds():
    """CPU seconds the whole machine has been busy (all processes; /proc/stat), or None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


# Share of the machine's CPU time that other processes used during the timed steps (set by `timed`).
OTHERS_CPU_SHARE = {}


def _others_share(busy, own, wall):
    """Share of all cores that other processes used since `(busy, own, wall)` was taken."""
    own_now = os.times()
    own_cpu = (own_now.user + own_now.system) - (own.user + own.system)
    others = busy_cpu_seconds() - busy - own_cpu
    return max(0.0, others / ((time.perf_counter() - wall) * os.cpu_count())), own_cpu


def timed(step, warmup, repeats):
    """Seconds of each timed step; also records, per step, the share of the cores other processes used."""
    for _ in range(warmup):
        step()
    seconds, step_others = [], []
    first = busy_cpu_seconds(), os.times(), time.perf_counter()
    for _ in range(repeats):
        before = busy_cpu_seconds(), os.times(), time.perf_counter()
        step()
        seconds.append(time.perf_counter() - before[2])
        if before[0] is not None:
            step_others.append(round(_others_share(*before)[0], 3))
    if first[0] is not None:
        others, own_cpu = _others_share(*first)
        OTHERS_CPU_SHARE.update(
            others_cpu_share=others, own_cpu_seconds_per_step=own_cpu / repeats, step_others=step_others
        )
    return seconds


# --- peers ------------------------------------------------------------------


def ours_encoder(args, training):
    from bert_keras import BertEncoder

    if args.model == "minilm" and not args.random_weights:
        from bert_keras.checkpoints import load_checkpoint

        # dropout 0.1 from config.json
        encoder = load_checkpoint(minilm_dir(), with_heads=False, dtype=args.dtype).encoder
        if args.no_pack:
            padded = BertEncoder.from_config({**encoder.get_config(), "pack_tokens": False})
            padded.set_weights(encoder.get_weights())
            encoder = padded
        return encoder
    return BertEncoder(
        **MODELS[args.model], dropout=0.1, attention_dropout=0.1, pack_tokens=not args.no_pack, dtype=args.dtype
    )


def kerasnlp_backbone(args):
    import keras_hub

    config = MODELS[args.model]
    return keras_hub.models.BertBackbone(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        dropout=0.1,
        max_sequence_length=512,
        num_segments=2,
        dtype=args.dtype,
    )


def keras_inputs(peer, ids, mask, types):
    if peer == "kerasnlp":
        return {"token_ids": ids, "segment_ids": types, "padding_mask": mask}
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def keras_model(args, training):
    """Our encoder or keras-nlp's backbone; with a 2-class head and Adam for training."""
    import keras

    if args.peer == "ours":
        backbone = ours_encoder(args, training)
    else:
        backbone = kerasnlp_backbone(args)
    if not training:
        model = backbone
    else:
        inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in backbone.input}
        pooled = backbone(inputs)["pooled_output"]
        logits = keras.layers.Dense(NUM_CLASSES, name="logits")(pooled)
        model = keras.Model(inputs, logits)
    model.compile(
        optimizer=keras.optimizers.Adam(2e-5),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=args.jit,
    )
    return model


def bench_keras(args, training):
    import tensorflow as tf

    ids, mask, types, labels = make_inputs(args.batch, args.seq, lengths=args.lengths)
    model = keras_model(args, training)
    x = {k: tf.constant(v) for k, v in keras_inputs(args.peer, ids, mask, types).items()}
    if training:
        y = tf.constant(labels)
        step = lambda: model.train_on_batch(x, y)  # noqa: E731
    else:
        step = lambda: model.predict_on_batch(x)  # noqa: E731
    packed = args.peer == "ours" and not args.no_pack and not model.jit_compile
    extra = {"jit_compile": bool(model.jit_compile), "computed_tokens": computed_tokens(mask, packed)}
    return timed(step, args.warmup, args.repeats), extra


def bench_torch(args, training):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    bf16 = args.dtype == "mixed_bfloat16"
    # bf16 by autocast (float32 weights, as Keras' mixed policy), or by bf16 weights (`model.to(bfloat16)`).
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=bf16 and not args.torch_bf16_weights)
    if args.model == "minilm" and not args.random_weights:
        model = BertModel.from_pretrained(minilm_dir(), add_pooling_layer=True, attn_implementation=args.torch_attention)
    else:
        c = MODELS[args.model]
        model = BertModel(
            BertConfig(
                vocab_size=c["vocab_size"],
                hidden_size=c["hidden_size"],
                num_hidden_layers=c["num_layers"],
                num_attention_heads=c["num_heads"],
                intermediate_size=c["intermediate_size"],
            ),
            attn_implementation=args.torch_attention,
        )
    model.to(device)
    if bf16 and args.torch_bf16_weights:
        model.to(torch.bfloat16)
    ids, mask, types, labels = make_inputs(args.batch, args.seq, lengths=args.lengths)
    x = dict(
        input_ids=torch.from_numpy(ids.astype("int64")).to(device),
        attention_mask=torch.from_numpy(mask.astype("int64")).to(device),
        token_type_ids=torch.from_numpy(types.astype("int64")).to(device),
    )
    extra = {
        "bf16": ("weights" if args.torch_bf16_weights else "autocast") if bf16 else None,
        "threads": torch.get_num_threads(),
        "attn": model.config._attn_implementation,
        "device": device,
        "computed_tokens": computed_tokens(mask, packed=False),
    }
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if not training:
        model.eval()

        def step():
            with torch.inference_mode(), autocast:
                model(**x)
            sync()

        return timed(step, args.warmup, args.repeats), extra
    model.train()
    head = torch.nn.Linear(model.config.hidden_size, NUM_CLASSES).to(device)
    optimizer = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=2e-5)
    y = torch.from_numpy(labels.astype("int64")).to(device)

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = torch.nn.functional.cross_entropy(head(model(**x).pooler_output).float(), y)
        loss.backward()
        optimizer.step()
        sync()

    return timed(train_step, args.warmup, args.repeats), extra


def bench_savedmodel(args):
    """Our encoder in memory (a tf.function, as the export traces it) or its exported Hub module."""
    import tensorflow as tf

    ids, mask, types, _ = make_inputs(args.batch, args.seq, lengths=args.lengths)
    x = {k: tf.constant(v) for k, v in keras_inputs("ours", ids, mask, types).items()}
    if args.peer == "memory":
        encoder = ours_encoder(args, training=False)
        call = tf.function(lambda inputs: encoder(inputs, training=False))
    else:
        from bert_keras import hub

        module = hub.load(args.path) if hasattr(hub, "load") else tf.saved_model.load(args.path)
        call = lambda inputs: module(inputs, training=False)  # noqa: E731
    step = lambda: call(x)["sequence_output"].numpy()  # noqa: E731
    return timed(step, args.warmup, args.repeats), {"computed_tokens": computed_tokens(mask, packed=True)}


def export_module(args):
    from bert_keras.checkpoints import load_checkpoint
    from bert_keras.export import export_encoder

    loaded = load_checkpoint(minilm_dir(), with_heads=False)
    export_encoder(loaded.encoder, args.path, loaded.vocab_file, loaded.do_lower_case, overwrite=True)
    return [], {"path": args.path}


def bench_gemm(args):
    """`(m, k) x (k, n)` with `--gemm-shape m,k,n` (default square, of size `--seq`); bf16 for `mixed_bfloat16`."""
    m, k, n = (int(v) for v in args.gemm_shape.split(",")) if args.gemm_shape else (args.seq,) * 3
    bf16 = args.dtype == "mixed_bfloat16"
    extra = {"shape": [m, k, n], "flops": 2 * m * k * n}
    if args.peer == "torch":
        import torch

        dtype = torch.bfloat16 if bf16 else torch.float32
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        return timed(lambda: a @ b, args.warmup, args.repeats), {**extra, "threads": torch.get_num_threads()}
    import tensorflow as tf

    dtype = tf.bfloat16 if bf16 else tf.float32
    a, b = tf.cast(tf.random.normal((m, k)), dtype), tf.cast(tf.random.normal((k, n)), dtype)
    matmul = tf.function(tf.matmul, jit_compile=args.jit)
    return timed(lambda: matmul(a, b).numpy(), args.warmup, args.repeats), extra


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["infer", "train", "savedmodel", "export", "gemm"])
    parser.add_argument("peer", help="ours | kerasnlp | torch (infer/train); memory | hub (savedmodel); tf | torch (gemm)")
    parser.add_argument("--model", choices=sorted(MODELS), default="minilm")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--jit", action="store_true", help="Keras peers: compile(jit_compile=True) (XLA)")
    parser.add_argument("--random-weights", action="store_true")
    parser.add_argument("--lengths", choices=LENGTHS, default="ragged", help="input row lengths (see make_inputs)")
    parser.add_argument("--no-pack", action="store_true", help="ours: BertEncoder(pack_tokens=False)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "mixed_bfloat16", "bfloat16"],
                        help="Keras dtype policy; torch: bf16 autocast (or --torch-bf16-weights); gemm: bf16 operands")
    parser.add_argument("--torch-bf16-weights", action="store_true",
                        help="torch with mixed_bfloat16: model.to(bfloat16) instead of autocast")
    parser.add_argument("--torch-attention", default="sdpa", choices=["sdpa", "eager"],
                        help="transformers' attention implementation")
    parser.add_argument("--gemm-shape", default=None, help="gemm: m,k,n (default: square of size --seq)")
    parser.add_argument("--path", default=None, help="SavedModel directory (savedmodel, export)")
    args = parser.parse_args()

    start = time.perf_counter()
    if args.task == "gemm":
        seconds, extra = bench_gemm(args)
    elif args.task == "export":
        seconds, extra = export_module(args)
    elif args.task == "savedmodel":
        seconds, extra = bench_savedmodel(args)
    elif args.peer == "torch":
        seconds, extra = bench_torch(args, training=args.task == "train")
    else:
        seconds, extra = bench_keras(args, training=args.task == "train")
    extra["process_seconds"] = time.perf_counter() - start
    extra.update(OTHERS_CPU_SHARE)  # other processes' share of the cores while this one was timed
    print("RESULT " + json.dumps({"seconds": seconds, **extra}), flush=True)


if __name__ == "__main__":
    main()
