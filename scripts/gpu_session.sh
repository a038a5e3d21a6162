#!/usr/bin/env bash
# Everything a lent GPU machine should run, in one call: the `gpu` tests and the GPU benchmark
# (word and char 5-grams), with their outputs under $OUT (default: gpu_results/).
#
# The GPU machines have CuPy 14 for CUDA 13 but no network, no datasketch and no cuDF, so two
# things travel with the checkout (both git-ignored; name them in the device tool's `carry`):
#   bench_data/bench.parquet  the benchmark corpus as zstd Parquet (43 MB):
#       python scripts/build_bench_corpus.py --install bench_data/bench.jsonl
#       python -c "import pyarrow.json as j, pyarrow.parquet as p; p.write_table(j.read_json('bench_data/bench.jsonl'), 'bench_data/bench.parquet', compression='zstd', compression_level=19)"
#   .whl/                     datasketch for the gpu_mode reference (pure Python):
#       python3 -m pip download --no-deps -d .whl datasketch==2.0.0
# Then: bash scripts/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_results}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
# No network there: install without build isolation where setuptools is present; either way
# the checkout itself is importable (python -m adds it to the path; bench_gpu.py adds it too).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>/dev/null || echo "(not installed; running from the checkout)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi; python3 -c "import cupy; print('cupy', cupy.__version__)"; } > "$OUT/device.txt" 2>&1
python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.txt" | tail -15
corpus=bench_data/bench.parquet
[ -f "$corpus" ] || corpus=gpudedup/data/bible_sample.jsonl.gz  # the shipped sample, if nothing was carried
for shingle in word char; do
    python3 scripts/bench_gpu.py "$corpus" --shingle "$shingle" --ngram 5 --json "$OUT/bench_$shingle.json" \
        2>&1 | tee "$OUT/bench_$shingle.txt" | tail -25
done
