"""An index's lookup (Index.query): the indexed documents near given ones, without a run."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..backends import Backend, get_backend
from ..core.content import is_token_type
from ..core.hashing import Permutations
from ..core.verify import pair_jaccard_at_least, set_columns, stacked_sets
from ..errors import InputError, ParameterError
from ..io.python_inputs import list_corpus
from ..params import DedupParams
from .reader import IndexReader


def matches(documents, backend: str | Backend,
            state: Callable[[], tuple[IndexReader, DedupParams, Permutations]]) -> list[list[tuple[Any, float]]]:
    """For each of ``documents`` (texts, or token-id lists for a token index), the indexed
    documents whose exact Jaccard with it reaches the index's threshold, as (id, jaccard),
    highest Jaccard first: shingles, signatures and band keys of the queries on ``backend``, the
    probe of the index's buckets, and the exact Jaccard against the stored sets. ``state``
    gives the index's reader, parameters and permutations, asked for (as the backend is) once
    the documents are known to be a list of some."""
    if isinstance(documents, (str, bytes)):
        raise ParameterError("query takes a list of documents and gives a list of matches per document; got "
                             "one string: pass [text]")
    queries = list(documents)
    if not queries:
        return []
    reader, params, permutations = state()
    backend = get_backend(backend)
    spec, banding = params.shingle_spec(), params.banding()
    corpus = list_corpus(queries, "query")
    if corpus.num_rows and is_token_type(corpus.texts.type) != (params.shingle == "token"):
        wanted = "lists of token ids" if params.shingle == "token" else "texts"
        raise InputError(f"the index cuts {params.shingle} shingles: its queries are {wanted}, and these "
                         f"are {'texts' if params.shingle == 'token' else 'token ids'}")
    # Sets (host, sorted, distinct): their MinHash is their shingles', and verification reads them.
    shingles = backend.shingle_sets(*corpus.units(), spec)
    keys = backend.to_host(backend.band_keys(backend.signatures(shingles, permutations), banding))
    nonempty = np.flatnonzero(shingles.counts() > 0)  # an empty query matches nothing
    query, segment, row = reader.probe_pairs(keys[nonempty], params.bucket_window)
    query = nonempty[query]
    found: list[list[tuple[Any, float]]] = [[] for _ in queries]
    if query.size == 0:
        return found
    codes, inverse = np.unique(reader.document_codes(segment, row), return_inverse=True)
    matched_segment, matched_row = reader.documents_of(codes)
    sets = stacked_sets([set_columns(shingles)[::-1]] + reader.set_parts(matched_segment, matched_row))
    jaccard = pair_jaccard_at_least(sets, query, len(queries) + inverse, params.threshold)
    hit = jaccard >= params.threshold
    ids = reader.ids(matched_segment, matched_row).to_pylist()
    for q, code, value in zip(query[hit], inverse[hit], jaccard[hit]):
        found[int(q)].append((ids[int(code)], float(value)))
    return [sorted(hits, key=lambda hit: -hit[1]) for hits in found]
