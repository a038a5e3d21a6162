#!/usr/bin/env bash
# The first-contact kit for a lent GPU machine: one step per device call, each ending well
# inside the device tool's 10-minute limit (a step stops itself after STEP_SECONDS, default
# 480), each writing its results straight under $OUT as it goes (unbuffered, through tee), so
# that a step cut short still returns what it had. docs/gpu.md ("First contact") says how to
# call each step with the device tool and what comes back.
#
#   bash scripts/gpu_session.sh tests        nvidia-smi and CuPy, then the `gpu` tests
#                                            -> device.txt, gpu_tests.txt
#   bash scripts/gpu_session.sh sanitize     the three kernels under compute-sanitizer's memcheck
#                                            and racecheck (scripts/gpu_sanitize.py, small inputs)
#                                            -> sanitizer.txt, sanitize_memcheck.txt, sanitize_racecheck.txt
#   bash scripts/gpu_session.sh bench-word   scripts/bench_gpu.py, word 5-grams -> bench_word.txt, .json
#   bash scripts/gpu_session.sh bench-char   scripts/bench_gpu.py, char 5-grams -> bench_char.txt, .json
#   bash scripts/gpu_session.sh job          the whole CLI job on the GPU (twice: kernels compiled, then
#                                            cached), on the CPU, and on the GPU with a work directory,
#                                            timed, and each GPU run's result tables compared with the
#                                            CPU run's (scripts/compare_outputs.py) -> job.txt;
#                                            JOB_CORPUS names another corpus
#   bash scripts/gpu_session.sh all          tests, bench-word, job, sanitize, bench-char in one call,
#                                            each within STEP_SECONDS, every file also in results.tgz
#
# Every step also writes setup.txt (the install of this checkout there). With --host-dry-run a
# step runs here, without a GPU: the `gpu` tests skip, the sanitizer step runs its driver on
# the host kernels without compute-sanitizer (and says so), the benchmarks run bench_gpu.py's
# own dry run on a few documents. Its figures are not GPU figures.
#
# The GPU machines have CuPy 14 for CUDA 13 but no network, no datasketch and no cuDF; for the
# benchmarks two things travel with the checkout (both git-ignored; name them in `carry`):
#   bench_data/bench.parquet  the benchmark corpus as zstd Parquet (43 MB):
#       python scripts/build_bench_corpus.py --install bench_data/bench.jsonl
#       python -c "import pyarrow.json as j, pyarrow.parquet as p; p.write_table(j.read_json('bench_data/bench.jsonl'), 'bench_data/bench.parquet', compression='zstd', compression_level=19)"
#   .whl/                     datasketch for the gpu_mode reference (pure Python):
#       python3 -m pip download --no-deps -d .whl datasketch==2.0.0
# Without them the benchmarks use the shipped sample corpus and leave datasketch out.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
    echo "usage: bash scripts/gpu_session.sh tests|sanitize|bench-word|bench-char|job|all [--host-dry-run]" >&2
    exit 2
}
[ $# -ge 1 ] || usage
step=$1
shift
dry=0
for argument in "$@"; do
    case $argument in
        --host-dry-run) dry=1 ;;
        *) usage ;;
    esac
done
case $step in tests|sanitize|bench-word|bench-char|job|all) ;; *) usage ;; esac

OUT=${OUT:-gpu_results}
mkdir -p "$OUT"
STEP_SECONDS=${STEP_SECONDS:-480}
export PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || PYTHON=python

# Run a command for at most $1 seconds, its output (stdout and stderr) into the file $2 as it
# comes; a command stopped by the limit leaves a line saying so. Returns the command's status.
bounded() {
    local seconds=$1 log=$2
    shift 2
    timeout -k 10 "$seconds" "$@" 2>&1 | tee -a "$log"
    local status=${PIPESTATUS[0]}
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        echo "STOPPED: the step's limit of $seconds s was reached (status $status); the output above is all there is" \
            | tee -a "$log"
    fi
    return "$status"
}

setup() {
    {
        echo "gpu_session.sh $step$([ $dry = 1 ] && echo ' --host-dry-run') at $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
        echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')"
        if [ $dry = 0 ] && [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
            "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
                && echo "installed .whl/: $(ls .whl)"
        fi
    } >> "$OUT/setup.txt" 2>&1
    if [ $dry = 0 ]; then
        if [ -d /tmp/site ]; then export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}; fi
        # No network there: install without build isolation; either way the checkout itself is
        # importable (PYTHONPATH below).
        "$PYTHON" -m pip install -q --no-deps --no-build-isolation -e . >> "$OUT/setup.txt" 2>&1 \
            || echo "(not installed; running from the checkout)" >> "$OUT/setup.txt"
    fi
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
}

