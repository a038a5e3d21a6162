"""The parameters of a deduplication run, validated once in the public layer."""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Optional

from .errors import ParameterError

# The command line reads the defaults here before it knows whether a command runs at all:
# numpy, scipy and pyarrow (lsh, cluster, shingling) are imported when they are used.
if TYPE_CHECKING:
    from .core.cluster import KeepPolicy
    from .core.lsh import Banding
    from .core.shingling import ShingleKind, ShingleSpec, UnicodeForm

DEFAULT_THRESHOLD = 0.8
DEFAULT_NUM_PERM = 128
DEFAULT_NGRAM = 5
DEFAULT_SEED = 42
DEFAULT_BUCKET_WINDOW = 256
DEFAULT_MAX_FN = 0.01
# Batches bound the memory of the signature pass: about 50 bytes per code point of a batch are
# alive at once on the numpy backend, for each batch in flight (one per core). The numpy
# backend's default; the GPU backend has its own (kernel_backend.DEFAULT_GPU_BATCH_BYTES).
DEFAULT_BATCH_BYTES = 2 << 20
DEFAULT_BATCH_ROWS = 1 << 20


# The parameters that decide a run's results: what a resumed work directory and a persistent
# index must be used with. (Batch sizes and the memory budget only decide how the work is cut.)
RESULT_PARAMETERS = ("threshold", "shingle", "ngram", "unicode", "strip_punctuation", "strip_symbols", "num_perm",
                     "max_fn", "low", "max_fp", "seed", "keep", "bucket_window")


# What each parameter of a run means, in a line, as a user reads it: report.html's parameter
# table (one place for these words; report.json's parameters are DedupParams', the banding
# chosen and the fields read).
MEANINGS = {
    "threshold": "pairs whose exact Jaccard similarity is at least this are near-duplicates",
    "shingle": "what a shingle is made of: word or character n-grams of the normalised text, or n-grams of "
               "token ids",
    "ngram": "units (words, characters or token ids) per shingle",
    "unicode": "Unicode normalisation form applied before lower-casing (none: the canonical normalisation only)",
    "strip_punctuation": "punctuation (Unicode categories P) removed before white space is collapsed",
    "strip_symbols": "symbols (Unicode categories S) removed likewise",
    "num_perm": "MinHash permutation budget K; bands × rows of them are computed",
    "bands": "LSH bands b: a pair becomes a candidate when its signatures agree on every row of one band",
    "rows": "signature rows r per band",
    "max_fn": "target when b and r are chosen: the largest miss probability at the threshold",
    "low": "target when b and r are chosen: a similarity whose pairs should rarely be candidates",
    "max_fp": "target when b and r are chosen: the largest chance that a pair at low becomes a candidate",
    "seed": "seed of the MinHash permutations (and of the report's random sample of clusters)",
    "keep": "which document of a cluster is kept: the first in input order, or the longest",
    "bucket_window": "each document of an LSH bucket is paired with at most this many that follow it",
    "batch_bytes": "text bytes per batch (memory, not results)",
    "batch_rows": "rows per batch at most (memory, not results)",
    "max_memory": "host memory the run may use (none: no limit); a stage that would need more stops the run "
                  "before it starts",
    "shard_bytes": "with a work directory or Dask: larger JSONL and Parquet files are read in pieces of about "
                   "this size (memory and tasks, not results; none: 512 MiB)",
    "permutations_computed": "b × r: the permutations actually computed",
    "banding_rule": "how b and r were chosen",
    "text_field": "field (column) holding the text",
    "id_field": "field holding unique document ids (none: <file path>:<row>, the row counted from 1)",
    "on_error": "stop: a bad record or unreadable file stops the run; skip: they are left out and listed in "
                "errors.jsonl",
}


