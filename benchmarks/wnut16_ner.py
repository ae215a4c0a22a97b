"""Named entities in tweets: `finetune_tagger` against transformers fine-tuned the same way on torch, in one run.

Data: the WNUT-2016 training tweets (`bert_keras.data.tagged.load_wnut16`: 2,394
tweets, ten entity types, BIO), split by a seeded shuffle into 80% train, 10%
validation and 10% test (the same split for both). Checkpoint: the installed
all-MiniLM-L6-v2 (6 layers, hidden 384). Recipe for both, step for step:
phase 1, the head alone (encoder frozen) for 1 epoch with Adam 1e-3; phase 2,
everything for 3 epochs with AdamW (peak 5e-5, 10% linear warmup then linear
decay, weight decay 0.01 on matrices, gradient norm clipped at 1.0); batch 16;
the validation loss after every epoch; the first piece of each word carries
its tag, the other pieces none. Score: conlleval's entity-level micro F1 on the
test tweets (`bert_keras.entities.entity_scores`, equal to seqeval), each word
tagged by its first piece.

Timed: the training (both phases, validation included) of each; ours also as
the whole command a user runs (`bert-keras finetune --task ner`, from the
process start to the export written, start-up and export included).

    python benchmarks/wnut16_ner.py --output benchmarks/results/wnut16_ner.md
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bert_keras.entities import entity_scores  # noqa: E402
from bert_keras.data.tagged import load_wnut16  # noqa: E402
from bert_keras.text.corpora import minilm_vocab_path  # noqa: E402

HEAD_EPOCHS, EPOCHS, BATCH, RATE, HEAD_RATE, SEQ_LENGTH = 1, 3, 16, 5e-5, 1e-3, 128


def _cpu():
    with open("/proc/cpuinfo") as f:
        text = f.read()
    model = re.search(r"model name\s*:\s*(.*)", text)
    flags = sorted(set(re.findall(r"avx512_bf16|avx512_vnni|avx512_vp2intersect|avx512f|amx_bf16|avx2", text)))
    return f"{model.group(1) if model else 'unknown CPU'}, {os.cpu_count()} cores; {' '.join(flags)}"


def split(seed):
    data = load_wnut16()
    order = np.random.default_rng(seed).permutation(len(data))
    n_test = n_validation = len(data) // 10
    parts = order[: n_test], order[n_test : n_test + n_validation], order[n_test + n_validation :]
    test, validation, train = (data.subset(np.sort(part)) for part in parts)
    return train, validation, test


def write_conll(data, path):
    with open(path, "w", encoding="utf-8") as f:
        for words, tags in zip(data.words, data.tags):
            f.write("".join(f"{word}\t{tag}\n" for word, tag in zip(words, tags)) + "\n")
    return path


def run_ours(train, validation, test, work, seed):
    """`bert-keras finetune --task ner` in a process of its own; returns (f1, training seconds, command seconds)."""
    paths = [write_conll(part, os.path.join(work, f"{name}.conll"))
             for name, part in (("train", train), ("validation", validation), ("test", test))]
    out = os.path.join(work, "tagger")
    command = [sys.executable, "-m", "bert_keras.cli", "finetune", "--task", "ner", "--train", paths[0],
               "--validation", paths[1], "--test", paths[2], "--out", out, "--seq-length", str(SEQ_LENGTH),
               "--batch-size", str(BATCH), "--head-epochs", str(HEAD_EPOCHS), "--epochs", str(EPOCHS),
               "--learning-rate", str(RATE), "--seed", str(seed)]
    started = time.time()
    subprocess.run(command, check=True, env={**os.environ, "CI": "true"})
    seconds = time.time() - started
    with open(os.path.join(out, "assets.extra", "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    return metrics["test"]["f1"], metrics["fit_seconds"], seconds


def _torch_batches(tokenizer, data, tag_ids, order, batch):
    import torch

    for begin in range(0, len(order), batch):
        rows = [int(i) for i in order[begin : begin + batch]]
        encoded = tokenizer([data.words[i] for i in rows], is_split_into_words=True, truncation=True,
                            max_length=SEQ_LENGTH, padding=True, return_tensors="pt")
        labels = []
        for position, i in enumerate(rows):
            previous, row = None, []
            for word in encoded.word_ids(position):
                row.append(-100 if word is None or word == previous else tag_ids[i][word])
                previous = word
            labels.append(row)
        yield rows, encoded, torch.tensor(labels)


def _torch_epoch(model, optimizer, scheduler, tokenizer, data, tag_ids, rng):
    import torch

    model.train()
    for _, encoded, labels in _torch_batches(tokenizer, data, tag_ids, rng.permutation(len(data)), BATCH):
        loss = model(**encoded, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad()


def _torch_loss(model, tokenizer, data, tag_ids):
    import torch

    model.eval()
    losses = []
    with torch.no_grad():
        for _, encoded, labels in _torch_batches(tokenizer, data, tag_ids, np.arange(len(data)), 64):
            losses.append(float(model(**encoded, labels=labels).loss))
    return float(np.mean(losses))


def _torch_predict(model, tokenizer, data, tag_names):
    import torch

    model.eval()
    predicted = [None] * len(data)
    with torch.no_grad():
        for rows, encoded, _ in _torch_batches(tokenizer, data, [[0] * len(w) for w in data.words], np.arange(len(data)), 64):
            best = model(**encoded).logits.argmax(-1).numpy()
            for position, i in enumerate(rows):
                tags, previous = ["O"] * len(data.words[i]), None
                for piece, word in enumerate(encoded.word_ids(position)):
                    if word is not None and word != previous:
                        tags[word] = tag_names[best[position, piece]]
                    previous = word
                predicted[i] = tags
    return predicted


def run_torch(train, validation, test, seed):
    """transformers' BertForTokenClassification on torch, the same recipe; returns (f1, training seconds)."""
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(seed)
    folder, names = os.path.dirname(minilm_vocab_path()), list(train.tag_names)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.BertForTokenClassification.from_pretrained(
        folder, num_labels=len(names), id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    rng, started = np.random.default_rng(seed), time.time()
    for parameter in model.bert.parameters():
        parameter.requires_grad = False
    head = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=HEAD_RATE)
    for _ in range(HEAD_EPOCHS):
        _torch_epoch(model, head, None, tokenizer, train, train.tag_ids, rng)
        _torch_loss(model, tokenizer, validation, validation.tag_ids)
    for parameter in model.parameters():
        parameter.requires_grad = True
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}], lr=RATE)
    total = EPOCHS * -(-len(train) // BATCH)
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * total), total)
    for _ in range(EPOCHS):
        _torch_epoch(model, optimizer, scheduler, tokenizer, train, train.tag_ids, rng)
        _torch_loss(model, tokenizer, validation, validation.tag_ids)
    seconds = time.time() - started
    scores = entity_scores(test.tags, _torch_predict(model, tokenizer, test, names))
    return scores["f1"], seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split-seed", type=int, default=0, help="the seed of the train / validation / test split")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="training seeds: each runs both (ours: finetune --seed; torch: torch.manual_seed)")
    parser.add_argument("--output", help="write the markdown table here too")
    args = parser.parse_args(argv)
    train, validation, test = split(args.split_seed)
    rows, scores = [], {"ours": [], "torch": []}
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as work:
            ours_f1, ours_fit, ours_command = run_ours(train, validation, test, work, seed)
        torch_f1, torch_fit = run_torch(train, validation, test, seed)
        scores["ours"].append(ours_f1)
        scores["torch"].append(torch_f1)
        rows += [f"| {seed} | bert_keras `finetune --task ner` | {ours_f1:.4f} | {ours_fit:.0f} | {ours_command:.0f} | "
                 f"{ours_fit / torch_fit:.2f}x |",
                 f"| {seed} | transformers BertForTokenClassification (torch) | {torch_f1:.4f} | {torch_fit:.0f} | - | 1.00x |"]
    lines = [
        f"WNUT-2016 tweets: {len(train)} train / {len(validation)} validation / {len(test)} test (split seed "
        f"{args.split_seed}); all-MiniLM-L6-v2; head {HEAD_EPOCHS} epoch (Adam {HEAD_RATE:g}) + {EPOCHS} epochs "
        f"(AdamW {RATE:g}), batch {BATCH}",
        f"CPU: {_cpu()}",
        "",
        "| seed | | entity F1 (test) | training s | whole command s | training time vs transformers |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"Mean entity F1 over seeds {args.seeds}: bert_keras {np.mean(scores['ours']):.4f}, transformers "
        f"{np.mean(scores['torch']):.4f}.",
        "",
        f"Command: `python benchmarks/wnut16_ner.py --split-seed {args.split_seed} --seeds {' '.join(map(str, args.seeds))}`",
    ]
    text = "\n".join(lines)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
