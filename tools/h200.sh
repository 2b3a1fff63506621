#!/usr/bin/env bash
# The steps one lease of the H200 runs, in order, from the source tree (no install there).
#   tools/h200.sh STAGE...      stages: compile sweep prebuilt conflicts stalls tune rerank table grid
#                               bench suites random overhead ladder track tests
#                               sanitize accuracy tensor firstcall profile dropin fuzz models
#                               anatomy native layers layoutstalls modelprofile
#                               matrix large mix worst stagepair packpair sourcepair
#                               hosttime ozaki ozakistalls fixuppair emulated emulatedpair
#                               refusal passprofile
# Outputs land in results/ (committed afterwards) and, as one archive, in $OUT; each stage's
# output also goes to $OUT/logs/<stage>.txt as it runs (a timeout must not lose it).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export SGEMMLAB_CACHE_DIR=${SGEMMLAB_CACHE_DIR:-$PWD/.cache/sgemmlab}
OUT=${OUT:-/tmp/sgemmlab-out}
mkdir -p "$OUT" results/nvidia-h200/profile results/nvidia-h200/models  # by kind: bench/results.py
# what is newer than this goes into the archive: made by the first invocation of a lease's
# command, so a second one in the same command archives the first one's results too
[ -e "$OUT/.started" ] || touch "$OUT/.started"
# the device's copy of the tree may carry a stale .git: results files name the commit given
[ -n "${SGEMMLAB_GIT_COMMIT:-}" ] || echo "WARNING: SGEMMLAB_GIT_COMMIT is not set; results \
files will name whatever commit this copy's .git says"
sg() { python3 -m sgemmlab "$@"; }
# sg with module settings changed (tools/with_settings.py; the results file records them):
# SET="runtime.ozaki.MERGED=1 runtime.ozaki.SCALE_BLOCKS=3", and TRANSFER=x for
# dispatch.lookup.MODEL_TRANSFER=x
settings() {
  local set=(${SET:-}); [ -n "${TRANSFER:-}" ] && set+=("dispatch.lookup.MODEL_TRANSFER=$TRANSFER")
  if [ ${#set[@]} -gt 0 ]; then
    python3 tools/with_settings.py "${set[@]}" -- "$@"
  else
    sg "$@"
  fi
}
# the GPU tests, on this cache and its prebuilt cubins (by default a test session makes a
# fresh cache of its own: tests/conftest.py)
gpu_tests() {
  SGEMMLAB_TEST_CACHE_DIR="$SGEMMLAB_CACHE_DIR" python3 -m pytest -q -m gpu -p no:cacheprovider "$@"
}
status=0
[ -f "$OUT/logs.tgz" ] && tar xzf "$OUT/logs.tgz" -C "$OUT"  # an earlier invocation's
mkdir -p "$OUT/logs"
for stage in "$@"; do
  echo "=== $stage $(date -u +%T)"
  exec 3>&1 1> >(tee "$OUT/logs/$stage.txt" >&3) 2>&1
  case $stage in
    conflicts)  # which shared tile conflicts: counted by the hardware, rungs 6-8 at 4096^3
      m=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
      m=$m,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum
      for k in 6 7 8; do
        echo "--- rung $k"; ncu --clock-control none -k sgemm --metrics "$m" \
          python3 -m sgemmlab run -k "$k" --size 4096 2>&1 | grep -E "sgemm|l1tex|smsp|rung|error"
      done | tee results/nvidia-h200/profile/ncu-bank-conflicts-4096.txt ;;
    stalls)  # why the fastest rungs lose to cuBLAS: issue, pipes and stall reasons at 4096^3
      # (a throwaway compile cache: NVRTC under ncu's injection may leave ptxas's report out)
      m=smsp__inst_executed.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_lsu.sum
      m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active
      m=$m,smsp__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
      m=$m,smsp__warps_active.avg.per_cycle_active,smsp__warps_eligible.avg.per_cycle_active
      m="$m,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
      # STALL_RUNGS="24 25:BM=128,BN=256,...": a rung (its default), or a rung and a full config
      for k in ${STALL_RUNGS:-13 14}; do
        cfg=(); [[ $k == *:* ]] && cfg=(--config "${k#*:}")
        echo "--- rung $k"; SGEMMLAB_CACHE_DIR=$(mktemp -d) ncu --clock-control none -k sgemm \
          --metrics "$m" python3 -m sgemmlab run -k "${k%%:*}" "${cfg[@]}" --size 4096 2>&1 \
          | grep -vE "^==PROF=="
      done > "${STALLS:=results/nvidia-h200/profile/ncu-stalls-4096-$(date -u +%Y%m%dT%H%MZ).txt}"
      echo "--- cuBLAS (torch.matmul, TF32 off)" >> "$STALLS"
      ncu --clock-control none --metrics "$m" -k regex:gemm -c 1 python3 -c "import torch; \
torch.backends.cuda.matmul.allow_tf32=False; a=torch.rand(4096,4096,device='cuda'); \
[a@a for _ in range(3)]; torch.cuda.synchronize()" 2>&1 | grep -vE "^==PROF==" \
        >> "$STALLS" ;;
    ozakistalls)  # rung 26 under ncu: the tensor pipe, issue, L2 and HBM, stall reasons, for
      # the seed and OZAKI_STALL_GEMM ("STORE16=1/PINGPONG=1,STORE16=1") at OZAKI_STALL_SIZE;
      # every launch of rung 26 (sgemm), oz_scale and oz_crt (each configuration's product
      # twice: the first warms, the second counts), on a copy of the compile cache (NVRTC
      # under ncu's injection may leave ptxas's report out of what it writes)
      m=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum
      m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active
      m="$m,regex:sm__pipe_tensor_op_.*_cycles_active\.avg\.pct_of_peak_sustained_active$"
      m=$m,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second
      m=$m,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct
      m="$m,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
      out=results/nvidia-h200/profile/ncu-ozaki-$(date -u +%Y%m%dT%H%MZ).txt
      copy=$(mktemp -d) && cp -r "$SGEMMLAB_CACHE_DIR/." "$copy/"
      SGEMMLAB_CACHE_DIR=$copy ncu --clock-control none -k "regex:^(sgemm|oz_scale|oz_crt)$" \
        --metrics "$m" \
        python3 tools/ozaki_once.py --size "${OZAKI_STALL_SIZE:-2048}" \
        --gemm "${OZAKI_STALL_GEMM:-STORE16=1/PINGPONG=1,STORE16=1}" 2>&1 \
        | grep -vE "^==PROF==" > "$out" || status=1
      cat "$out" ;;
    passprofile)  # the scheme's passes under ncu's full set (tools/ozaki_pass_profile.py):
      # PASS_SIZE (4096), PASS_KERNELS ('^(oz_scale|oz_crt)$'), PASS_LAUNCHES (3), on a copy
      # of the compile cache
      copy=$(mktemp -d) && cp -r "$SGEMMLAB_CACHE_DIR/." "$copy/"
      SGEMMLAB_CACHE_DIR=$copy python3 tools/ozaki_pass_profile.py --size "${PASS_SIZE:-4096}" \
        --kernels "${PASS_KERNELS:-^(oz_scale|oz_crt)\$}" --launches "${PASS_LAUNCHES:-3}" \
        --gemm "${PASS_GEMM:-}" \
        --out "results/nvidia-h200/profile/ncu-passes-$(date -u +%Y%m%dT%H%MZ).txt" \
        || status=1 ;;
    tune)  # TUNE="-k 10" SIZE=4096 WHERE="SPLIT=0,FIXUP=1" [DEFAULTS=0]: search one rung
      sg tune ${TUNE:-} --size "${SIZE:-4096}" ${WHERE:+--where "$WHERE"} \
        $([ "${DEFAULTS:-1}" = 1 ] && echo --write-defaults) --quiet || status=1 ;;
    rerank)  # re-derive defaults from short lists, paired: CANDIDATES="a.jsonl b.jsonl"
      for f in ${CANDIDATES:-tools/rerank-candidates.jsonl tools/idea-candidates.jsonl}; do
        sg tune --candidates "$f" --size "${SIZE:-4096}" --write-defaults --quiet || status=1
      done ;;
    table)  # this GPU's dispatch table over the suites, shipped in the package
      # TABLE_CONFIGS="14:BM=...,... 14:...": more candidates (full configurations)
      extra=(); for c in ${TABLE_CONFIGS:-}; do extra+=(--config "$c"); done
      sg tune --table --suite square,ragged,skinny --rungs 13,14 "${extra[@]}" \
        --export src/sgemmlab/data/tables/nvidia-h200.json.gz --quiet || status=1 ;;
    grid)  # the dispatch table over the shape grid (tune/grid.py), shipped in the package
      # GRID_LAYOUTS="NN" (with the batches) or "TN NT TT": one part of it per lease
      rm -rf "$SGEMMLAB_CACHE_DIR/tables"  # a stale user table would be merged into it
      lay=(); for l in ${GRID_LAYOUTS:-}; do lay+=(--layout "$l"); done
      # MID=1: only the mid-size products (tune/grid.py's mid_range), every candidate
      sg tune --grid "${lay[@]}" $([ "${MID:-0}" = 1 ] && echo --mid) --export src/sgemmlab/data/tables/nvidia-h200.json.gz --quiet \
        || status=1 ;;
    suites)  # every suite, through dispatch and the API, 15 paired rounds
      rm -rf "$SGEMMLAB_CACHE_DIR/tables"  # dispatch reads the package's table
      sg bench $(for s in square ragged skinny small vector decode tinyk batched layouts; do
        echo --suite $s; done) -k auto -k matmul -b none --confirm --quiet || status=1 ;;
    random)  # 200 log-uniform shapes off the grid, through dispatch and the API
      rm -rf "$SGEMMLAB_CACHE_DIR/tables"
      sg bench --random "${COUNT:-200}" --seed "${SEED:-2026}" -k auto -k matmul -b none \
        --quiet || status=1 ;;
    mix)  # issue 34: COUNT log-uniform problems of every kind (layouts, misaligned, padded,
      # batched; --mix) through the API, in MODE (isolated or throughput); CONFIRM=1: 15 rounds;
      # TRANSFER=x, SET=...: module settings (settings(), above; the results file records them)
      rm -rf "$SGEMMLAB_CACHE_DIR/tables"
      settings bench --random "${COUNT:-300}" --seed "${SEED:?the seed of the mix}" --mix \
        -k matmul -b none --mode "${MODE:-isolated}" \
        $([ "${CONFIRM:-0}" = 1 ] && echo --confirm) --quiet || status=1 ;;
    packpair)  # x @ W^T on a row-major copy of W^T and in place (tools/pack_pair.py;
      # PACK_ARGS="--rows 2048 --rows 8192")
      python3 tools/pack_pair.py ${PACK_ARGS:-} || status=1 ;;
    sourcepair)  # a bias read in the product's epilogue, against addmm (tools/source_pair.py)
      python3 tools/source_pair.py ${SOURCE_ARGS:-} || status=1 ;;
    ozaki)  # Ozaki scheme II (rung 26, runtime/ozaki.py): each pass timed, the whole
      # product against cuBLAS SGEMM paired, its error beside cuBLAS's (OZAKI_ARGS="--sizes
      # 4096,8192 --count 8 --b-cols --smi"); results/<gpu>/probe/ozaki-<stamp>.json
      python3 tools/ozaki_probe.py ${OZAKI_ARGS:---sizes 2048,4096,8192 --count 8} \
        --out "results/nvidia-h200/probe/ozaki-$(date -u +%Y%m%dT%H%M%SZ).json" || status=1 ;;
    refusal)  # what refused rows cost the scheme (tools/refusal_probe.py; REFUSAL_ARGS),
      # then the same probe's copy in .cache/baseline (an earlier tree, carried) if there is
      # one (REFUSAL_BASELINE_ARGS; BASELINE_COMMIT names it)
      python3 tools/refusal_probe.py ${REFUSAL_ARGS:-} \
        --out "results/nvidia-h200/probe/refusal-$(date -u +%Y%m%dT%H%MZ).json" || status=1
      if [ -f .cache/baseline/tools/refusal_probe.py ]; then
        SGEMMLAB_GIT_COMMIT=${BASELINE_COMMIT:-baseline} python3 \
          .cache/baseline/tools/refusal_probe.py ${REFUSAL_BASELINE_ARGS:-${REFUSAL_ARGS:-}} \
          --out "results/nvidia-h200/probe/refusal-baseline-$(date -u +%Y%m%dT%H%MZ).json" \
          || status=1
      fi ;;
    emulated)  # precision="fp32_emulated" through dispatch and the API against cuBLAS SGEMM
      # and the composed anchor (EMULATED_ARGS="--confirm" for 15 rounds; EMULATED_SIZES:
      # the cubes' sides; 16384 takes about four minutes confirmed; SET: the scheme's
      # switches for this run, e.g. SET="runtime.ozaki.MERGED=1", recorded in the file)
      settings bench $(for n in ${EMULATED_SIZES:-2048 4096 8192 16384}; do echo "--shape ${n}x${n}x${n}"; done) \
        -k auto -k matmul --precision fp32_emulated ${EMULATED_ARGS:-} --quiet || status=1 ;;
    emulatedpair)  # where fp32_emulated's dispatch turns: cuBLAS, ieee, fp32_emulated and
      # rung 26 forced, paired per shape (tools/emulated_pair.py; PAIR_ARGS="--check")
      python3 tools/emulated_pair.py ${PAIR_ARGS:-} \
        --out "results/nvidia-h200/pairs/emulated-$(date -u +%Y%m%dT%H%MZ).json" || status=1 ;;
    fixuppair)  # rung 14 before and after a fix-up change, paired (tools/fixup_pair.py;
      # PREVIOUS=a copy of the earlier ladder/14_streamk.cu, carried)
      python3 tools/fixup_pair.py --previous "${PREVIOUS:?the previous source}" || status=1 ;;
    hosttime)  # where matmul's host time goes (tools/profile_host.py; HOST_ARGS="--cold")
      python3 tools/profile_host.py ${HOST_ARGS:-} || status=1 ;;
    stagepair)  # misaligned problems of the mixed sets of STAGE_SEEDS, in place and packed
      # (tools/stage_pair.py), every STAGE_EVERY'th
      python3 tools/stage_pair.py $(for s in ${STAGE_SEEDS:?the seeds}; do echo --seed $s; done) \
        --every "${STAGE_EVERY:-1}" --rounds "${STAGE_ROUNDS:-3}" --calls "${STAGE_CALLS:-10}" \
        || status=1 ;;
    worst)  # what cuBLAS and sgemmlab launch at the worst problems of the newest random bench
      f=${WORST_FILE:-$(ls -t results/nvidia-h200/bench/random-*.json* | head -1)}
      python3 tools/worst_shapes.py "$f" --worst "${WORST:-12}" || status=1 ;;
    large)  # issue 19: matmul at its eight shapes, 15 paired rounds (LARGE_ARGS: more -k)
      rm -rf "$SGEMMLAB_CACHE_DIR/tables"  # dispatch reads the package's table
      sg bench $(for s in 2048,2048,2048 3072,3072,3072 4096,4096,4096 6144,6144,6144 \
          8192,8192,8192 8192,8192,512 256,4096,4096 4096,4096,256; do echo --shape $s; done) \
        -k matmul ${LARGE_ARGS:-} -b none --confirm --quiet || status=1 ;;
    bench)  # the library against cuBLAS over the suites, 15 paired rounds
      sg bench --suite square --suite ragged --suite skinny -k auto -k 14 -k matmul -b none \
        --confirm --quiet || status=1 ;;
    overhead)
      sg overhead || status=1 ;;
    accuracy)  # issue 14: error against float64 over the fuzz set, beside cuBLAS SGEMM's
      sg accuracy ${ACCURACY_ARGS:-} || status=1 ;;
    tensor)  # issue 14: tf32x3 through dispatch and the API against cuBLAS SGEMM and the
      # composed anchor (TENSOR_ARGS="--confirm" for 15 rounds); rung 19 against cuBLAS TF32
      sg bench --suite square --suite ragged --suite skinny -k auto -k matmul \
        --precision tf32x3 ${TENSOR_ARGS:-} --quiet || status=1
      sg bench --shape 4096x4096x4096 --shape 8192x8192x8192 -k 19 --precision tf32 \
        ${TENSOR_ARGS:-} --quiet || status=1 ;;
    sweep)  # the compile sweep of the rungs whose source changed (SWEEP_RUNGS="14,15": those
      # compiled again); alone in its lease: it takes every core
      python3 tools/compile_sweep.py --jobs "${COMPILE_JOBS:-16}" \
        ${SWEEP_RUNGS:+--rungs "$SWEEP_RUNGS"} | grep -v "^  " || status=1 ;;
    compile)  # the cubins a run loads, compiled here (about a minute on 16 cores)
      python3 tools/prebuild.py --compile-only --jobs "${COMPILE_JOBS:-16}" || status=1 ;;
    prebuilt)  # the cubins built on the CPU machine (.cache/prebuilt.tar.xz, carried)
      mkdir -p "$SGEMMLAB_CACHE_DIR"
      [ -f .cache/prebuilt.tar.xz ] && tar xJf .cache/prebuilt.tar.xz -C "$SGEMMLAB_CACHE_DIR"
      echo "$(find "$SGEMMLAB_CACHE_DIR" -name '*.bin' | wc -l) cubins in the cache" ;;
    tests)  # every GPU test but the sanitizer's (TEST_FILES: only these)
      gpu_tests -n "${JOBS:-8}" --dist loadgroup \
        --ignore tests/test_sanitizer_gpu.py ${TEST_FILES:-} \
        2>&1 | tee "$OUT/pytest-gpu.txt" | tail -25
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      # the host-time test needs the GPU to itself (it skips under -n): alone, afterwards
      gpu_tests tests/test_measure_host_time.py \
        2>&1 | tee "$OUT/pytest-gpu-host-time.txt" | tail -5
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    sanitize)  # SANITIZE_ARGS="-k ozaki": only the scheme's; the summary kept in results/
      mkdir -p results/nvidia-h200/sanitizer
      gpu_tests tests/test_sanitizer_gpu.py ${SANITIZE_ARGS:-} \
        2>&1 | tee "$OUT/pytest-sanitizer.txt" | tail -25 \
        | tee "results/nvidia-h200/sanitizer/pytest-$(date -u +%Y%m%dT%H%MZ).txt"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    ladder)
      sg ladder --size 4096 --quiet || status=1
      sg ladder --size 4092 --quiet || status=1 ;;
    firstcall)  # issue 17: every table problem's first call, fresh process, empty cache
      SGEMMLAB_FIRSTCALL_PROFILE="results/nvidia-h200/profile/firstcall-$(date -u +%Y%m%dT%H%M%SZ).txt" \
        sg firstcall || status=1 ;;
    profile)  # issue 17: ncu digest of a rung and cuBLAS (PROFILE="-k 14 --size 4096")
      sg profile ${PROFILE:--k 14 --size 4096} || status=1 ;;
    modelprofile)  # a model step's GPU time per aten op and shape, with and without the
      # switch (PROFILE_WORKLOADS="llama-prefill-1 encoder-infer": bench/models.py's;
      # PROFILE_PRECISION=tf32x3: the switch's precision)
      python3 tools/model_profile.py $(for w in ${PROFILE_WORKLOADS:-llama-prefill-1 \
        encoder-infer}; do echo --workload "$w"; done) \
        ${PROFILE_PRECISION:+--precision "$PROFILE_PRECISION"} \
        --out "results/nvidia-h200/profile/models-$(date -u +%Y%m%dT%H%MZ).txt" || status=1 ;;
    models)  # whole torch models with and without the switch, and the tf32x3 training step
      sg bench --model "${MODELS:-all}" || status=1
      sg bench --model encoder --precision tf32x3 || status=1 ;;
    layers)  # the linear layers' products, into the shipped table: LAYER_LAYOUTS="NT" (the
      # forward, the default) or "NN TN" (the backward's input and weight gradients)
      rm -rf "$SGEMMLAB_CACHE_DIR/tables"  # merged into the package's table, not a user one
      # LAYER_TRAIN=1: at the rows of prefill and training (128-8192 tokens)
      sg tune --grid --layers $(for l in ${LAYER_LAYOUTS:-NT}; do echo --layout "$l"; done) \
        ${LAYER_TRAIN:+--train-rows} --export src/sgemmlab/data/tables/nvidia-h200.json.gz \
        --quiet | tail -3 || status=1 ;;
    native)  # the drop-in switch's native kernels, built once into the cache (the tests,
      # the models and the anatomy then load them)
      python3 -c "from sgemmlab.runtime import native; import time; t = time.time(); \
m = native.load(); print('native:', m and m.__file__, round(time.time() - t, 1), 's')" \
        || status=1 ;;
    anatomy)  # where a product through the drop-in switch spends its time, host and GPU
      python3 tools/switch_anatomy.py || status=1 ;;
    layoutstalls)  # one rung and configuration in two layouts under ncu (LAYOUT_RUNG,
      # LAYOUT_CONFIG, LAYOUT_LAYOUTS="NN NT"): why one layout is slower than another
      m=smsp__inst_executed.sum,smsp__inst_executed_pipe_lsu.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
      m=$m,smsp__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum
      m=$m,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
      m=$m,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed_op_shared_st.sum
      # cp.async (LDGSTS) requests and sectors, and shared loads' conflicts, by whatever name
      m="$m,regex:l1tex__t_(requests|sectors)_pipe_lsu_mem_global_op_ldgsts.*\.sum$"
      m="$m,regex:l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld\.sum$"
      m="$m,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
      out=results/nvidia-h200/profile/ncu-layouts-$(date -u +%Y%m%dT%H%MZ).txt
      for lay in ${LAYOUT_LAYOUTS:-NN NT}; do
        echo "--- $lay rung ${LAYOUT_RUNG:-24} ${LAYOUT_CONFIG:-}"
        ncu --clock-control none -k sgemm -s 1 -c 1 --metrics "$m" python3 tools/layout_probe.py \
          --layout "$lay" --kernel "${LAYOUT_RUNG:-24}" --config "${LAYOUT_CONFIG:-}" 2>&1 \
          | grep -vE "^==PROF=="
      done > "$out"; cat "$out" ;;
    dropin)  # issue 17: one model trained both ways (examples/train_dropin.py)
      python3 examples/train_dropin.py \
        --json "results/nvidia-h200/models/dropin-$(date -u +%Y%m%dT%H%M%SZ).json" || status=1 ;;
    matrix)  # issue 18: every rung x decomposition x sanitizer tool (MATRIX_ARGS="--tools
      # memcheck --rungs 14"), results/<gpu>/sanitizer/matrix-*.json
      python3 tools/sanitizer_matrix.py --jobs "${MATRIX_JOBS:-8}" ${MATRIX_ARGS:-} || status=1 ;;
    fuzz)  # issue 18: FUZZ_COUNT generated products against float64 (FUZZ_SEED)
      sg fuzz --count "${FUZZ_COUNT:-10000}" --seed "${FUZZ_SEED:-0}" || status=1 ;;
    track)  # issue 16: the Python track beside its CUDA twins, paired against cuBLAS
      sg ladder --track numba --size 4096 --size 4092 --quiet || status=1 ;;
    *) echo "unknown stage $stage"; status=2 ;;
  esac
  exec 1>&3 2>&1 3>&-
done
# results/index.json as results/ now stands (`sgemmlab index`), so it travels back too
sg index > /dev/null || echo "WARNING: sgemmlab index failed; run it before committing"
# what changed under results/, the package data and tests/data (the fuzz stage's kept
# failures); big results files exceed what one transfer brings back: the archive is compressed
tar czf "$OUT/results.tgz" $(find results src/sgemmlab/data tests/data -type f \
  -newer "$OUT/.started") 2>/dev/null
# the stages' logs as one file too (a transfer brings at most eight files back), with
# those an earlier invocation of the same command left (unpacked at the start)
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
exit $status
