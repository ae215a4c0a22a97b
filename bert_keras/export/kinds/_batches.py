"""Batches by length, shared by the kinds that batch texts (classifier, sentence encoder).

A batch is padded to its longest text: one 8,000-token document beside short
texts makes every row cost 8,000 tokens (ModernBERT's global layers,
quadratic in the length, most). So a text past `SHORT` characters (~512
pieces: past BERT's whole window) goes into a batch of texts of more than
half its length, longest first, and short texts are batched as the kind
batches them: in input order (the classifier) or longest first (the
sentence encoder, as sentence-transformers batches).
"""

SHORT = 2048


def length_batches(lengths, batch_size, sort_short=False):
    """Batches of indices into `lengths` (a list of int): a list of lists of int, each at most `batch_size` long.

    Texts longer than `SHORT` come first, longest first; a batch holding one
    closes when full or at a text of half its first or shorter, so each is
    padded to less than twice its length. Short texts follow in input order,
    or longest first with `sort_short=True`; the last long batch takes short
    ones where it has room and they are more than half its first.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    long_ = [i for i in order if lengths[i] > SHORT]
    short = [i for i in (order if sort_short else range(len(lengths))) if lengths[i] <= SHORT]
    batches = []
    for index in long_:
        if batches and len(batches[-1]) < batch_size and 2 * lengths[index] > lengths[batches[-1][0]]:
            batches[-1].append(index)
        else:
            batches.append([index])
    if batches and len(batches[-1]) < batch_size and short and 2 * max(lengths[i] for i in short) > lengths[batches[-1][0]]:
        room = batch_size - len(batches[-1])
        batches[-1] += short[:room]
        short = short[room:]
    return batches + [short[start:start + batch_size] for start in range(0, len(short), batch_size)]
