"""The grid of ``gpudedup evaluate``: one Setting per point (permutation budget, banding or the
rule that chooses it, shingles and their normalisation, threshold), the expansion of the CLI's
comma lists into settings, and the parsing of those lists."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..core.lsh import similarity_text
from ..core.shingling import ShingleKind, ShingleSpec, UnicodeForm
from ..errors import ParameterError
from ..params import (DEFAULT_MAX_FN, DEFAULT_NGRAM, DEFAULT_NUM_PERM, DEFAULT_THRESHOLD, DedupParams, and_listed,
                      is_number)


@dataclass(frozen=True)
class Setting:
    """One point of the grid.

    num_perm: the permutation budget K. bands, rows: LSH banding, both given or both None; None
    means chosen from the threshold (lsh.choose_bands, at most ``max_false_negative`` of the
    pairs at the threshold missed: 1% when None, the pipeline's rule). shingle ("word", "char"
    or "token") and ngram: the shingles; unicode, strip_punctuation, strip_symbols: their text
    normalisation (DedupParams). threshold: verified pairs have exact Jaccard >= it.
    """

    num_perm: int = DEFAULT_NUM_PERM
    bands: Optional[int] = None
    rows: Optional[int] = None
    shingle: ShingleKind = "word"
    ngram: int = DEFAULT_NGRAM
    threshold: float = DEFAULT_THRESHOLD
    max_false_negative: Optional[float] = None
    unicode: Optional[UnicodeForm] = None
    strip_punctuation: bool = False
    strip_symbols: bool = False

    def params(self, **extra) -> DedupParams:
        """The DedupParams of this setting (``extra``: seed, bucket_window, batch_bytes, ...)."""
        targets: dict[str, Any] = {} if self.max_false_negative is None else {"max_fn": self.max_false_negative}
        return DedupParams(threshold=self.threshold, shingle=self.shingle, ngram=self.ngram,
                           unicode=self.unicode, strip_punctuation=self.strip_punctuation,
                           strip_symbols=self.strip_symbols, num_perm=self.num_perm, bands=self.bands,
                           rows=self.rows, **targets, **extra)

    def spec(self) -> ShingleSpec:
        """What the shingles are: settings of one spec share their ground truth."""
        return ShingleSpec(self.shingle, self.ngram, self.unicode, self.strip_punctuation, self.strip_symbols)

    @property
    def banding_label(self) -> str:
        if self.bands is not None:
            return f"{self.bands}x{self.rows}"
        return "auto" if self.max_false_negative is None else f"auto(fn<={self.max_false_negative:g})"

    @property
    def label(self) -> str:
        return (f"{spec_label(self.spec())} t={similarity_text(self.threshold)} K={self.num_perm} "
                f"b x r={self.banding_label}")

    def as_dict(self) -> dict:
        return asdict(self)


def spec_label(spec: ShingleSpec) -> str:
    """'word5', 'char5+nfkc-punct-sym', 'token3': a shingle spec in a table cell."""
    label = f"{spec.kind}{spec.n}" + (f"+{spec.unicode}" if spec.unicode else "")
    return label + ("-punct" if spec.strip_punctuation else "") + ("-sym" if spec.strip_symbols else "")


def expand_grid(
    num_perm: Sequence[int] = (DEFAULT_NUM_PERM,),
    bands: Optional[Sequence[Optional[int]]] = None,
    rows: Optional[Sequence[Optional[int]]] = None,
    shingle: Sequence[ShingleKind] = ("word",),
    ngram: Sequence[int] = (DEFAULT_NGRAM,),
    threshold: Sequence[float] = (DEFAULT_THRESHOLD,),
    max_false_negative: Optional[Sequence[Optional[float]]] = None,
    unicode: Sequence[Optional[UnicodeForm]] = (None,),
    strip_punctuation: Sequence[bool] = (False,),
    strip_symbols: Sequence[bool] = (False,),
) -> tuple[list[Setting], list[str]]:
    """Every combination of the lists, as Settings, and notes on the combinations skipped.

    Banding, for each num_perm:
      - neither ``bands`` nor ``rows``: chosen from the threshold (one setting per target in
        ``max_false_negative``; None there, or no list, is the pipeline's 1% rule);
      - ``bands`` only: rows = num_perm // bands (the seed's "num_bands" grid);
      - ``rows`` only: bands = num_perm // rows;
      - both: every (bands, rows) pair.
      A None in ``bands`` or ``rows`` adds the chosen banding ("auto") to the explicit ones.
    Combinations that cannot run are skipped with a note: bands * rows > num_perm, a derived
    bands or rows of 0, and targets no banding within num_perm meets (ParameterError, with the
    notes, where that leaves no setting). Values that are wrong on
    their own (a threshold of 2, an unknown shingle kind, num_perm 0) raise ParameterError.
    The normalisation lists (unicode, strip_punctuation, strip_symbols) apply to text
    shingles; token shingles take ids as given and get one setting each.
    Settings come out in a stable order, shingles outermost (the ground truth is computed per
    shingle spec), duplicates removed.
    """
    settings: list[Setting] = []
    notes: list[str] = []
    lists = {"num_perm": num_perm, "bands": bands, "rows": rows, "shingle": shingle, "ngram": ngram,
             "threshold": threshold, "max_false_negative": max_false_negative, "unicode": unicode,
             "strip_punctuation": strip_punctuation, "strip_symbols": strip_symbols}
    for name, values in lists.items():
        if values is None and name in ("bands", "rows", "max_false_negative"):
            continue
        if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
            raise ParameterError(f"{name}= takes a list of values; got {values!r}: pass [{values!r}] for one")
        if len(values) == 0:
            raise ParameterError(f"{name}= is an empty list: give it a value or more, or leave it out")
    # Lists that no setting of the grid would read are refused rather than dropped.
    chosen = any(b is None for k in num_perm for b, _, _ in _bandings(k, bands, rows))  # ("auto": _bandings)
    if max_false_negative and any(target is not None for target in max_false_negative) and not chosen:
        raise ParameterError("max_false_negative= is the target that bands and rows are chosen to meet, and the "
                             "grid gives every banding (bands=, rows=): add the chosen banding (auto) to them, or "
                             "leave it out")
    normalising = [f"{name}=" for name, values in (("unicode", unicode), ("strip_punctuation", strip_punctuation),
                                                    ("strip_symbols", strip_symbols)) if any(values)]
    if all(kind == "token" for kind in shingle) and normalising:
        one = len(normalising) == 1
        raise ParameterError(f"{and_listed(normalising)} {'normalises' if one else 'normalise'} text, and every "
                             f"setting of the grid cuts token ids (shingle='token'): leave {'it' if one else 'them'} "
                             "out")
    targets = list(max_false_negative) if max_false_negative else [None]
    for target in targets:
        if target is not None and not (is_number(target) and 0 < target < 1):
            raise ParameterError(f"max_false_negative= must be in (0, 1); got {target!r}")
    targets = [None if target is None else DedupParams(max_fn=target).max_fn for target in targets]
    # (None is the pipeline's own target: beside it, that target given is the same setting)
    unique: dict[float, Optional[float]] = {}
    for target in targets:
        unique.setdefault(DEFAULT_MAX_FN if target is None else target, target)
    targets = list(unique.values())
    for kind, n, forms in _shingles(shingle, ngram, unicode, strip_punctuation, strip_symbols):
        for given in threshold:
            for k in num_perm:
                # Checks each value on its own (and its name in the message); a numpy float
                # threshold is taken as the run takes it (by its shortest text: 0.8, not
                # float32's 0.800000011920929, at which the ground truth would be cut).
                t = DedupParams(threshold=given, shingle=kind, ngram=n, num_perm=k, **forms).threshold
                for b, r, why in _bandings(k, bands, rows):
                    if why:
                        notes.append(f"skipped shingle={kind} ngram={n} threshold={similarity_text(t)} "
                                     f"num_perm={k}: {why}")
                        continue
                    if b is not None:
                        settings.append(Setting(k, b, r, kind, n, t, **forms))
                        continue
                    for target in targets:
                        setting = Setting(k, None, None, kind, n, t, target, **forms)
                        try:
                            setting.params().banding()  # targets no b x r <= K meets
                        except ParameterError as error:
                            notes.append(f"skipped {setting.label}: {error}")
                            continue
                        settings.append(setting)
    notes = list(dict.fromkeys(notes))
    if not settings:
        raise ParameterError(f"no setting of the grid can run: {'; '.join(notes)}")
    return list(dict.fromkeys(settings)), notes


def _shingles(shingle, ngram, unicode, strip_punctuation, strip_symbols):
    """(kind, n, normalisation keywords) of every shingle spec of the grid."""
    for kind in shingle:
        for n in ngram:
            if kind == "token":
                yield kind, n, {}
                continue
            for form in unicode:
                for punctuation in strip_punctuation:
                    for symbols in strip_symbols:
                        yield kind, n, {"unicode": form, "strip_punctuation": punctuation,
                                        "strip_symbols": symbols}


def _bandings(num_perm: int, bands, rows):
    """(bands, rows, why-skipped) for one num_perm; (None, None, "") is the chosen banding."""
    for name, values in (("bands", bands), ("rows", rows)):
        for value in values or ():
            if value is not None and (isinstance(value, bool) or not (isinstance(value, (int, np.integer))
                                                                       and value >= 1)):
                raise ParameterError(f"{name}= must be integers >= 1 (or None: chosen); got {value!r}")
    if not bands and not rows:
        yield None, None, ""
        return
    if bands and rows:
        for name, values, other, others in (("bands", bands, "rows", rows), ("rows", rows, "bands", bands)):
            if all(value is None for value in others) and any(value is not None for value in values):
                # (auto chooses bands and rows both: the explicit values would pair with nothing)
                raise ParameterError(f"{name}= is paired only with {other}= auto, which chooses both bands and "
                                     f"rows; give {other}= numbers too, or leave {name}= out")
        pairs = [(b, r) for b in bands for r in rows]
    elif bands:
        pairs = [(b, None if b is None else num_perm // b) for b in bands]
    else:
        pairs = [(None if r is None else num_perm // r, r) for r in rows]
    for b, r in pairs:
        if b is None or r is None:  # "auto" in either list
            yield None, None, ""
            continue
        b, r = int(b), int(r)
        if b == 0:
            yield b, r, f"bands = num_perm // rows = {num_perm} // {r} is 0"
        elif r == 0:
            yield b, r, f"rows = num_perm // bands = {num_perm} // {b} is 0"
        elif b * r > num_perm:
            yield b, r, f"bands * rows = {b} * {r} = {b * r} > num_perm"
        else:
            yield b, r, ""


def parse_list(text: str, kind: Callable[[str], Any] = int, allow_auto: bool = False, name: str = "") -> list:
    """A comma-separated CLI value as a list: "64,128" -> [64, 128]; with ``allow_auto``,
    "auto" becomes None ("8,16,auto" -> [8, 16, None]). Raises ParameterError on a bad item,
    naming the keyword ``name`` where given (the command line says it as its option)."""
    given = f"{name}={text}" if name else repr(text)
    values: list = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if allow_auto and item.lower() == "auto":
            values.append(None)
            continue
        try:
            values.append(kind(item))
        except ValueError:
            what = ITEM_WORDS.get(kind, getattr(kind, "__name__", str(kind))) + (" or auto" if allow_auto else "")
            raise ParameterError(f"cannot read {item!r} in {given}: expected {what}") from None
    if not values:
        raise ParameterError(f"{name}= is an empty list ({text!r})" if name else f"an empty list: {text!r}")
    return values


def unicode_form(text: str) -> Optional[str]:
    """A --unicode list item: "none" -> None, "nfc", "nfkc" as they are; ValueError for others."""
    if text.lower() not in ("none", "nfc", "nfkc"):
        raise ValueError(text)
    return None if text.lower() == "none" else text.lower()


def yes_no(text: str) -> bool:
    """A --strip-punctuation / --strip-symbols list item: yes/no, true/false, 1/0."""
    value = {"yes": True, "true": True, "1": True, "no": False, "false": False, "0": False}.get(text.lower())
    if value is None:
        raise ValueError(text)
    return value


# What each kind of list item is, as parse_list's refusal says it.
ITEM_WORDS: dict[Callable[[str], Any], str] = {
    int: "an integer", float: "a number", yes_no: "yes or no (true/false, 1/0)", unicode_form: "nfc, nfkc or none"}

