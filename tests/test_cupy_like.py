"""The stand-in for CuPy (tests/cupy_like.py) refuses what CuPy refuses, judged against the
installed CuPy's own API (its ndarray's attributes and its functions' signatures, read without a
GPU) and its documented behaviour: no implicit copy of device memory to the host, no host array
where a device array is needed, 0-d arrays from reductions. Allowed operations give numpy's
values. Its stand-ins for cupy.cuda's streams, events and pinned memory keep CUDA's ordering
rules: an asynchronous copy from pinned memory completes only when the host waits for it, and
a source changed before then is caught.
"""

from __future__ import annotations

import inspect

import numpy as np
import pyarrow as pa
import pytest

import cupy_like as cuda_like
from cupy_like import CUPY_ARRAY_ATTRIBUTES, IMPLICIT_CONVERSION, DeviceArray, cupy, cupy_like as xp


@pytest.fixture
def device():
    return xp.asarray(np.arange(6, dtype=np.int64))


@pytest.mark.parametrize("convert", [np.asarray, np.array, np.ascontiguousarray, memoryview, pa.array,
                                     lambda a: np.testing.assert_array_equal(a, np.arange(6))],
                         ids=["asarray", "array", "ascontiguousarray", "memoryview", "pyarrow", "testing"])
def test_no_implicit_conversion_to_the_host(device, convert):
    # cupy.ndarray.__array__ raises TypeError(IMPLICIT_CONVERSION); it has no buffer protocol,
    # and pyarrow cannot read it without __array__.
    with pytest.raises((TypeError, pa.ArrowInvalid)):
        convert(device)


def test_explicit_copies_to_the_host(device):
    assert isinstance(device.get(), np.ndarray) and isinstance(xp.asnumpy(device), np.ndarray)
    np.testing.assert_array_equal(device.get(), np.arange(6))
    copy = device.get()
    copy[0] = 99  # a copy, not the device memory
    assert int(device[0]) == 0
    with pytest.raises(TypeError, match="Implicit conversion"):
        device.__array__()
    assert "Implicit conversion to a NumPy array is not allowed" in IMPLICIT_CONVERSION


def test_host_arrays_are_copied_to_the_device():
    host = np.arange(4)
    device = xp.asarray(host)
    host[0] = 7
    assert int(device[0]) == 0  # the device copy does not see later host writes


@pytest.mark.parametrize("name", ["resize", "ctypes", "setflags", "getfield", "to_device"])
def test_array_attributes_cupy_lacks_are_refused(device, name):
    assert hasattr(np.ndarray, name) and name not in CUPY_ARRAY_ATTRIBUTES
    with pytest.raises(AttributeError, match=name):
        getattr(device, name)


def test_array_attributes_cupy_has_work(device):
    assert device.shape == (6,) and device.dtype == np.int64 and device.ndim == 1 and device.size == 6
    assert isinstance(device.astype(np.uint64), DeviceArray)
    assert device.reshape(2, 3).shape == (2, 3)
    assert device.tolist() == list(range(6))
    assert isinstance(device.T, DeviceArray)


def test_reductions_are_0d_device_arrays(device):
    total = xp.sum(device)
    assert isinstance(total, DeviceArray) and total.shape == ()
    assert int(total) == 15 and float(device.max()) == 5.0 and bool(device.any())
    # cupy.ndarray has no __index__: a 0-d array is no Python integer
    assert "__index__" not in CUPY_ARRAY_ATTRIBUTES
    with pytest.raises(TypeError):
        range(total)


@pytest.mark.parametrize("call", [lambda d: xp.concatenate([d, np.arange(2)]), lambda d: d + np.arange(6),
                                  lambda d: np.arange(6) + d, lambda d: d[np.array([0, 1])],
                                  lambda d: xp.take(np.arange(10), d)],
                         ids=["concatenate", "operator", "reflected operator", "index", "take"])
def test_host_arrays_are_refused_where_device_arrays_are_needed(device, call):
    with pytest.raises(TypeError, match="Unsupported type"):
        call(device)


def test_keyword_arguments_cupy_lacks_are_refused(device):
    assert "sorted" in inspect.signature(np.unique).parameters  # numpy >= 2.3
    assert "sorted" not in inspect.signature(cupy.unique).parameters
    with pytest.raises(TypeError, match="unexpected keyword argument 'sorted'"):
        xp.unique(device, sorted=True)
    with pytest.raises(TypeError, match="kind"):
        xp.argsort(device, kind="quicksort")
    with pytest.raises(ValueError, match="repeats"):
        xp.repeat(device, xp.asarray(np.ones(6, np.int64)))
    np.testing.assert_array_equal(xp.unique(device, return_counts=True)[1].get(), np.ones(6))


