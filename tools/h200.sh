#!/usr/bin/env bash
# The steps one lease of the H200 runs, in order, from the source tree (no install there).
#   tools/h200.sh STAGE...      stages: conflicts tune ladder tests sanitize
# Outputs land in results/ (committed afterwards) and, as one archive, in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=src PYTHONUNBUFFERED=1
export SGEMMLAB_CACHE_DIR=${SGEMMLAB_CACHE_DIR:-$PWD/.cache/sgemmlab}
OUT=${OUT:-/tmp/sgemmlab-out}
mkdir -p "$OUT" results/nvidia-h200
sg() { python3 -m sgemmlab "$@"; }
status=0
for stage in "$@"; do
  echo "=== $stage $(date -u +%T)"
  case $stage in
    conflicts)  # which shared tile conflicts: counted by the hardware, rungs 6-8 at 4096^3
      m=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
      m=$m,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum
      for k in 6 7 8; do
        echo "--- rung $k"; ncu --clock-control none -k sgemm --metrics "$m" \
          python3 -m sgemmlab run -k "$k" --size 4096 2>&1 | grep -E "sgemm|l1tex|smsp|rung|error"
      done | tee results/nvidia-h200/ncu-bank-conflicts-4096.txt ;;
    tune)  # TUNE="-k 10" to search one rung
      sg tune ${TUNE:-} --size 4096 --write-defaults --jobs 16 || status=1 ;;
    tests)  # every GPU test but the sanitizer's
      python3 -m pytest -q -m gpu -p no:cacheprovider --ignore tests/test_sanitizer_gpu.py \
        2>&1 | tee "$OUT/pytest-gpu.txt" | tail -25
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    sanitize)
      python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_sanitizer_gpu.py \
        2>&1 | tee "$OUT/pytest-sanitizer.txt" | tail -25
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    ladder)
      sg ladder --size 4096 --quiet || status=1
      sg ladder --size 4092 --quiet || status=1 ;;
    *) echo "unknown stage $stage"; status=2 ;;
  esac
done
tar czf "$OUT/results.tgz" results src/sgemmlab/data src/sgemmlab/kernels 2>/dev/null
exit $status
