"""The one switch for the CPU's compiled (numba) kernels.

The numpy backend's shingling (backends/cpu_kernels.py) and the exact verification's merge
(verify_kernels.py) each have a numba route and a numpy / scipy reference route that gives the
same results bit for bit. The compiled route is taken where numba is installed, unless the
environment sets GPUDEDUP_CPU_KERNELS=numpy (to compare, or to rule the kernels out). Numba is
imported only when a kernel module is asked for, never when gpudedup is. Every kernel is made
by ``kernel``, which keeps numba's cache of compiled code out of the package folder.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


def cache_folder() -> Path:
    """Where the kernels' compiled code is cached: ``$XDG_CACHE_HOME/gpudedup/numba`` (default
    ``~/.cache``), unless the user named a folder with numba's own NUMBA_CACHE_DIR.

    Not numba's default, a ``__pycache__`` beside the kernel's module: ``pip uninstall`` does not
    know those files, and the ``gpudedup/`` folder they leave in site-packages is then imported
    as a namespace package ahead of a later editable install.
    """
    import numba

    if numba.config.CACHE_DIR:  # type: ignore[attr-defined]  # numba makes its settings at run time
        return Path(numba.config.CACHE_DIR)  # type: ignore[attr-defined]
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gpudedup" / "numba"


@contextlib.contextmanager
def _numba_cache_dir(folder: Path) -> Iterator[None]:
    # numba picks a function's cache folder when the function is decorated, from the
    # process-wide config.CACHE_DIR; it is set only while ours are, so that other numba users in
    # the process are untouched. Where the folder cannot be written, numba falls back to its
    # own choice.
    import numba

    settings: Any = numba.config
    saved = settings.CACHE_DIR
    settings.CACHE_DIR = str(folder)
    try:
        yield
    finally:
        settings.CACHE_DIR = saved


def kernel(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """Decorator: ``numba.njit(cache=True, nogil=True, **options)``, cached in ``cache_folder()``."""
    import numba

    def decorate(function: Callable[..., Any]) -> Any:
        with _numba_cache_dir(cache_folder()):
            return numba.njit(cache=True, nogil=True, **options)(function)

    return decorate
