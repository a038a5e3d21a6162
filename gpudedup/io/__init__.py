"""Input and output: reading corpora (reader.py) and writing results atomically (writer.py)."""
