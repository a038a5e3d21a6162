"""Input and output. Reading: finding the files (inputs.py), one reader per format (jsonl.py
with jsonl_lines.py, parquet.py, text.py; cuDF's in cudf_reader.py), one file's records and
errors (source.py), the checks across files (rules.py), and the Corpus (corpus.py) that
read.py builds; read-size estimates (sizes.py). Where files live: local paths and URLs, and
reading them (storage.py), the file systems that serve URLs (filesystems.py), URLs and messages
shown without credentials (credentials.py). Writing: where a run may write (outputdir.py),
files (write.py), the names of what is staged (staging.py), and the atomic commit of an output
(commit.py; on object storage remote_output.py)."""
