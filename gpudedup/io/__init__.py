"""Input and output. Reading: finding the files (inputs.py), one reader per format (jsonl.py
with jsonl_lines.py, parquet.py, text.py; cuDF's in cudf_reader.py), one file's records and
errors (source.py), the checks across files (rules.py), and the Corpus (corpus.py) that
read.py builds; read-size estimates (sizes.py). Writing results atomically (writer.py)."""
