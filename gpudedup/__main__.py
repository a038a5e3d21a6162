"""``python -m gpudedup ...``: the `gpudedup` command (console.run). A Dask worker started by
spawn imports its parent's main module again under another name; this one runs nothing then."""

from __future__ import annotations

if __name__ == "__main__":
    from .console import run

    run()