@dataclass(frozen=True)
class DedupParams:
    """Everything that decides the result of a run (and a few knobs that only decide speed).

    threshold: verified pairs have exact Jaccard >= threshold; in (0, 1].
    shingle, ngram: word or char n-grams of ngram units of the normalised text, or token
        n-grams of a document's token ids (docs/hash-spec.md).
    unicode, strip_punctuation, strip_symbols: text normalisation beyond the canonical one
        (shingling.ShingleSpec); not for token shingles.
    num_perm: the permutation budget K; only bands * rows of them are computed.
    bands, rows: LSH banding; both None means "choose from the targets" (lsh.choose_bands):
    max_fn: the largest acceptable miss probability at the threshold, 1 - P(threshold);
    low, max_fp: optionally, a similarity below the threshold and the largest acceptable
        probability that a pair that similar becomes a candidate, P(low).
    seed: draws the permutations.
    keep: which document of a cluster is kept: "first" (input order) or "longest".
    bucket_window: each document of an LSH bucket is paired with at most this many of the
        documents that follow it in the bucket (bounds large buckets; see lsh.bucket_pairs).
    batch_bytes, batch_rows: batch size limits (memory, not results); batch_bytes None means
        the backend's default (2 MiB on the CPU, 64 MiB on a GPU).
    max_memory: bytes of host memory the run may use (None: no limit); a stage whose estimated
        need would go past it stops the run before it starts (memory.MemoryBudget).
    shard_bytes: in a staged or Dask run, plain JSONL and Parquet files larger than this are
        cut into pieces of about this size, each read by a task of its own (io/pieces.py;
        memory and tasks, not results); None: 512 MiB.
    """

    threshold: float = DEFAULT_THRESHOLD
    shingle: ShingleKind = "word"
    ngram: int = DEFAULT_NGRAM
    unicode: Optional[UnicodeForm] = None
    strip_punctuation: bool = False
    strip_symbols: bool = False
    num_perm: int = DEFAULT_NUM_PERM
    bands: Optional[int] = None
    rows: Optional[int] = None
    max_fn: float = DEFAULT_MAX_FN
    low: Optional[float] = None
    max_fp: Optional[float] = None
    seed: int = DEFAULT_SEED
    keep: KeepPolicy = "first"
    bucket_window: int = DEFAULT_BUCKET_WINDOW
    batch_bytes: Optional[int] = None
    batch_rows: int = DEFAULT_BATCH_ROWS
    max_memory: Optional[int] = None
    shard_bytes: Optional[int] = None

    def __post_init__(self):
        # numpy's scalars (a notebook's np.arange of n-gram sizes) as Python's: the checks, the
        # fingerprints and the report take Python numbers.
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, numbers.Integral) and type(value) not in (int, bool):
                object.__setattr__(self, field.name, int(value))
            elif isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral) \
                    and type(value) is not float:
                # By its shortest text: np.float32(0.8) is 0.8 as typed, not 0.800000011920929
                # (which would drop the pairs at exactly the threshold).
                object.__setattr__(self, field.name, _as_float(value))
        check = _check
        check(is_number(self.threshold) and 0 < self.threshold <= 1,
              "threshold", self.threshold, "a number in (0, 1]")
        check(self.shingle in ("word", "char", "token"), "shingle", self.shingle, "'word', 'char' or 'token'")
        check(_is_int(self.ngram) and self.ngram >= 1, "ngram", self.ngram, "an integer >= 1 (below 2**63)")
        check(self.unicode in (None, "nfc", "nfkc"), "unicode", self.unicode, "'nfc', 'nfkc' or None")
        check(isinstance(self.strip_punctuation, bool), "strip_punctuation", self.strip_punctuation, "True or False")
        check(isinstance(self.strip_symbols, bool), "strip_symbols", self.strip_symbols, "True or False")
        if self.shingle == "token":
            for name in ("unicode", "strip_punctuation", "strip_symbols"):
                check(not getattr(self, name), name, getattr(self, name),
                      "left out with token shingles (they normalise text; token ids are used as given)")
        check(_is_int(self.num_perm) and 1 <= self.num_perm <= 4096, "num_perm", self.num_perm,
              "an integer from 1 to 4096")
        _check_together(self, "bands", "rows", "give both, or neither to have them chosen from the threshold")
        if self.bands is not None:
            check(_is_int(self.bands) and self.bands >= 1, "bands", self.bands, "an integer >= 1")
            check(_is_int(self.rows) and self.rows >= 1, "rows", self.rows, "an integer >= 1")
            if self.bands * self.rows > self.num_perm:
                raise ParameterError(f"bands x rows = {self.bands * self.rows} (bands={self.bands}, "
                                     f"rows={self.rows}) must be at most num_perm={self.num_perm}")
        check(is_number(self.max_fn) and 0 < self.max_fn < 1, "max_fn", self.max_fn,
              "a probability in (0, 1)")
        _check_together(self, "low", "max_fp", "give both or neither")
        if self.low is not None:
            check(is_number(self.low) and 0 <= self.low < self.threshold, "low", self.low,
                  f"a similarity in [0, {self.threshold}), below the threshold")
            check(is_number(self.max_fp) and 0 < self.max_fp < 1, "max_fp", self.max_fp,
                  "a probability in (0, 1)")
        check(_is_int(self.seed, 2**64) and 0 <= self.seed, "seed", self.seed,
              "an integer in [0, 2**64)")
        check(self.keep in ("first", "longest"), "keep", self.keep, "'first' or 'longest'")
        check(_is_int(self.bucket_window) and self.bucket_window >= 1, "bucket_window",
              self.bucket_window, "an integer >= 1 (below 2**63)")
        check(self.batch_bytes is None or (_is_int(self.batch_bytes) and self.batch_bytes >= 1),
              "batch_bytes", self.batch_bytes, "an integer >= 1 (or None: the backend's default)")
        check(_is_int(self.batch_rows) and self.batch_rows >= 1, "batch_rows", self.batch_rows,
              "an integer >= 1")

        check(self.max_memory is None or (_is_int(self.max_memory) and self.max_memory > 0),
              "max_memory", self.max_memory, "a positive number of bytes (or None: no limit)")
        check(self.shard_bytes is None or (_is_int(self.shard_bytes) and self.shard_bytes >= 1),
              "shard_bytes", self.shard_bytes, "a positive number of bytes (or None: 512 MiB)")

    def shingle_spec(self) -> ShingleSpec:
        """What a document's shingles are (shingling.ShingleSpec)."""
        from .core.shingling import ShingleSpec  # (start-up: the CLI reads the defaults here without numpy)

        return ShingleSpec(self.shingle, self.ngram, self.unicode, self.strip_punctuation, self.strip_symbols)

    def banding(self) -> Banding:
        """The (bands, rows) to use, and why."""
        from .core.lsh import Banding, choose_bands  # (start-up: the CLI reads the defaults here without numpy)

        if self.bands is not None and self.rows is not None:  # both or neither (checked above)
            return Banding(self.bands, self.rows, "given")
        return choose_bands(self.threshold, self.num_perm, self.max_fn, self.low, self.max_fp)

    def as_dict(self) -> dict:
        return asdict(self)

    def result_parameters(self) -> dict:
        """What results depend on, to record and compare (a work directory's fingerprint, an
        index's manifest): RESULT_PARAMETERS, the banding used, and with a Unicode form the
        Unicode version of the forms in this process (normalize.unicode_form_version)."""
        recorded = {name: getattr(self, name) for name in RESULT_PARAMETERS}
        banding = self.banding()
        recorded.update(bands=banding.bands, rows=banding.rows)
        if self.unicode is not None:
            from .core.normalize import unicode_form_version  # (start-up: as above)

            recorded["unicode_version"] = unicode_form_version()
        return recorded


