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

``cupy.cuda``'s streams, events and pinned memory have stand-ins here too (``Stream``,
``Event``, ``alloc_pinned_memory``, ``get_current_stream``; not reachable as ``cupy_like.cuda``,
which stays absent like every device-only part), held to CUDA's rules where a mistake would
not show on the host: work runs at once, but a stream keeps the order of what was queued on it
(a log), and an asynchronous copy from pinned memory (``DeviceArray.set(host, stream=)``) is
complete only once the host has waited for it (``Event.synchronize``, ``Stream.synchronize``):
if its source changed before that wait, the wait raises, because on a GPU the copy could have
read the new bytes.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import types
from typing import Any, Callable, Iterator, Optional

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

    def set(self, arr, stream=None) -> None:
        """The host-to-device copy into this array (cupy.ndarray.set): asynchronous on
        ``stream`` when one is given (then its source must stay unchanged until the host has
        waited for it, when it is pinned memory; see Stream), synchronous otherwise."""
        if not isinstance(arr, np.ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if self._data.dtype != arr.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self._data.dtype} array")
        if self._data.shape != arr.shape:
            raise ValueError("Shape mismatch")
        self._data[...] = arr
        target = stream if stream is not None else get_current_stream()
        target.queue_copy(arr, asynchronous=stream is not None)

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


def _logged_host_copies(call: Callable, where: str) -> Callable:
    """xp.asarray / xp.array: a host argument is a host-to-device copy, which CuPy stages
    through pinned memory of its own on the current stream; logged there, so that tests can
    tell these copies from the backend's own."""

    def copy(a, *args, **kwargs):
        result = call(a, *args, **kwargs)
        if not isinstance(a, DeviceArray):
            get_current_stream().log_operation(f"{where} copy", f"{result.nbytes} bytes")
        return result

    copy.__name__ = where
    return copy


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
        call = _on_device(value, getattr(cupy, name), f"cupy.{name}", host_allowed=name in HOST_INPUT_FUNCTIONS)
        return _logged_host_copies(call, name) if name in HOST_INPUT_FUNCTIONS else call


cupy_like = CupyLikeNumpy()


# --- cupy.cuda's streams, events and pinned memory ---------------------------------------------


class PinnedMemory(bytearray):
    """cupy.cuda.PinnedMemoryPointer: ``size`` bytes of page-locked host memory, viewed with
    ``np.frombuffer`` as CuPy's is. ``allocations`` counts them (staging buffers are reused)."""

    allocations = 0
    _count_lock = threading.Lock()

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size
        with PinnedMemory._count_lock:
            PinnedMemory.allocations += 1


def alloc_pinned_memory(size: int) -> PinnedMemory:
    """cupy.cuda.alloc_pinned_memory."""
    return PinnedMemory(size)


def is_pinned(array: np.ndarray) -> bool:
    """Whether a host array is a view of PinnedMemory."""
    base = array
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.obj if isinstance(base, memoryview) else base.base
    return isinstance(base, PinnedMemory)


class Event:
    """cupy.cuda.Event recorded on a stream: it covers the stream's first ``upto`` operations."""

    def __init__(self, stream: "Stream", upto: int):
        self.stream, self.upto = stream, upto

    def synchronize(self) -> None:
        """The host waits for the covered operations: they are complete."""
        self.stream.log_operation("event synchronize", f"{self.upto} operations")
        self.stream.complete(self.upto)


class Stream:
    """cupy.cuda.Stream(non_blocking=True) on the host.

    Work runs at once (the arrays are numpy's), and the stream keeps what was queued on it:
    ``operations`` counts them, and inside ``recording()`` every operation, record, wait and
    synchronisation of every stream goes to one log, in the order they happened.
    ``handed_off`` is how many of its operations another stream waited for or the host did;
    ``completed``, how many the host waited for. Asynchronous copies from pinned memory stay
    pending until completed, with a snapshot of their source: completing one whose source
    changed meanwhile raises RuntimeError.
    """

    log: Optional[list[tuple[str, str, str]]] = None  # (stream name, operation, detail): recording()
    _log_lock = threading.Lock()
    _count = 0

    def __init__(self, non_blocking: bool = True, name: str | None = None):
        with Stream._log_lock:
            Stream._count += 1
            self.name = name or f"stream-{Stream._count}"
        self.operations = 0
        self.handed_off = 0
        self.completed = 0
        self.pending_copies: list[tuple[int, np.ndarray, np.ndarray]] = []  # (index, source, snapshot)
        self._lock = threading.Lock()

    def log_operation(self, operation: str, detail: str = "") -> int:
        """Queue an operation (and log it); returns how many the stream has queued now."""
        with self._lock:
            self.operations += 1
            index = self.operations
        self._note(operation, detail)
        return index

    def _note(self, operation: str, detail: str = "") -> None:
        with Stream._log_lock:
            if Stream.log is not None:
                Stream.log.append((self.name, operation, detail))

    def queue_copy(self, source: np.ndarray, asynchronous: bool) -> None:
        pinned = is_pinned(source)
        kind = "async copy" if asynchronous else "copy"
        index = self.log_operation(kind, f"{source.nbytes} bytes {'pinned' if pinned else 'pageable'}")
        if asynchronous and pinned:  # from pageable memory CUDA copies before it returns
            with self._lock:
                self.pending_copies.append((index, source, source.copy()))

    def record(self, event=None) -> Event:
        self._note("record", f"{self.operations} operations")
        return Event(self, self.operations)

    def wait_event(self, event: Event) -> None:
        """This stream waits for the event: the event's operations are handed off to it."""
        self._note("wait", f"{event.stream.name} up to {event.upto}")
        with event.stream._lock:
            event.stream.handed_off = max(event.stream.handed_off, event.upto)

    def synchronize(self) -> None:
        self._note("synchronize", f"{self.operations} operations")
        self.complete(self.operations)

    def complete(self, upto: int) -> None:
        """The host has waited for the first ``upto`` operations."""
        with self._lock:
            self.completed = max(self.completed, upto)
            self.handed_off = max(self.handed_off, upto)
            done = [copy for copy in self.pending_copies if copy[0] <= upto]
            self.pending_copies = [copy for copy in self.pending_copies if copy[0] > upto]
        for index, source, snapshot in done:
            if not np.array_equal(source, snapshot):
                raise RuntimeError(f"{self.name}: the source of asynchronous copy {index} (pinned memory) "
                                   "changed before the host waited for the copy to complete")

    def __enter__(self) -> "Stream":
        _current_streams().append(self)
        return self

    def __exit__(self, *exc) -> None:
        _current_streams().pop()


_threads = threading.local()
null_stream = Stream(non_blocking=False, name="null")


def _current_streams() -> list:
    if not hasattr(_threads, "streams"):
        _threads.streams = []
    return _threads.streams


def get_current_stream() -> Stream:
    """cupy.cuda.get_current_stream: the innermost stream made current on this thread, or the
    (legacy) null stream."""
    streams = _current_streams()
    return streams[-1] if streams else null_stream


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[str, str, str]]]:
    """Every stream's operations, records, waits and synchronisations inside the context, in
    order, as (stream name, operation, detail): the list yielded."""
    log: list[tuple[str, str, str]] = []
    with Stream._log_lock:
        previous, Stream.log = Stream.log, log
    try:
        yield log
    finally:
        with Stream._log_lock:
            Stream.log = previous