# Where compute-sanitizer is: $COMPUTE_SANITIZER, the PATH, the CUDA toolkit's usual places,
# then the NVIDIA pip wheels (nvidia/cuda_sanitizer_api, nvidia/cu13) of the Python in use.
find_sanitizer() {
    if [ -n "${COMPUTE_SANITIZER:-}" ] && [ -x "$COMPUTE_SANITIZER" ]; then echo "$COMPUTE_SANITIZER"; return 0; fi
    command -v compute-sanitizer 2>/dev/null && return 0
    local candidate
    for candidate in "${CUDA_HOME:-/nonexistent}/bin/compute-sanitizer" /usr/local/cuda/bin/compute-sanitizer \
            /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
            /opt/nvidia/compute-sanitizer/compute-sanitizer; do
        if [ -x "$candidate" ]; then echo "$candidate"; return 0; fi
    done
    local roots
    roots=$("$PYTHON" -c "import site, sys; print(' '.join(site.getsitepackages() + [sys.prefix]))" 2>/dev/null)
    # shellcheck disable=SC2086
    find $roots /usr/local /opt -maxdepth 7 -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -1 | grep . \
        && return 0
    return 1
}

step_tests() {
    { nvidia-smi; "$PYTHON" -c "import cupy; print('cupy', cupy.__version__); print(cupy.cuda.runtime.getDeviceProperties(0)['name'])"; } \
        > "$OUT/device.txt" 2>&1
    # The files that hold `gpu` tests: collecting the others would import what only the dev
    # extra installs (nbformat, polars), which the GPU machine has not, and stop the run.
    local selection
    mapfile -t selection < <(grep -l 'mark\.gpu' tests/test_*.py)
    # On the host every `gpu` test skips: the dry run checks the plumbing on one file.
    [ $dry = 1 ] && selection=(tests/test_gpu.py)
    bounded "$STEP_SECONDS" "$OUT/gpu_tests.txt" "$PYTHON" -m pytest -q -rs -m gpu -p no:cacheprovider "${selection[@]}"
}

step_sanitize() {
    local sanitizer status=0 tool
    sanitizer=$(find_sanitizer)
    {
        if [ -n "$sanitizer" ]; then
            echo "compute-sanitizer: $sanitizer"
            "$sanitizer" --version 2>&1 | head -3
        else
            echo "compute-sanitizer: NOT FOUND (looked at \$COMPUTE_SANITIZER, the PATH, \$CUDA_HOME/bin, /usr/local/cuda*,"
            echo "/opt/nvidia and the NVIDIA wheels of $PYTHON); set COMPUTE_SANITIZER=/path/to/compute-sanitizer"
        fi
    } > "$OUT/sanitizer.txt"
    cat "$OUT/sanitizer.txt"
    for tool in memcheck racecheck; do
        local log="$OUT/sanitize_$tool.txt"
        : > "$log"
        if [ $dry = 1 ]; then
            echo "HOST DRY RUN: compute-sanitizer --tool $tool NOT run (no GPU); the driver runs on the host kernels" | tee -a "$log"
            bounded $((STEP_SECONDS / 2)) "$log" "$PYTHON" scripts/gpu_sanitize.py --host-dry-run --docs 30 --num-perm 64 300 \
                || status=1
        elif [ -z "$sanitizer" ]; then
            echo "NOT RUN: compute-sanitizer was not found on this machine (see sanitizer.txt); no $tool result" | tee -a "$log"
            status=2
        elif [ "$tool" = memcheck ]; then
            echo "$sanitizer --tool $tool --error-exitcode 3 $PYTHON scripts/gpu_sanitize.py" | tee -a "$log"
            bounded $((STEP_SECONDS / 2)) "$log" "$sanitizer" --tool "$tool" --error-exitcode 3 --print-limit 50 \
                "$PYTHON" scripts/gpu_sanitize.py || status=1
        else
            # racecheck instruments only our kernels, one per run: unfiltered, it spends the
            # step on CuPy's own scan kernels (whose reports are CuPy's, not ours) and never
            # reaches the end. A run filtered to one of CuPy's kernels is the control that the
            # filter takes hold: it must report that kernel's hazards.
            local kernel
            for kernel in minhash_signatures_u64 band_keys_u32 span_hashes_u32 cupy_nonzero_kernel; do
                echo "$sanitizer --tool $tool --racecheck-report all --kernel-name kns=$kernel $PYTHON scripts/gpu_sanitize.py" \
                    | tee -a "$log"
                local expect=0
                [ "$kernel" = cupy_nonzero_kernel ] && expect=control
                bounded $((STEP_SECONDS / 8)) "$log" "$sanitizer" --tool "$tool" --racecheck-report all --error-exitcode 3 \
                    --print-limit 5 --kernel-name "kns=$kernel" "$PYTHON" scripts/gpu_sanitize.py
                local kernel_status=$?
                if [ $expect = 0 ] && [ $kernel_status != 0 ]; then status=1; fi
            done
        fi
    done
    return $status
}

