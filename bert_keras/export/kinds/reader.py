"""The reader's answers: questions and contexts in, answers with their exact characters out, on any engine.

`ReaderAnswers.predict` reads each batch's windows from the engine (the
`windows` signature, or `window_range` a few hundred windows at a time) and
decodes them as transformers 4's question-answering pipeline does
(`AnswerPool`: top-k of distinct spans, unanswerable questions,
`max_answer_len`, answers widened to whole words). A reader on another engine
is that engine serving these two signatures.
"""

import numpy as np

from bert_keras._checks import check_int
from bert_keras.predictions import text_list

# `predict` reads a long context's windows this many at a time (`window_range`): memory of these, not of the
# context. Four calls of the export's model (`_serving.WINDOWS_PER_CALL` windows each).
WINDOWS_PER_READ = 4 * 64
RANGE_ENDPOINT = "window_range"  # windows [begin, begin + size) of a batch; exports before it serve `windows` only


def _window_candidates(start_p, end_p, in_context, max_answer_len):
    """A window's spans of non-zero probability `(scores, starts, ends)`, best first (ties: smaller start, then end)."""
    width = len(start_p)
    start_p = np.where(in_context, start_p, 0.0).astype("float32")  # [CLS] and outside the context: never a span
    end_p = np.where(in_context, end_p, 0.0).astype("float32")
    starts, offsets = np.meshgrid(np.arange(width), np.arange(max_answer_len), indexing="ij")  # (width, K)
    ends = starts + offsets
    inside = ends < width
    ends_clipped = np.minimum(ends, width - 1)
    valid = inside & in_context[:, None] & in_context[ends_clipped]
    scores = np.where(valid, start_p[:, None] * end_p[ends_clipped], 0.0)
    order = np.argsort(-scores, axis=None, kind="stable")  # row-major: (start, end) order on ties
    order = order[scores.flat[order] > 0]  # spans of zero probability are no answers
    return scores.flat[order], starts.flat[order], ends.flat[order]


def decode_answers(windows, context, top_k=1, handle_impossible_answer=False, max_answer_len=15,
                   align_to_words=True, merge_duplicates=False):
    """One example's answers from its windows, as transformers 4's question-answering pipeline postprocesses.

    Each answer is a distinct span of the context: a span that several
    windows hold, or several piece spans give (`align_to_words` widens
    pieces to their words), comes once, with its best score. (transformers
    4.0 to 4.52 list it once per window and piece span that gives it, so one
    word could fill the top-k; 4.54 to 4.57 merge answers of the same text:
    `merge_duplicates`.)

    Args:
        windows: dict of numpy arrays, the rows of one example of the
            `windows` signature (or any of its windows: `AnswerPool` adds
            them a few at a time).
        context: str.
        top_k, handle_impossible_answer, max_answer_len, align_to_words:
            as `ExportedReader.predict`.
        merge_duplicates: bool. As transformers 4.54 to 4.57: answers of the
            same text (case-insensitive) add their scores, and each window
            offers `2 * top_k + 10` candidates (with `align_to_words`).

    Returns:
        A list of `{"score", "start", "end", "answer"}`, best first.
    """
    pool = AnswerPool(context, top_k, handle_impossible_answer, max_answer_len, align_to_words, merge_duplicates)
    pool.add(windows)
    return pool.answers()


class AnswerPool:
    """One example's best answers so far, windows added a few at a time: memory of `top_k` answers, not of windows.

    `add(windows)` takes any rows of the example's windows, in order;
    `answers()` is `decode_answers` of all rows added.
    """

    def __init__(self, context, top_k=1, handle_impossible_answer=False, max_answer_len=15, align_to_words=True,
                 merge_duplicates=False):
        self.context, self.top_k, self.max_answer_len = context, top_k, max_answer_len
        self.handle_impossible_answer, self.merge_duplicates = handle_impossible_answer, merge_duplicates
        self._keys = ("word_starts", "word_ends") if align_to_words else ("char_starts", "char_ends")
        self._count = top_k * 2 + 10 if merge_duplicates and align_to_words else top_k
        self._answers, self._by_key, self._null = [], {}, 1e6

    def add(self, windows):
        starts_key, ends_key = self._keys
        for w in range(len(windows["start_probabilities"])):
            start_p, end_p = windows["start_probabilities"][w], windows["end_probabilities"][w]
            self._null = min(self._null, float(start_p[0] * end_p[0]))
            scores, starts, ends = _window_candidates(start_p, end_p, windows["context_mask"][w], self.max_answer_len)
            taken = set()  # this window's distinct spans (merged: its first `count` candidates)
            for score, s, e in zip(scores, starts, ends):
                begin, finish = int(windows[starts_key][w, s]), int(windows[ends_key][w, e])
                if self.merge_duplicates:
                    if len(taken) == self._count:
                        break
                    taken.add((s, e))
                    self._merged(float(score), begin, finish)
                elif (begin, finish) not in taken:
                    taken.add((begin, finish))
                    self._distinct(float(score), begin, finish)
                    if len(taken) == self.top_k:  # a later span of this window cannot beat these in the top-k
                        break
            if not self.merge_duplicates:
                self._answers = sorted(self._answers, key=lambda answer: -answer["score"])[: self.top_k]
                self._by_key = {(a["start"], a["end"]): a for a in self._answers}

    def _distinct(self, score, begin, finish):
        known = self._by_key.get((begin, finish))
        if known is None:
            answer = {"score": score, "start": begin, "end": finish, "answer": self.context[begin:finish]}
            self._answers.append(answer)
            self._by_key[(begin, finish)] = answer
        elif score > known["score"]:  # another window's copy, or another piece span of the same words
            known["score"] = score

    def _merged(self, score, begin, finish):
        text = self.context[begin:finish]
        known = self._by_key.get(text.lower())
        if known is not None:
            known["score"] += score
            return
        answer = {"score": score, "start": begin, "end": finish, "answer": text}
        self._answers.append(answer)
        self._by_key[text.lower()] = answer

    def answers(self):
        """The best `top_k`, best first; the empty answer where asked, or where no span has any probability."""
        answers = list(self._answers)
        if self.handle_impossible_answer or not answers:  # no piece in the context: the empty answer
            answers.append({"score": self._null if self.handle_impossible_answer else 0.0, "start": 0, "end": 0,
                            "answer": ""})
        return sorted(answers, key=lambda answer: answer["score"], reverse=True)[: self.top_k]


