"""``cupy_like``: numpy, seen through CuPy's API -- an array module for running the code that
gpudedup writes against ``xp`` on the host, the way it runs on a GPU.

Code written against ``xp`` takes its numpy-only fast paths when ``xp is numpy``; with this
module it takes the paths meant for CuPy instead. Its arrays are ``DeviceArray``s: numpy arrays
behind a wall that stands for the PCIe bus, refusing what real CuPy refuses (checked against the
installed CuPy, which imports without a GPU):
- every ``xp.<name>`` and every array attribute or method must exist in CuPy
  (``cupy.ndarray`` has no ``resize``, ``ctypes``, ``__index__``, ``__contains__``, ...), and the
  keyword arguments of a call must be ones CuPy's function takes;
- implicit conversion to numpy: ``np.asarray(device)``, ``__array__``, the buffer protocol, a
  device array handed to pyarrow; only ``.get()`` / ``xp.asnumpy`` copy to the host;
- a host numpy array where CuPy wants a device array (a ufunc or function argument other than
  ``xp.asarray``'s); numpy functions on device arrays dispatch to CuPy's as CuPy's
  ``__array_function__`` does, and fail where CuPy has no such function;
- reductions give 0-d device arrays, not numpy scalars (``int(x)`` works, ``range(x)`` does not);
- ``argsort(..., kind=...)``: CuPy's sort is always stable and takes no kind but "stable";
- ``repeat`` with an array of counts: refused by CuPy before 14.1.
The data are plain numpy arrays, so results compare exactly with the numpy backend.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable

import numpy as np
import pytest
from numpy.lib.mixins import NDArrayOperatorsMixin

cupy = pytest.importorskip(
    "cupy", reason="the cupy_like checks compare with CuPy's API: pip install cupy-cuda12x (no GPU needed)"
)

# CuPy's own message for np.asarray(cupy_array) (cupy/_core/core.pyx, ndarray.__array__).
IMPLICIT_CONVERSION = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a "
                       "NumPy array explicitly.")

# What a cupy.ndarray offers; anything else is refused on a DeviceArray.
CUPY_ARRAY_ATTRIBUTES = frozenset(dir(cupy.ndarray))

# Functions that take host data on purpose (the host-to-device and device-to-host copies).
HOST_INPUT_FUNCTIONS = frozenset({"asarray", "array"})


class DeviceArray(NDArrayOperatorsMixin):
    """A numpy array standing for device memory: operators, indexing, attributes and methods as
    a cupy.ndarray offers them, results on the device; no implicit way to the host."""

    __slots__ = ("_data",)

    def __init__(self, data: np.ndarray):
        self._data = data

    # --- the wall ------------------------------------------------------------------------

    def __array__(self, *args: Any, **kwargs: Any):
        raise TypeError(IMPLICIT_CONVERSION)

    def get(self, stream=None, order="C", out=None, blocking=True) -> np.ndarray:
        """The device-to-host copy (cupy.ndarray.get)."""
        return np.array(self._data, order=order, copy=True)

    def __getattr__(self, name: str):
        if name.startswith("__") or name not in CUPY_ARRAY_ATTRIBUTES:
            raise AttributeError(f"cupy.ndarray has no attribute {name!r}")
        value = getattr(self._data, name)
        if callable(value):
            return _on_device(value, getattr(cupy.ndarray, name, None), f"cupy.ndarray.{name}")
        return _to_device(value)

    # --- what cupy.ndarray implements itself ---------------------------------------------

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if kwargs.get("out") is not None:
            kwargs["out"] = tuple(_from_device(o, ufunc.__name__) for o in kwargs["out"])
        result = getattr(ufunc, method)(*(_from_device(i, ufunc.__name__) for i in inputs), **kwargs)
        return _to_device(result)

    def __array_function__(self, func, types, args, kwargs):
        # CuPy runs np.<name>(device arrays) as cupy.<name>, and fails where it has none.
        if not hasattr(cupy, func.__name__):
            return NotImplemented
        return getattr(cupy_like, func.__name__)(*args, **kwargs)

    def __getitem__(self, key):
        return _to_device(self._data[_from_device(key, "__getitem__")])

    def __setitem__(self, key, value) -> None:
        self._data[_from_device(key, "__setitem__")] = _from_device(value, "__setitem__")

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self):
        return (_to_device(item) for item in self._data)

    def __int__(self) -> int:
        return int(self._data)

    def __float__(self) -> float:
        return float(self._data)

    def __complex__(self) -> complex:
        return complex(self._data)

    def __bool__(self) -> bool:
        return bool(self._data)

    def __repr__(self) -> str:
        return f"cupy_like.DeviceArray({self._data!r})"


def device_buffer(array: DeviceArray) -> np.ndarray:
    """The memory behind a device array, for the host kernels: what a device pointer is to a
    RawKernel (kernels write their outputs through it)."""
    return array._data


def _to_device(value):
    """A result as CuPy gives it: arrays and numpy scalars become device arrays (CuPy's
    reductions return 0-d arrays); tuples and lists of them likewise."""
    if isinstance(value, (np.ndarray, np.generic)):
        return DeviceArray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(_to_device(v) for v in value)
    if isinstance(value, list):
        return [_to_device(v) for v in value]
    return value


def _from_device(value, where: str, host_allowed: bool = False):
    """An argument as numpy sees it: device arrays unwrapped; a host array refused as CuPy
    refuses it (except where ``host_allowed``: the copies to the device)."""
    if isinstance(value, DeviceArray):
        return value._data
    if isinstance(value, np.ndarray) and not host_allowed:
        raise TypeError(f"{where}: Unsupported type {type(value)} (a host numpy array where CuPy needs a "
                        "cupy.ndarray: copy it to the device with xp.asarray first)")
    if isinstance(value, (tuple, list)):
        return type(value)(_from_device(v, where, host_allowed) for v in value)
    if isinstance(value, slice):
        return slice(*(_from_device(v, where, host_allowed) for v in (value.start, value.stop, value.step)))
    return value


def _check_keywords(cupy_function, kwargs: dict, where: str) -> None:
    """Refuse keyword arguments that CuPy's function does not take (numpy's may take more)."""
    if not kwargs or cupy_function is None:
        return
    try:
        parameters = inspect.signature(cupy_function).parameters
    except (TypeError, ValueError):  # a ufunc or a Cython method without a signature
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = sorted(set(kwargs) - set(parameters))
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r} (CuPy takes "
                        f"{', '.join(parameters)})")


def _on_device(function: Callable, cupy_function, where: str, host_allowed: bool = False) -> Callable:
    """``function`` (numpy's) called as CuPy's: arguments from the device, results to it."""

    def call(*args, **kwargs):
        _check_keywords(cupy_function, kwargs, where)
        args = tuple(_from_device(a, where, host_allowed=host_allowed) for a in args)
        kwargs = {k: _from_device(v, where, host_allowed=host_allowed) for k, v in kwargs.items()}
        return _to_device(function(*args, **kwargs))

    call.__name__ = where
    return call


def _argsort(a, axis=-1, kind=None):
    if kind not in (None, "stable"):
        raise TypeError("cupy.argsort accepts only kind=None or 'stable' (its sort is always stable)")
    return np.argsort(a, axis=axis, kind="stable")


def _repeat(a, repeats, axis=None):
    if isinstance(repeats, np.ndarray):
        raise ValueError("cupy.ndarray cannot be specified as repeats (CuPy < 14.1)")
    return np.repeat(a, repeats, axis=axis)


def _asarray(a, dtype=None, order=None, *, copy=None, blocking=False):
    # A host array is copied to the device: later writes to either side do not show on the other.
    if isinstance(a, DeviceArray):
        return np.asarray(a._data, dtype=dtype, order=order)
    return np.array(a, dtype=dtype, order=order or "K", copy=True)


def _asnumpy(a, stream=None, order="C", out=None, blocking=True):
    return a.get(order=order) if isinstance(a, DeviceArray) else np.asarray(a, order=order)


_OVERRIDES = {"argsort": _argsort, "repeat": _repeat, "asarray": _asarray}


class CupyLikeNumpy(types.ModuleType):
    def __init__(self):
        super().__init__("cupy_like")
        self.looked_up: set[str] = set()
        self.ndarray = DeviceArray

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if not hasattr(cupy, name):
            raise AttributeError(f"cupy has no {name!r}: code written against xp cannot use it")
        if name in ("cuda",):  # device-only parts of CuPy: absent on the host
            raise AttributeError(name)
        self.looked_up.add(name)
        if name == "asnumpy":
            return _asnumpy
        value = _OVERRIDES.get(name) or getattr(np, name)
        if isinstance(value, type) or not callable(value):  # dtypes (xp.uint64) and constants
            return value
        return _on_device(value, getattr(cupy, name), f"cupy.{name}", host_allowed=name in HOST_INPUT_FUNCTIONS)


cupy_like = CupyLikeNumpy()
