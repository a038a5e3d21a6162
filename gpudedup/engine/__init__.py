"""The deduplication engine: the stage sequence (job.py) over a store (memory.py, disk.py) and an
executor (local.LocalExecutor, dask.py). See job.py's docstring."""