class ReaderAnswers:
    """`predict` of a loaded reader, over its engine's `windows` and `window_range` signatures.

    The class it is mixed into sets `_window_range` (true where the model
    serves `window_range`) and runs the signatures (`Engine.run`).
    """

    def predict(self, question, context, top_k=1, handle_impossible_answer=False, max_answer_len=15,
                align_to_words=True, merge_duplicates=False, batch_size=8):
        """Answers from the contexts, as transformers 4's `pipeline("question-answering")` gives them.

        Args:
            question: str or list of str.
            context: str or list of str (one context for many questions is
                shared, as the pipeline does).
            top_k: int. Answers per question, best first: distinct spans of
                the context, each with its best score over the windows and
                piece spans that give it. Fewer come back when the context
                holds fewer spans of non-zero probability. Defaults to `1`.
            handle_impossible_answer: bool. Let the empty answer (score: the
                smallest `[CLS]` probability product over the windows)
                compete. Defaults to `False`.
            max_answer_len: int. The longest answer, in pieces. Defaults to `15`.
            align_to_words: bool. Widen answers to whole words. Defaults to `True`.
            merge_duplicates: bool. Add the scores of answers of the same
                text, as transformers 4.54 to 4.57 do. Defaults to `False`
                (each span scored alone, as transformers 4.0 to 4.52).
            batch_size: int. Examples per call of the model. Defaults to `8`.

        Returns:
            Per example, `{"score", "start", "end", "answer"}` with
            `context[start:end] == answer` (a list of them for `top_k > 1`);
            a list of those for a list of questions. An empty or blank
            context gives the empty answer `{"score": 0.0, "start": 0,
            "end": 0, "answer": ""}`.
        """
        questions, one_question = text_list(question, "question")
        contexts, one_context = text_list(context, "context")
        single = one_question and one_context
        if one_context:
            contexts = contexts * len(questions)
        if len(questions) != len(contexts):
            raise ValueError(f"Received {len(questions)} questions and {len(contexts)} contexts; pass as many of each, "
                             "or one context for all questions.")
        top_k = check_int("top_k", top_k, minimum=1)
        max_answer_len = check_int("max_answer_len", max_answer_len, minimum=1)
        batch_size = check_int("batch_size", batch_size, minimum=1)
        results = []
        for begin in range(0, len(questions), batch_size):
            part = slice(begin, begin + batch_size)
            pools = [AnswerPool(text, top_k, handle_impossible_answer, max_answer_len, align_to_words,
                                merge_duplicates) for text in contexts[part]]
            for outputs in self._window_reads(questions[part], contexts[part]):
                for i, pool in enumerate(pools):
                    rows = outputs["example_index"] == i
                    if rows.any():
                        pool.add({key: value[rows] for key, value in outputs.items()})
            results.extend(pool.answers()[0] if top_k == 1 else pool.answers() for pool in pools)
        self.answered()
        return results[0] if single else results

    def _window_reads(self, questions, contexts):
        """The batch's windows as numpy dicts, `WINDOWS_PER_READ` at a time (a model without `window_range`: one)."""
        if not self._window_range:
            yield self.run("windows", question=questions, context=contexts)
            return
        begin, count = 0, 1
        while begin < count:
            outputs = self.run(RANGE_ENDPOINT, question=questions, context=contexts, begin=begin, size=WINDOWS_PER_READ)
            count = int(outputs.pop("window_count"))
            yield outputs
            begin += WINDOWS_PER_READ