def _is_int(value, below: int = 2**63) -> bool:
    """An integer, not a bool, under ``below``: by default one that numpy holds as int64 (the
    arrays it sizes or offsets would overflow on a larger one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value < below


def _as_float(value: numbers.Real) -> float:
    """A real number as Python's float by its shortest text where it has one (numpy's floats),
    else by value (a Fraction)."""
    try:
        return float(str(value))
    except ValueError:
        return float(value)


def is_number(value) -> bool:
    """A real number (Python's or numpy's), not a bool (True is not a threshold)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check(ok: bool, name: str, value, allowed: str) -> None:
    """ParameterError naming the parameter ``name`` as a keyword argument (errors.py)."""
    if not ok:
        raise ParameterError(f"{name}= must be {allowed}; got {value!r}")


def check_targets_read(params: DedupParams, low_shown: bool = False) -> None:
    """Refuse targets (max_fn, low, max_fp) given beside bands and rows, which they would not
    choose: where a run's or an index's parameters are given (an index's own hold its chosen
    bands beside its targets). low_shown: low and max_fp are read anyway (``gpudedup params``
    shows P(low) of the bands given beside max_fp)."""
    targets = [name for name, given in (("max_fn", params.max_fn != DEFAULT_MAX_FN),
                                        ("low", params.low is not None and not low_shown),
                                        ("max_fp", params.max_fp is not None and not low_shown)) if given]
    if params.bands is not None and targets:
        one = len(targets) == 1
        raise ParameterError(f"{and_listed([f'{name}=' for name in targets])} "
                             f"{'is a target' if one else 'are targets'} "
                             "that bands and rows are chosen to meet, so with bands= and rows= given "
                             f"{'it changes' if one else 'they change'} nothing: leave {'it' if one else 'them'} "
                             "out, or leave out bands= and rows=")


def and_listed(names: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return ", ".join(names[:-1]) + " and " + names[-1] if names[1:] else names[0]


def _check_together(params: DedupParams, first: str, second: str, otherwise: str) -> None:
    """ParameterError when one of the parameters ``first`` and ``second`` is given without the
    other; ``otherwise``: what to do instead."""
    given = [name for name in (first, second) if getattr(params, name) is not None]
    if len(given) == 1:
        missing = second if given[0] == first else first
        raise ParameterError(f"{given[0]}={getattr(params, given[0])!r} needs {missing}= too ({otherwise})")
