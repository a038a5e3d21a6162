"""Every kernel in kernels/, with every tunable combination the tests cover, compiles with NVRTC
through CuPy -- without a GPU (DESIGN.md, "Testing without a GPU", point 1).

Needs ``pip install cupy-cuda12x nvidia-cuda-nvrtc-cu12`` (no driver, no device, no CUDA
toolkit); skips when CuPy cannot be imported.

Why not cupy.RawModule(...).compile() or cupy.cuda.compiler.compile_using_nvrtc(): both ask the
current device for its compute capability (compile_using_nvrtc even when ``arch`` is given,
through a per-device memoised helper), which raises cudaErrorInsufficientDriver on a machine
without a driver. So the test drives CuPy's NVRTC binding (cupy.cuda.nvrtc, the module those
functions call) directly, with the options CuPy's RawModule path adds itself:
``-ftz=true`` (compile_with_cache), ``-arch=sm_XX`` and ``--device-as-default-execution-space``
(compile_using_nvrtc). It builds cubins, so ptxas runs too: too much shared memory or too
many registers for a block size fail here, and register spills are reported.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudedup.backends.cuda_kernels import CUPY_IMPLICIT_OPTIONS, compile_options, kernel_source
from gpudedup.backends.kernel_tunables import KERNEL_TUNABLES

try:
    import cupy  # noqa: F401  (importing CuPy needs no GPU and no driver)
    from cupy.cuda import nvrtc
except ImportError as error:
    pytest.skip(
        f"CuPy is not importable ({error}); the NVRTC compile tests need "
        "`pip install cupy-cuda12x nvidia-cuda-nvrtc-cu12` (no GPU needed)",
        allow_module_level=True,
    )

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "kernels"
HOST = Path(__file__).resolve().parent / "kernel_host"


# The kernels each file must define, unmangled (extern "C"), for RawModule.get_function.
KERNEL_NAMES = {
    "minhash.cu": ["minhash_signatures_u64"],
    "band_keys.cu": ["band_keys_u32"],
    "shingle_hash.cu": ["span_hashes_u32"],
}

# Turing, Ampere, Hopper, Blackwell (consumer). NVRTC 12.x still accepts sm_70 with a
# deprecation warning; CuPy's own minimum moves with its releases.
ARCHS = ["75", "80", "90", "120"]

CUPY_OPTIONS = CUPY_IMPLICIT_OPTIONS


def nvrtc_compile(file_name: str, defines: dict, arch: str, cupy_options=CUPY_OPTIONS) -> tuple[bytes, str]:
    """(cubin, compiler log) of kernels/<file_name> exactly as the GPU backend compiles it
    (cuda_kernels.kernel_source and compile_options); raises with NVRTC's log on an error."""
    options = (
        *compile_options(defines),
        *cupy_options,
        f"-arch=sm_{arch}",
        "--ptxas-options=-v",  # resource usage (registers, spills, shared memory) in the log
    )
    program = nvrtc.createProgram(kernel_source(file_name), file_name, (), ())
    try:
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError as error:
            log = nvrtc.getProgramLog(program)
            pytest.fail(f"NVRTC failed on {file_name} with {options}:\n{error}\n{log}")
        log = nvrtc.getProgramLog(program)
        return nvrtc.getCUBIN(program), log.decode() if isinstance(log, bytes) else log
    finally:
        nvrtc.destroyProgram(program)


CASES = [
    pytest.param(file_name, defines, arch, id=f"{file_name}-{defines or 'defaults'}-sm_{arch}")
    for file_name, combos in KERNEL_TUNABLES.items()
    for defines in combos
    for arch in ARCHS
]


def test_every_kernel_file_is_covered():
    assert sorted(KERNEL_NAMES) == sorted(path.name for path in KERNELS.glob("*.cu")) == sorted(KERNEL_TUNABLES)


@pytest.mark.parametrize("file_name, defines, arch", CASES)
def test_kernel_compiles_with_nvrtc(file_name, defines, arch):
    cubin, log = nvrtc_compile(file_name, defines, arch)
    for kernel in KERNEL_NAMES[file_name]:
        assert kernel.encode() + b"\0" in cubin, f"{kernel} missing or mangled in the cubin"
    messages = [line for line in log.splitlines() if "warning" in line.lower() or "error" in line.lower()]
    assert not messages, log
    # Local memory (a stack frame, register spills) would make a tunable choice silently slow:
    # the per-thread arrays of minhash.cu must live in registers.
    assert not re.search(r"\b[1-9]\d* bytes (stack frame|spill stores|spill loads)", log), log


def test_kernels_compile_without_cupy_options():
    # A loader that calls NVRTC (or nvcc) without CuPy's --device-as-default-execution-space
    # must get the same kernels: every device function is annotated.
    for file_name, names in KERNEL_NAMES.items():
        cubin, _ = nvrtc_compile(file_name, {}, "80", cupy_options=())
        assert all(name.encode() + b"\0" in cubin for name in names)
