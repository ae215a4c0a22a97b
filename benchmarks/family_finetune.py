"""Fine-tuning XLM-RoBERTa, DeBERTa-v3 and ModernBERT on the tweets: ours beside a plain torch loop on transformers (issue 57).

No pretrained checkpoint of these families is installable offline, so each run starts from the same small random
model: per family, a seeded random `*ForSequenceClassification` of transformers' own class (2 layers, hidden 128,
4 heads, intermediate 512; dropout 0 so that neither side draws random numbers inside the model), with the three
sentiment labels as its `id2label`, and a tokenizer of the family's kind trained here on other tweets, saved with
`save_pretrained`. Both sides read that folder: ours through `bert_keras.training.finetune_classifier` (the recipe
`bert-keras finetune` runs; the folder's head is imported, so both start from the same weights, head included),
transformers through `AutoModelForSequenceClassification` and `AutoTokenizer`.

The same data on both sides: tweets drawn with a seeded permutation (train, validation, test disjoint; texts up to
64 tokens), the same steps (epochs x ceil(train / batch)), batch size, peak learning rate and BERT's recipe on
both: AdamW (epsilon 1e-6, weight decay 0.01 on tensors of rank >= 2 only), linear warmup over 10% of the steps then
linear decay to 0, global gradient-norm clipping at 1.0, no head-only phase. The torch loop is Trainer-free: shuffle
per epoch (its own seeded permutation; ours shuffles with its own seed), forward, cross-entropy, backward, clip,
step. Reported: test accuracy and macro-F1 of each side, and the wall time of each run.

Run (from the repository root; needs the test extras):

    TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=. python benchmarks/family_finetune.py [--train 1000] [--epochs 2]

writes benchmarks/results/family_finetune.md.
"""

import argparse
import math
import os
import platform
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from run_all import cpu_description  # noqa: E402 - the one description of the CPU the benchmarks print

FAMILIES = ("xlm-roberta", "deberta-v3", "modernbert")
LABELS = ["negative", "neutral", "positive"]
SIZES = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512)
SEQ = 64
# One thread: accuracy is compared here, not speed, and two spinning threads collapse on a loaded 2-core machine.
TORCH_THREADS = 1


def save_family(name, folder, tokenizer_texts, seed=0):
    """The family's tokenizer trained on `tokenizer_texts` and a seeded random sequence classifier, saved."""
    import torch
    import transformers

    from tests.checkpoints._models import perturb_torch
    from tests.test_family_workflows import ACCENTED

    labels = dict(id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)})
    torch.manual_seed(seed)
    if name == "xlm-roberta":
        from tests.test_family_workflows import write_unigram_tokenizer

        config = transformers.XLMRobertaConfig(
            **SIZES, **labels, vocab_size=write_unigram_tokenizer(folder, tokenizer_texts, size=4000),
            max_position_embeddings=SEQ + 2, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0)
        model = transformers.XLMRobertaForSequenceClassification(config)
    elif name == "deberta-v3":
        from tests.text.deberta_tokenizers import write_deberta_tokenizer

        vocab_size = write_deberta_tokenizer(folder, tokenizer_texts + ACCENTED * 20, size=4000)
        config = transformers.DebertaV2Config(
            **SIZES, **labels, vocab_size=vocab_size, relative_attention=True, position_buckets=256,
            max_relative_positions=512, pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm",
            position_biased_input=False, type_vocab_size=0, max_position_embeddings=512, hidden_act="gelu",
            layer_norm_eps=1e-7, pad_token_id=0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            pooler_dropout=0.0)
        model = transformers.DebertaV2ForSequenceClassification(config)
    else:
        from tests.checkpoints.test_modernbert import save_modernbert_tokenizer

        vocab_size, vocab = save_modernbert_tokenizer(folder)
        specials = dict(pad_token_id=vocab["[PAD]"], cls_token_id=vocab["[CLS]"], sep_token_id=vocab["[SEP]"],
                        bos_token_id=vocab["[CLS]"], eos_token_id=vocab["[SEP]"])
        config = transformers.ModernBertConfig(
            **SIZES, **labels, **specials, vocab_size=vocab_size, global_attn_every_n_layers=3, local_attention=128,
            max_position_embeddings=8192, embedding_dropout=0.0, mlp_dropout=0.0, attention_dropout=0.0,
            classifier_dropout=0.0)
        model = transformers.ModernBertForSequenceClassification(config)
    perturb_torch(model, seed=seed)
    model.save_pretrained(str(folder))


def split_tweets(args):
    """(train, validation, test) as (texts, labels), drawn with a seeded permutation of the tweets, and the rest."""
    from bert_keras.text.corpora import load_tweets

    texts, labels = load_tweets()
    order = np.random.default_rng(args.seed).permutation(len(texts))
    cuts = np.cumsum([args.train, args.validation, args.test])
    parts = np.split(order, cuts)
    take = [([texts[i] for i in part], np.array([labels[i] for i in part], "int32")) for part in parts[:3]]
    return take, [texts[i] for i in parts[3][:3000]]


def scores(labels, predictions):
    """Accuracy and macro-F1 (each class's F1 averaged; a class never predicted nor present counts 0)."""
    f1 = []
    for k in range(len(LABELS)):
        tp = np.sum((predictions == k) & (labels == k))
        fp, fn = np.sum((predictions == k) & (labels != k)), np.sum((predictions != k) & (labels == k))
        f1.append(2 * tp / max(2 * tp + fp + fn, 1))
    return float(np.mean(predictions == labels)), float(np.mean(f1))


