"""The one switch for the CPU's compiled (numba) kernels.

The numpy backend's shingling (backends/cpu_kernels.py) and the exact verification's merge
(verify_kernels.py) each have a numba route and a numpy / scipy reference route that gives the
same results bit for bit. The compiled route is taken where numba is installed, unless the
environment sets GPUDEDUP_CPU_KERNELS=numpy (to compare, or to rule the kernels out). Numba is
imported only when a kernel module is asked for, never when gpudedup is.
"""

from __future__ import annotations

import os

# The environment switch: "numpy" (any case) keeps every CPU step on its reference route.
KERNEL_SWITCH = "GPUDEDUP_CPU_KERNELS"


def kernels_on() -> bool:
    """Whether a CPU step takes its numba route: numba is installed (the GPU image has none) and
    GPUDEDUP_CPU_KERNELS is not "numpy". Read on each call, so a switch set in the environment
    later (a test) applies to the next caller, which then imports its kernel module itself."""
    if os.environ.get(KERNEL_SWITCH, "").strip().lower() == "numpy":
        return False
    try:
        import numba  # noqa: F401  (only to learn whether it is there)
    except ImportError:
        return False
    return True