def test_numpy_functions_on_device_arrays_run_as_cupy_functions(device):
    # cupy.ndarray.__array_function__ dispatches np.<name> to cupy.<name>
    assert isinstance(np.concatenate([device, device]), DeviceArray)
    np.testing.assert_array_equal(np.cumsum(device).get(), np.cumsum(np.arange(6)))


def test_names_cupy_lacks_are_refused():
    assert hasattr(np, "frompyfunc") and not hasattr(cupy, "frompyfunc")
    with pytest.raises(AttributeError, match="cupy has no"):
        _ = xp.frompyfunc
    with pytest.raises(AttributeError):
        _ = xp.cuda  # device-only parts are absent on the host


# --- streams, events, pinned memory ------------------------------------------------------------


def pinned_view(values: np.ndarray) -> np.ndarray:
    view = np.frombuffer(cuda_like.alloc_pinned_memory(values.nbytes), values.dtype, values.size)
    view[...] = values
    return view


def test_pinned_memory_is_recognised_through_views():
    view = pinned_view(np.arange(8, dtype=np.int64))
    assert cuda_like.is_pinned(view) and cuda_like.is_pinned(view[2:5]) and cuda_like.is_pinned(view.view(np.uint8))
    assert not cuda_like.is_pinned(np.arange(8)) and not cuda_like.is_pinned(view.copy())


def test_an_async_copy_delivers_the_source_and_completes_at_the_hosts_wait():
    stream = cuda_like.Stream()
    source = pinned_view(np.arange(10, dtype=np.uint32))
    device = xp.empty(10, dtype=np.uint32)
    with cuda_like.recording() as log:
        device.set(source, stream=stream)
        event = stream.record()
        assert stream.pending_copies and stream.completed == 0
        event.synchronize()
    np.testing.assert_array_equal(device.get(), np.arange(10))
    assert not stream.pending_copies and stream.completed == stream.handed_off == 1
    assert [entry[1] for entry in log] == ["async copy", "record", "event synchronize"]
    assert log[0] == (stream.name, "async copy", "40 bytes pinned")
    source[:] = 7  # after the wait: the buffer is free to be written again
    stream.synchronize()


def test_a_pinned_source_changed_before_the_wait_is_caught():
    # On a GPU the copy may run after the host wrote the buffer again: the bytes would be wrong.
    stream = cuda_like.Stream()
    source = pinned_view(np.arange(10, dtype=np.uint32))
    xp.empty(10, dtype=np.uint32).set(source, stream=stream)
    event = stream.record()
    source[3] = 99
    with pytest.raises(RuntimeError, match="changed before the host waited"):
        event.synchronize()


def test_copies_from_pageable_memory_and_synchronous_copies_are_not_pending():
    stream = cuda_like.Stream()
    source = np.arange(4, dtype=np.int64)
    xp.empty(4, dtype=np.int64).set(source, stream=stream)  # CUDA copies pageable memory before returning
    xp.empty(4, dtype=np.int64).set(pinned_view(source))  # no stream: synchronous
    assert not stream.pending_copies
    with pytest.raises(ValueError, match="Shape mismatch"):
        xp.empty(3, dtype=np.int64).set(source)
    with pytest.raises(TypeError, match="cannot be set"):
        xp.empty(4, dtype=np.int32).set(source)


def test_current_streams_and_hand_offs():
    first, second = cuda_like.Stream(), cuda_like.Stream()
    assert cuda_like.get_current_stream() is cuda_like.null_stream
    with first:
        assert cuda_like.get_current_stream() is first
        with second:
            assert cuda_like.get_current_stream() is second
        assert cuda_like.get_current_stream() is first
    assert cuda_like.get_current_stream() is cuda_like.null_stream
    first.log_operation("launch", "k")
    first.log_operation("launch", "k")
    event = first.record()
    first.log_operation("launch", "k")
    second.wait_event(event)  # another stream waits: handed off, not complete for the host
    assert (first.handed_off, first.completed, first.operations) == (2, 0, 3)
    first.synchronize()
    assert first.handed_off == first.completed == 3


def test_asarray_copies_are_logged_on_the_current_stream():
    stream = cuda_like.Stream()
    with cuda_like.recording() as log, stream:
        device = xp.asarray(np.arange(3, dtype=np.int64))
        xp.asarray(device, dtype=np.uint64)  # on the device already: no copy from the host
        xp.array([1.0, 2.0])
    assert log == [(stream.name, "asarray copy", "24 bytes"), (stream.name, "array copy", "16 bytes")]
