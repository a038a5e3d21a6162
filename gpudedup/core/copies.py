"""Identical copies: documents whose shingle set equals that of an earlier document.

A corpus with a thousand copies of one boilerplate page puts the copies into one bucket of
every band, where each is paired with ``bucket_window`` others: a million such documents give
hundreds of millions of candidate pairs, all of Jaccard 1. This stage takes the copies out
before LSH instead:

1. ``same_signature_rows`` groups the documents whose MinHash signatures are identical (a
   64-bit hash of each row, a stable sort, and a column-by-column comparison with the group's
   first row, so a hash collision never groups two different signatures). The stores give the
   hash as ``band_key_row_hash`` of the band keys, made where the signatures are made, so this
   stage reads one number per document rather than every column of every signature.
2. ``identical_copies`` checks each later member of a group exactly against the group's first
   document, with verification's exact Jaccard: a member whose Jaccard is 1.0 has the same
   shingle set and is a confirmed copy. The documents of the groups are shingled a batch of
   whole groups at a time, once each, and every round of a group's check reads those sets, so
   the stage's cost grows with the documents in groups, not with the corpus.

A confirmed copy has the same band keys and the same Jaccard with every document as its
group's first document, so the copies need no place in the buckets: the first document stands
for the group, and each copy becomes the verified pair (first, copy) with Jaccard 1.0. The
clusters are the same; what changes is that pairs.parquet lists a group of copies as a star
around its first document rather than as every pair of the group. A member that turns out not
to be a copy (its signature agrees by chance) stays in LSH like any other document, and its
check is not reported (LSH may pair it with the group's first document again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from .cluster import smallest_connected
from .hashing import poly_hash64_rows
from .lsh import sorted_unique
from .ragged import offsets_from_counts, ragged_arange, weighted_ranges
from ..stages import Progress
from .verify import SetRows, pair_jaccard_at_least, signature_agreements


@dataclass
class Copies:
    """Confirmed copies, as corpus row indices.

    first: int64 (c,) the first document of a group; member: int64 (c,) a later document with
    the same shingle set (first < member), ascending by (first, member); jaccard: float64 (c,),
    all 1.0 (the exact Jaccard that confirmed them); host.
    """

    first: np.ndarray
    member: np.ndarray
    jaccard: np.ndarray

    @classmethod
    def none(cls) -> "Copies":
        empty = np.zeros(0, np.int64)
        return cls(empty, empty, np.zeros(0, np.float64))

    @property
    def count(self) -> int:
        return int(self.first.shape[0])


def band_key_row_hash(keys: Any, xp=np) -> Any:
    """The hash same_signature_rows groups documents by, from their band keys.

    keys: uint64 (m, bands), numpy or cupy per xp (lsh.band_keys). Returns uint64 (m,), same
    side: hashing.poly_hash64_rows of each row of keys. Identical signature rows have identical
    band keys, so identical hashes; different rows may share a hash, which the grouping's
    column-by-column comparison catches. It reads ``bands`` columns, not the ``bands * rows``
    of the signatures.
    """
    return poly_hash64_rows(keys, xp)


def same_signature_rows(signatures: Any, row_hash: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows with the same signature as an earlier row.

    signatures: uint32 (m, K), host, or anything that gathers rows by ``signatures[rows]``
    (pipeline.shards.DocumentSignatures); row_hash: uint64 (m,) host, a hash of each row that equal
    rows share (band_key_row_hash of their band keys, or any other); None: poly_hash64_rows of
    the rows. Returns (first, member), int64 (q,) row indices with first < member and equal
    signature rows; first is the lowest row of its group; ascending by (first, member).
    """
    if signatures.shape[0] < 2:
        empty = np.zeros(0, np.int64)
        return empty, empty
    if row_hash is None:
        row_hash = poly_hash64_rows(signatures)
    order = np.argsort(row_hash, kind="stable")  # stable: a group's rows stay ascending
    sorted_hash = row_hash[order]
    starts = np.ones(order.shape[0], dtype=bool)
    starts[1:] = sorted_hash[1:] != sorted_hash[:-1]
    group_first = order[np.flatnonzero(starts)][np.cumsum(starts) - 1]
    later = ~starts
    first, member = group_first[later], order[later]
    # The hash only proposes groups; rows must agree in every column to be grouped.
    same = signature_agreements(signatures, first, member) == signatures.shape[1]
    first, member = first[same], member[same]
    by_group = np.lexsort((member, first))
    return first[by_group].astype(np.int64), member[by_group].astype(np.int64)


# Rounds of identical_copies: a group whose first document is not a copy of the others (a
# superset whose extra shingles never hold a minimum, a 32-bit hash collision) is checked
# again against the first of the rest; a group needing more rounds than this keeps its last
# unconfirmed members in LSH, where they are still found, at m * bucket_window pairs.
COPY_ROUNDS = 4


