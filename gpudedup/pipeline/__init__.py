"""The pipeline: the stage sequence (job.py) over a store (memory.py, disk.py), an executor
(protocols.py, daskops.py) and a runner's stages (local.py, dask.py), and what a run computes
for its report (report.py, shown.py, sourcecounts.py). See job.py's docstring."""