def run_ours(folder, data, args):
    from bert_keras.data.texts import LabelledText
    from bert_keras.training import finetune_classifier

    train, validation, test = (LabelledText(texts=t, labels=y, label_names=LABELS) for t, y in data)
    result = finetune_classifier(folder, train, validation=validation, test=test, seq_length=SEQ,
                                 batch_size=args.batch_size, head_epochs=0, epochs=args.epochs,
                                 learning_rate=args.learning_rate, dropout=0.0, seed=args.seed, verbose=0,
                                 report=lambda line: None)
    probabilities = result.model.predict(np.array(test.texts, dtype=object), batch_size=64, verbose=0)
    return scores(test.labels, np.asarray(probabilities).argmax(-1))


def run_transformers(folder, data, args):
    import torch
    import transformers

    torch.set_num_threads(TORCH_THREADS)
    torch.manual_seed(args.seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    (train_texts, train_labels), _, (test_texts, test_labels) = data
    steps_per_epoch = math.ceil(len(train_texts) / args.batch_size)
    total = steps_per_epoch * args.epochs
    warmup = int(0.1 * total)
    decayed = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.01}, {"params": others, "weight_decay": 0.0}],
                                  lr=args.learning_rate, eps=1e-6)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: step / max(warmup, 1) if step < warmup else max(0.0, (total - step) / max(total - warmup, 1)))

    def batch(texts):
        return tokenizer(texts, padding=True, truncation=True, max_length=SEQ, return_tensors="pt")

    rng = np.random.default_rng(args.seed)
    model.train()
    for _ in range(args.epochs):
        order = rng.permutation(len(train_texts))
        for step in range(steps_per_epoch):
            rows = order[step * args.batch_size:(step + 1) * args.batch_size]
            inputs = batch([train_texts[i] for i in rows])
            loss = model(**inputs, labels=torch.tensor(train_labels[rows], dtype=torch.long)).loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
    model.eval()
    predictions = []
    with torch.inference_mode():
        for begin in range(0, len(test_texts), 64):
            predictions.append(model(**batch(test_texts[begin:begin + 64])).logits.argmax(-1).numpy())
    return scores(test_labels, np.concatenate(predictions))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--validation", type=int, default=200)
    parser.add_argument("--test", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--output", default=os.path.join(HERE, "results", "family_finetune.md"))
    args = parser.parse_args()
    import tensorflow as tf
    import torch
    import transformers

    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    data, tokenizer_texts = split_tweets(args)
    majority = float(np.mean(data[2][1] == np.bincount(data[0][1]).argmax()))
    root = tempfile.mkdtemp(prefix="family_finetune_")
    rows = []
    for i, family in enumerate(args.families):
        folder = os.path.join(root, family)
        os.makedirs(folder)
        save_family(family, folder, tokenizer_texts, seed=args.seed)
        results = {}
        # Which side goes first alternates with the family (the machine is shared).
        for side in (("ours", "transformers") if i % 2 == 0 else ("transformers", "ours")):
            start = time.perf_counter()
            results[side] = (run_ours if side == "ours" else run_transformers)(folder, data, args) + (
                time.perf_counter() - start,)
            print(f"{family} {side}: accuracy {results[side][0]:.4f}, macro-F1 {results[side][1]:.4f}, "
                  f"{results[side][2]:.0f} s", flush=True)
        rows.append((family, results))
    steps = math.ceil(args.train / args.batch_size) * args.epochs
    lines = [
        "# Fine-tuning the three families on the tweets: ours beside a torch loop on transformers",
        "",
        f"Command: `TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=. python benchmarks/family_finetune.py --train {args.train} "
        f"--epochs {args.epochs} --batch-size {args.batch_size} --learning-rate {args.learning_rate}`",
        "",
        f"Machine: {cpu_description()}, {os.cpu_count()} cores, shared with other jobs (load average {load_before} "
        f"before the run, {' '.join(f'{x:.2f}' for x in os.getloadavg())} after it); Python "
        f"{platform.python_version()}, TensorFlow {tf.__version__}, torch {torch.__version__} ({TORCH_THREADS} "
        f"threads), transformers {transformers.__version__}.",
        "",
        f"Models: random seeded `*ForSequenceClassification` of transformers' own classes (2 layers, hidden 128, 4 "
        f"heads, intermediate 512, dropout 0), the same saved folder read by both sides (our finetune imports its "
        f"head). Data: tweets drawn with seed {args.seed}: {args.train} train, {args.validation} validation (ours "
        f"scores it each epoch; it does not steer training), {args.test} test; {SEQ} tokens at most. Training: "
        f"{steps} steps of {args.batch_size}, peak rate {args.learning_rate}, BERT's AdamW recipe on both, no "
        f"head-only phase. Test set majority class: accuracy {majority:.4f}. No pretraining on either side: the "
        f"scores say that both sides learn the same task to a like degree from the same start, not what a real "
        f"checkpoint reaches.",
        "",
        "| family | ours accuracy | transformers accuracy | ours macro-F1 | transformers macro-F1 | ours time (s) "
        "| transformers time (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for family, r in rows:
        lines.append(f"| {family} | {r['ours'][0]:.4f} | {r['transformers'][0]:.4f} | {r['ours'][1]:.4f} | "
                     f"{r['transformers'][1]:.4f} | {r['ours'][2]:.0f} | {r['transformers'][2]:.0f} |")
    lines += ["", "Times: the whole run of each side (reading the folder, training, scoring the test set; ours also "
              "builds and scores the validation set each epoch), on the shared machine."]
    with open(args.output, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"Wrote {args.output}")


if __name__ == "__main__":
    main()