SetReader = Callable[[np.ndarray], SetRows]


def identical_copies(groups: tuple[np.ndarray, np.ndarray], active: Any, lengths: Any,
                     batch_cost: int, set_reader: Callable[[np.ndarray], SetReader],
                     progress: Progress | None = None) -> Copies:
    """Check the members of every same-signature group exactly against the group's first
    document; those that are not copies of it are checked in the next round against the first
    of them, up to COPY_ROUNDS rounds.

    groups: same_signature_rows of the signatures of the documents ``active`` (int64 (m,),
    ascending corpus rows): (first, member) int64 positions into active (a cluster's tasks
    group and check their parts of the groups: pipeline/copyparts.py); lengths: int64 (n,) text lengths
    in code points over the corpus; both are only indexed (protocols.Store.active, lengths).
    set_reader(docs) is called once with every document of the groups (int64, ascending corpus
    rows) and gives sets(part): the shingle sets of a part of them (int64, ascending) as
    verify.document_sets makes them (protocols.Store.set_reader).

    The groups go ``batch_cost`` code points of documents at a time, each document once: a
    batch of whole groups is shingled by one call and runs every round of its groups on those
    sets. A group larger than a batch goes a part at a time, each part with the group's first
    document, one round per pass over the groups. So the shingle sets alive at once stay about
    one batch however many copies there are, and a document is shingled once unless its group
    is larger than a batch or needs another round after such a part.
    """
    first, member = groups
    return confirmed_copies(active[first], active[member], lengths, batch_cost, set_reader, progress)


def confirmed_copies(first: np.ndarray, member: np.ndarray, lengths: Any, batch_cost: int,
                     set_reader: Callable[[np.ndarray], SetReader], progress: Progress | None = None) -> Copies:
    """identical_copies of the groups given as corpus rows: first, member int64 (q,), first <
    member, ascending by (first, member), a group's members all with its first row (a
    cluster's task checks a part of the groups so: pipeline/copyparts.py)."""
    progress = progress or Progress()
    progress.start("Checking identical copies", first.shape[0], "copies")
    if first.shape[0] == 0:
        return Copies.none()
    confirmed_first, confirmed_member = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    sets_of = set_reader(sorted_unique(np.concatenate([first, member])))
    for done in range(COPY_ROUNDS):
        if first.shape[0] == 0:
            break
        # The parts of groups larger than a batch: their members not confirmed this round go
        # on to the next round together, whichever part they were in.
        left_first, left_member = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for start, stop, whole in group_batches(first, member, lengths, batch_cost):
            found_first, found_member, rest_first, rest_member = check_rounds(
                first[start:stop], member[start:stop], sets_of, COPY_ROUNDS - done if whole else 1)
            confirmed_first.append(found_first)
            confirmed_member.append(found_member)
            if not whole:
                left_first.append(rest_first)
                left_member.append(rest_member)
            progress.advance(stop - start)
        first, member = next_round(np.concatenate(left_first), np.concatenate(left_member))
    first, member = np.concatenate(confirmed_first), np.concatenate(confirmed_member)
    order = np.lexsort((member, first))
    return Copies(first[order], member[order], np.ones(order.shape[0], np.float64))


def group_batches(first: np.ndarray, member: np.ndarray, lengths: Any,
                  batch_cost: int) -> list[tuple[int, int, bool]]:
    """Batches of the pairs (first, member: int64 (p,), each group's pairs together, members
    ascending) as (start, stop, whole): consecutive whole groups whose documents' lengths
    (int64 (n,) over the corpus), each document counted once, add up to at most batch_cost
    (whole: True); a group larger than that is cut into parts whose members add up to at most
    batch_cost less its first document's length (whole: False, unless one part holds it all)."""
    if first.shape[0] == 0:
        return []
    starts = np.flatnonzero(np.concatenate([[True], first[1:] != first[:-1]]))
    bounds = np.append(starts, first.shape[0])
    group_cost = lengths[first[starts]] + np.add.reduceat(lengths[member], starts)
    batches = []
    for a, b in weighted_ranges(group_cost, batch_cost):
        low, high = int(bounds[a]), int(bounds[b])
        if b - a > 1 or group_cost[a] <= batch_cost:
            batches.append((low, high, True))
            continue
        room = max(batch_cost - int(lengths[first[low]]), 1)
        parts = weighted_ranges(lengths[member[low:high]], room)
        batches.extend((low + s, low + t, len(parts) == 1) for s, t in parts)
    return batches