step_bench() {
    local shingle=$1 corpus=bench_data/bench.parquet extra=()
    [ -f "$corpus" ] || corpus=gpudedup/data/bible_sample.jsonl.gz  # the shipped sample, if nothing was carried
    if [ $dry = 1 ]; then
        extra=(--host-dry-run --limit-docs 60 --repeats 1 --skip datasketch job-cpu)
    fi
    : > "$OUT/bench_$shingle.txt"
    echo "corpus: $corpus" | tee -a "$OUT/bench_$shingle.txt"
    bounded "$STEP_SECONDS" "$OUT/bench_$shingle.txt" "$PYTHON" scripts/bench_gpu.py "$corpus" --shingle "$shingle" \
        --ngram 5 --json "$OUT/bench_$shingle.json" "${extra[@]}"
}

# The whole job through the CLI, on the GPU and on the CPU, over the same corpus, and on the GPU
# with a work directory (Dask's local scheduler, the shards signed on the device): the tables of
# each GPU run must be the CPU run's (the numpy backend is the GPU backend's oracle).
step_job() {
    local corpus=${JOB_CORPUS:-bench_data/bench.parquet} log="$OUT/job.txt" runs status=0 run
    [ -f "$corpus" ] || corpus=gpudedup/data/bible_sample.jsonl.gz
    runs=$(mktemp -d)
    : > "$log"
    # Each run: its backend, and "work" for a run with a work directory.
    local plan=(gpu gpu cpu gpu:work)
    [ $dry = 1 ] && plan=(cpu cpu cpu cpu:work)
    local index=0 names=()
    for run in "${plan[@]}"; do
        local backend=${run%%:*} out="$runs/$index-${run/:/-}" extra=()
        [ "$run" != "$backend" ] && extra=(--work-dir "$runs/work-$index")
        names+=("$out")
        echo "run $index: $PYTHON -m gpudedup dedup $corpus -o $out --backend $backend ${extra[*]} -q" | tee -a "$log"
        local start=$EPOCHREALTIME
        bounded $((STEP_SECONDS / 4)) "$log" "$PYTHON" -m gpudedup dedup "$corpus" -o "$out" --backend "$backend" \
            "${extra[@]}" -q || status=1
        echo "run $index: wall $(awk "BEGIN {printf \"%.2f\", $EPOCHREALTIME - $start}") s" | tee -a "$log"
        "$PYTHON" - "$out/report.json" <<'PY' 2>&1 | tee -a "$log"
import json, sys
report = json.load(open(sys.argv[1]))
print("  backend:", report["backend"])
print("  results:", json.dumps(report["results"])[:600])
print("  total_seconds:", report["total_seconds"], " peak_rss_mb:", report["peak_rss_mb"])
for stage, figures in report["stages"].items():
    print(f"  {stage}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
PY
        index=$((index + 1))
    done
    # The CPU run is the third; each other run's tables against it.
    local other
    for other in 0 3; do
        echo "tables, run $other against run 2:" | tee -a "$log"
        bounded 120 "$log" "$PYTHON" scripts/compare_outputs.py "${names[$other]}" "${names[2]}" || status=1
    done
    rm -rf "$runs"
    return $status
}

# `all` writes the steps' files to a folder of its own and packs them into $OUT/results.tgz after
# each step: the device tool brings back at most 8 files, and a call stopped at its limit still
# returns the archive of the steps that finished.
pack() {
    tar czf "$1/results.tgz.part" -C "$OUT" . && mv "$1/results.tgz.part" "$1/results.tgz"
}

run_step() {
    case $1 in
        tests) step_tests ;;
        sanitize) step_sanitize ;;
        bench-word) step_bench word ;;
        bench-char) step_bench char ;;
        job) step_job ;;
    esac
}

if [ "$step" = all ]; then
    packed=$OUT
    OUT=$(mktemp -d)
fi
setup
if [ "$step" = all ]; then
    status=0
    for each in tests bench-word job sanitize bench-char; do
        echo "=== $each" | tee -a "$OUT/setup.txt"
        run_step "$each"
        each_status=$?
        [ $each_status = 0 ] || status=1
        echo "=== $each: exit status $each_status" | tee -a "$OUT/setup.txt"
        pack "$packed"
    done
else
    run_step "$step"
    status=$?
fi
echo "gpu_session.sh $step: exit status $status" | tee -a "$OUT/setup.txt"
exit $status
