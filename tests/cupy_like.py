"""``cupy_like``: numpy, seen through CuPy's API -- an array module for running the code that
gpudedup writes against ``xp`` on the host, the way it runs on a GPU.

Code written against ``xp`` takes its numpy-only fast paths when ``xp is numpy``; with this
module it takes the paths meant for CuPy instead, and every ``xp.<name>`` it looks up must
exist in CuPy (checked against the installed CuPy, which imports without a GPU). Calls that
CuPy accepts differently from numpy are refused the way CuPy refuses them:
- ``argsort(..., kind=...)``: CuPy's sort is always stable and takes no kind but "stable";
- ``repeat`` with an array of counts: refused by CuPy before 14.1.
The arrays are plain numpy arrays, so results compare exactly with the numpy backend.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

cupy = pytest.importorskip(
    "cupy", reason="the cupy_like checks compare with CuPy's API: pip install cupy-cuda12x (no GPU needed)"
)


def _argsort(a, axis=-1, kind=None):
    if kind not in (None, "stable"):
        raise TypeError("cupy.argsort accepts only kind=None or 'stable' (its sort is always stable)")
    return np.argsort(a, axis=axis, kind="stable")


def _repeat(a, repeats, axis=None):
    if isinstance(repeats, np.ndarray):
        raise ValueError("cupy.ndarray cannot be specified as repeats (CuPy < 14.1)")
    return np.repeat(a, repeats, axis=axis)


_OVERRIDES = {"argsort": _argsort, "repeat": _repeat}


class CupyLikeNumpy(types.ModuleType):
    def __init__(self):
        super().__init__("cupy_like")
        self.looked_up: set[str] = set()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if not hasattr(cupy, name):
            raise AttributeError(f"cupy has no {name!r}: code written against xp cannot use it")
        if name in ("cuda",):  # device-only parts of CuPy: absent on the host
            raise AttributeError(name)
        self.looked_up.add(name)
        if name in _OVERRIDES:
            return _OVERRIDES[name]
        return getattr(np, name)


cupy_like = CupyLikeNumpy()