def check_rounds(first: np.ndarray, member: np.ndarray, sets_of: SetReader,
                 rounds: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Up to ``rounds`` rounds of the check on the pairs (first, member: int64 (p,), corpus
    rows, each group's pairs together, members ascending), on one call of sets_of for all
    their documents. Returns (first, member) of the confirmed copies and (first, member) of
    the pairs the last round did not confirm, int64 each."""
    docs = sorted_unique(np.concatenate([first, member]))
    sets = sets_of(docs)
    # Positions into docs keep the order of the rows, so each group's pairs stay together.
    a, b = np.searchsorted(docs, first), np.searchsorted(docs, member)
    found_a, found_b = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for done in range(rounds):
        if done:
            a, b = next_round(a, b)
        if a.shape[0] == 0:
            break
        # |A ∩ B| / |A ∪ B| is exactly 1.0 only for equal sets (inter / inter); at t = 1 the
        # size bound leaves only pairs of equal sizes to merge, and a merge stops at a mismatch.
        same = pair_jaccard_at_least(sets, a, b, 1.0) == 1.0
        found_a.append(a[same])
        found_b.append(b[same])
        a, b = a[~same], b[~same]
    return docs[np.concatenate(found_a)], docs[np.concatenate(found_b)], docs[a], docs[b]


def next_round(first: np.ndarray, member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The unconfirmed members of each group (first, member: int64 (u,), each group's pairs
    together, members ascending) as the next round's pairs, in the same form: the lowest of
    them is the group's new first document."""
    if first.shape[0] == 0:
        return first, member
    starts = np.ones(first.shape[0], dtype=bool)
    starts[1:] = first[1:] != first[:-1]
    new_first = member[np.flatnonzero(starts)][np.cumsum(starts) - 1]
    return new_first[~starts], member[~starts]


def are_copies(jaccard: np.ndarray) -> np.ndarray:
    """bool (p,): which verified pairs (their Jaccard, float64 (p,)) are identical copies,
    listed as a star around each group's first document: those of Jaccard 1.0, which only
    identical shingle sets have."""
    return jaccard == 1.0


def first_copies(first: np.ndarray, member: np.ndarray, rows: np.ndarray, none: Optional[int] = None) -> np.ndarray:
    """int64 (r,): for each of ``rows`` (int64), the first document of its group of identical
    copies where ``member`` holds it (first, member: int64 (c,), the copies as a star around
    each group's first document, Copies'); where not, the row itself, or ``none`` where given.
    A copy pairs as its first document does (implied_pairs), so this is the pair to look up."""
    order = np.argsort(member, kind="stable")
    members, firsts = member[order], first[order]
    otherwise = rows if none is None else np.full(rows.shape[0], none, np.int64)
    if members.shape[0] == 0:
        return otherwise.astype(np.int64, copy=False)
    at = np.minimum(np.searchsorted(members, rows), members.shape[0] - 1)
    return np.where(members[at] == rows, firsts[at], otherwise).astype(np.int64, copy=False)


def implied_pairs(a: np.ndarray, b: np.ndarray, first: np.ndarray, member: np.ndarray,
                  n_docs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair that a list of pairs stands for once groups of copies are spelled out.

    a, b: int64 (p,) pairs of documents (a != b), for example the verified pairs; first,
    member: int64 (c,) the copies (Copies.first, Copies.member, or any pairs of documents with
    identical shingle sets). A copy has every Jaccard of the document it copies, so a pair
    (x, y) stands for every (x', y') with x' a copy of x or x itself and likewise y', and the
    documents of one group of copies are pairs of each other.

    Returns (a int64 (q,), b int64 (q,), source int64 (q,)) with a < b, each pair once,
    ascending: source is the index in the input of a pair it came from, or -1 for a pair
    inside one group (Jaccard 1). Used where pairs are compared with an all-pairs truth
    (evaluate.py, tests); the output is quadratic in the size of a group.
    """
    group = smallest_connected(n_docs, first.astype(np.int64, copy=False), member.astype(np.int64, copy=False))
    # The documents of each group, as a ragged array over group numbers (its smallest document).
    by_group = np.argsort(group, kind="stable")
    size = np.bincount(group, minlength=n_docs)
    start = offsets_from_counts(size)[:-1]

    def spelled_out(x, y, source):
        count = size[group[x]] * size[group[y]]
        pair, k = ragged_arange(count)
        wide = size[group[y[pair]]]
        x2 = by_group[start[group[x[pair]]] + k // wide]
        y2 = by_group[start[group[y[pair]]] + k % wide]
        return np.minimum(x2, y2), np.maximum(x2, y2), source[pair]

    listed = spelled_out(a, b, np.arange(a.shape[0], dtype=np.int64))
    # Inside a group: every ordered pair of its documents, then the ones with x < y.
    groups = np.flatnonzero(size > 1)
    inside = spelled_out(by_group[start[groups]], by_group[start[groups]], np.full(groups.shape[0], -1, np.int64))
    x, y, source = (np.concatenate(parts) for parts in zip(listed, inside))
    distinct = x != y
    x, y, source = x[distinct], y[distinct], source[distinct]
    codes = x * np.int64(max(n_docs, 1)) + y
    _, once = np.unique(codes, return_index=True)
    return x[once], y[once], source[once]
