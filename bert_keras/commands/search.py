"""`bert-keras search`: the texts of an index nearest to queries (exact cosine similarity).

The index, its model and the checkpoint readers (TensorFlow) are imported in `run`: --help and the checks before
TensorFlow loads must not pay for them.
"""

import os

from bert_keras.commands._common import at_least, embedding_model, fail, sentence_model_arguments
from bert_keras.commands._io import InputError, argument_texts, json_text, prompt, standard_input, tsv_field
from bert_keras.data.texts import DataError, read_texts


def register(commands, common):
    search = commands.add_parser(
        "search", parents=[common], help="the texts of an index nearest to queries (exact cosine similarity)",
        description="Embeds each QUERY with the model that wrote INDEX (or --checkpoint / --model, which must be the same "
        "model: its dimension and its embedding of a probe text are checked) and prints the --top-k texts of highest "
        "cosine similarity, computed exactly by matrix products over every vector. An index is data: the checkpoint it "
        "records is read as weights only, and an export or Hub module it records is never loaded from it (pass it with "
        "--model / --checkpoint). text: QUERY, then RANK<TAB>SCORE<TAB>TEXT lines; json: one array of {query, results: "
        "[{rank, index, score, text}]}. Without QUERY arguments the queries are read from standard input, one per line, "
        "each answered as it arrives (one load of the model for all of them; json: one {query, results} line each).",
    )
    search.intermixed = True  # QUERY values may follow the options
    search.add_argument("index", help="an index directory written by bert-keras index")
    search.add_argument("queries", nargs="*", metavar="QUERY",
                        help="texts to search for (none: one per line on standard input)")
    search.add_argument("--top-k", type=at_least(1), default=10, help="results per query (default: 10)")
    search.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    sentence_model_arguments(search, required=False)
    search.set_defaults(func=run)


def _print_results(results, fmt):
    if fmt == "json":
        print(json_text(results))
        return
    for number, result in enumerate(results):
        print(("\n" if number else "") + f"query: {tsv_field(result['query'])}")
        for hit in result["results"]:
            print(f"{hit['rank']}\t{hit['score']:.4f}\t{tsv_field(hit['text'])}")


def run(args):
    try:
        queries = [text for _, text in argument_texts(args.queries)]
        if not queries:
            standard_input(what="query", hint="pass QUERY arguments")  # closed: said before anything loads
    except InputError as error:
        return fail("search", str(error))
    from bert_keras.checkpoints import ModuleRefusedError  # after the check: it must not wait for TensorFlow
    from bert_keras.search import INDEX_FILE, load_embedding_model, load_index

    try:
        index = load_index(args.index)
    except ValueError as error:
        return fail("search", str(error))
    if args.checkpoint or args.model:
        model = embedding_model(args, "search")
    else:  # what the index records is data: read as weights, never loaded as a graph (load_embedding_model)
        try:
            model = load_embedding_model(index.model, recorded_in=os.path.join(args.index, INDEX_FILE))
        except ModuleRefusedError as error:
            return fail("search", str(error))
        except (OSError, ValueError) as error:
            return fail("search", f"cannot load the model that wrote {args.index} ({error}); pass --checkpoint or --model.")
    try:
        index.check_model(model)
    except ValueError as error:
        return fail("search", str(error))
    if queries:
        _print_results(_search(index, model, queries, args), args.format)
        return 0
    return _answer_standard_input(index, model, args)


def _search(index, model, queries, args):
    indices, scores = index.search(model.encode(queries, batch_size=args.batch_size), top_k=args.top_k)
    return [{"query": query, "results": [{"rank": rank, "index": int(i), "score": round(float(score), 6), "text": index.texts[i]}
                                         for rank, (i, score) in enumerate(zip(row, row_scores), start=1)]}
            for query, row, row_scores in zip(queries, indices, scores)]


def _answer_standard_input(index, model, args):
    """Each line of standard input is a query, answered (and flushed) before the next is read; blank lines skipped.

    Read as `predict` reads standard input (`read_texts`): a byte-order mark at the start dropped, a line of invalid
    UTF-8 named.
    """
    prompt("queries")
    answered = 0
    try:
        for _, (query,) in read_texts(standard_input(what="query", hint="pass QUERY arguments")):
            if not query.strip():
                continue
            result = _search(index, model, [query], args)[0]
            if args.format == "json":
                print(json_text(result), flush=True)
            else:
                _print_results([result], "text")
                print(flush=True)
            answered += 1
    except (InputError, DataError) as error:
        return fail("search", str(error))
    if not answered:
        return fail("search", "no query given: pass QUERY arguments, or queries on standard input, one per line.")
    return 0
