"""gpudedup: near-duplicate detection for large text collections.

MinHash signatures and LSH banding on the GPU (CuPy) or the CPU (numpy), bit for bit the same,
then exact Jaccard verification of the candidate pairs and one kept document per cluster.

    >>> import gpudedup
    >>> result = gpudedup.dedup(["the cat sat on the mat", "the cat sat on the mat!"], shingle="char")
    >>> result.keep
    array([ True, False])

The stages are public too (each takes and returns host numpy arrays on the numpy backend):
``shingle_hashes`` / ``shingle_sets`` (texts -> per-document 64-bit shingle hashes),
``minhash_signatures`` (-> uint32 (n, K)), ``band_keys`` and ``candidate_pairs`` (LSH),
``pair_jaccard`` (exact verification) and ``find_clusters``. ``Index`` is a persistent index
that deduplicates new data against everything kept before; ``Remote`` names an input file or
folder by URL (``s3://``, ``gs://``, ...) in a list of inputs. Importing gpudedup never imports
cupy or cudf.
"""

from .version import __version__

# The public names are imported on first use (PEP 562), all at once: `import gpudedup` stays
# light, so the `gpudedup` command installs its signal handlers before numpy, pyarrow and scipy
# are loaded, and a Ctrl-C during those imports already ends it with one line (console.py).
__all__ = [
    "dedup", "Index", "DedupResult", "DedupParams", "ShingleSpec", "ShingleBatch", "Permutations", "Banding",
    "normalize_text", "shingle_hashes", "shingle_sets", "draw_permutations", "minhash_signatures",
    "choose_bands", "collision_probability", "band_keys", "candidate_pairs", "pair_jaccard",
    "find_clusters", "GpudedupError", "InputError", "OutputError", "ParameterError",
    "BackendUnavailableError", "Remote", "__version__",
]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module 'gpudedup' has no attribute {name!r}")
    if name == "Index":
        from .index import Index  # (start-up: a run that uses no index loads none of it)

        globals()["Index"] = Index
        return Index
    # (start-up: `import gpudedup` loads a module when a name of it is first used)
    from . import api, errors, params
    from .results import result
    from .core import cluster, hashing, lsh, minhash, normalize, shingling, verify
    from .io import storage

    homes = {
        api: ("dedup",), result: ("DedupResult",), cluster: ("find_clusters",),
        errors: ("BackendUnavailableError", "GpudedupError", "InputError", "OutputError", "ParameterError"),
        hashing: ("Permutations", "draw_permutations"),
        lsh: ("Banding", "band_keys", "candidate_pairs", "choose_bands", "collision_probability"),
        minhash: ("minhash_signatures",), normalize: ("normalize_text",), params: ("DedupParams",),
        shingling: ("ShingleBatch", "ShingleSpec", "shingle_hashes", "shingle_sets"), verify: ("pair_jaccard",),
        storage: ("Remote",),
    }
    loaded = {key: getattr(module, key) for module, names in homes.items() for key in names}
    globals().update(loaded)  # from now on plain attributes
    return loaded[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
