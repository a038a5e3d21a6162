"""The deduplication engine: the stage sequence (job.py) over a store (memory.py, disk.py), an
executor (protocols.py, daskops.py) and a runner's stages (local.py, dask.py). See job.py's docstring."""
