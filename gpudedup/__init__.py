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
``pair_jaccard`` (exact verification) and ``find_clusters``. Importing gpudedup never imports
cupy or cudf.
"""

__version__ = "0.1.0"

import importlib

# The public names and the modules that define them, imported on first use (PEP 562): the
# `gpudedup` command installs its signal handlers before numpy, pyarrow and scipy are loaded,
# so that a Ctrl-C during those imports already ends it with one line (console.py).
_EXPORTS = {
    "dedup": "api", "DedupResult": "api", "find_clusters": "cluster",
    "GpudedupError": "errors", "InputError": "errors", "OutputError": "errors", "ParameterError": "errors",
    "BackendUnavailableError": "errors", "Permutations": "hashing", "draw_permutations": "hashing",
    "Banding": "lsh", "band_keys": "lsh", "candidate_pairs": "lsh", "choose_bands": "lsh",
    "collision_probability": "lsh", "minhash_signatures": "minhash", "normalize_text": "normalize",
    "DedupParams": "params", "ShingleBatch": "shingling", "ShingleSpec": "shingling",
    "shingle_hashes": "shingling", "shingle_sets": "shingling", "pair_jaccard": "verify",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module 'gpudedup' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
