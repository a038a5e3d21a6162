"""The algorithms: normalisation, shingling, hashing, MinHash, LSH, identical copies, exact
verification, clusters and the all-pairs oracle.

Arrays in, arrays out: no file or network I/O, no Dask, no Arrow files. Each module documents the
dtype, shape and side (host or device, where a backend's array module is passed in) of what it
takes and returns. Everything above (io, the pipeline, the index, results, the CLI) uses these;
nothing here imports them (pyproject.toml's import-linter contracts check it).
"""
