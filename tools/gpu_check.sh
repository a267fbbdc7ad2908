#!/usr/bin/env bash
# tools/gpu_check.sh — what a session with a GPU runs on the device machine, in one go
# (machine start-up costs minutes): the GPU specs, short recipe runs on cuda, the GPU
# benchmark beside its PyTorch twin, and the specs once under compute-sanitizer. Every
# part has its own time limit, so a hang costs that part only; logs go into $OUT as
# summary.txt (one line per part: its exit status and seconds) and logs.tgz (everything).
# Prepare here with tools/gpu_prepare.sh, then run it through the device tool:
#   run(command = "bash tools/gpu_check.sh",
#       carry = [".gpu", "build/libcrescent.so", "build/crescent_cdef.h", "build/crescent_loop.so"])
# Args: parts to run, any of specs recipes bench compile profile kernels sanitize
# (default: all but compile, profile and kernels; specs, recipes and sanitize run side by
# side on the one GPU, the others alone afterwards). compile: the benchmark with the
# twin's bf16 steps also under torch.compile (bench/gpu_swav.lua compile=1; its
# compilation takes minutes). profile: the benchmark's steps op by op in GPU time
# (bench/gpu_swav.lua profile=1) and the twin's CUDA kernels (gpu_swav_torch.py
# --profile). kernels: Nsight Compute (ncu) over two bf16 SwAV steps of the benchmark,
# every kernel's time and DRAM bytes summed by name (tools/ncu_summary.py), then the full
# metric set of 14 batch-norm row, half elementwise and max-pool kernels after 60. The
# bench log's name carries CRESCENT_CUDNN_BENCHMARK=1 when that is set (cuDNN times its
# algorithms, as torch.backends.cudnn.benchmark).
# The recipes' loss curves (metrics.jsonl in logs.tgz) compare with the same commands and
# train.device=cpu run here.
set -u -o pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_check}
logs=/tmp/gpu_logs
mkdir -p "$out" "$logs"
source .gpu/setup.sh > "$logs/setup.txt" 2>&1
# the CUDA backend and oneDNN 3.2 beside libcrescent.so, where its RUNPATH ($ORIGIN) finds
# oneDNN, unpacked from .gpu (tools/gpu_prepare.sh carries them xz-compressed) on every
# run: a warm machine keeps the build/ of its last call, whose copies may be older
for lib in libcrescent_cuda.so libdnnl.so.3; do
  if [ -f ".gpu/$lib.xz" ]; then
    rm -f "build/$lib"
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      ".gpu/$lib.xz" "build/$lib"
  fi
done
cat "$logs/setup.txt"
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1
export CRESCENT_TORCH_PYTHON=${CRESCENT_TORCH_PYTHON:-python3}
export CRESCENT_DATA=$PWD/.gpu/data
parts=${*:-specs recipes bench sanitize}
bench_log=gpu_swav${CRESCENT_CUDNN_BENCHMARK:+_cudnn_benchmark}
want() { [[ " $parts " == *" $1 "* ]]; }

# part NAME LIMIT_S COMMAND...: runs COMMAND under a time limit into $logs/NAME.txt and
# appends "NAME rc=... s=..." to the summary
part() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" > "$logs/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc s=$((SECONDS - t0))$([ $rc = 124 ] && echo ' (timed out)')" | tee -a "$out/summary.txt"
}
pack() { tar -C /tmp -czf "$out/logs.tgz" gpu_logs runs 2>/dev/null; }

# a few hundred steps of a recipe on cuda, a metrics line every 10 steps
recipe() {
  local name=$1 script=$2; shift 2
  part "recipe_$name" 200 env OMP_NUM_THREADS=2 luajit "$script" train.device=cuda run.dir=/tmp/runs \
    run.name="$name" checkpoint.save=false train.log_every=10 "$@"
}

if want specs || want recipes || want sanitize; then
  if want specs; then
    for f in spec/cuda_*spec.lua; do
      n=$(basename "$f" .lua)
      part "$n" 200 env OMP_NUM_THREADS=2 $BUSTED -o utfTerminal "$f" &
    done
  fi
  if want recipes; then
    recipe swav_f32 recipes/swav.lua train.epochs=2 data.limit=30000 &
    recipe swav_bf16 recipes/swav.lua train.epochs=2 data.limit=30000 train.amp=bf16 &
    recipe moco_f32 recipes/moco.lua train.epochs=2 data.limit=30000 &
    recipe supervised_f32 recipes/supervised.lua train.epochs=1 data.limit=30000 &
    recipe supervised_bf16 recipes/supervised.lua train.epochs=1 data.limit=30000 train.amp=bf16 &
  fi
  if want sanitize && command -v compute-sanitizer > /dev/null; then
    # every GPU spec file (cuda_train_spec takes 86 s under it), or those that
    # CRESCENT_SANITIZE_SPECS names.
    # The sanitizer's host backtraces stay off: libgcc's unwinder aborts the process on the
    # frames of LuaJIT's compiled traces (an H200, 2026-11-27: cuLaunchKernel ->
    # _Unwind_Backtrace -> abort). API errors are not reported: crescent turns each into a
    # Lua error that fails its spec, and cuda_spec provokes out-of-memory ones on purpose.
    for n in ${CRESCENT_SANITIZE_SPECS:-$(cd spec && ls cuda_*spec.lua | sed 's/\.lua$//')}; do
      part "sanitize_$n" 200 env OMP_NUM_THREADS=2 compute-sanitizer --tool memcheck --error-exitcode 9 \
        --show-backtrace device --report-api-errors no \
        $BUSTED -o TAP "spec/$n.lua" &
    done
  fi
  wait
  pack
fi

if want bench; then
  part "$bench_log" 200 luajit bench/gpu_swav.lua
  pack
fi
if want compile; then
  part "${bench_log}_compile" 420 luajit bench/gpu_swav.lua compile=1
  pack
fi
if want profile; then
  part gpu_swav_profile 200 luajit bench/gpu_swav.lua profile=1 steps=3 warmup=3
  part gpu_swav_torch_profile 200 "$CRESCENT_TORCH_PYTHON" bench/gpu_swav_torch.py --profile --steps 3 --warmup 3
  pack
fi
if want kernels; then
  # without CRESCENT_CUDNN_BENCHMARK: its timing runs would be most of the kernels
  part ncu_swav_bf16 240 env -u CRESCENT_CUDNN_BENCHMARK ncu --clock-control none --metrics \
    gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum -f -o "$logs/swav_bf16" \
    luajit bench/gpu_swav.lua only=swav_bf16 steps=1 warmup=1
  ncu --import "$logs/swav_bf16.ncu-rep" --csv --page raw --print-units base > "$logs/ncu_swav_bf16.csv" 2>&1
  python3 tools/ncu_summary.py "$logs/ncu_swav_bf16.csv" 50 > "$logs/ncu_swav_bf16_summary.txt" 2>&1
  cat "$logs/ncu_swav_bf16_summary.txt"
  part ncu_details 200 env -u CRESCENT_CUDNN_BENCHMARK ncu --clock-control none --set full \
    -k 'regex:rows_kernel|dense_half|dense_cast|max_bwd' --launch-skip 60 --launch-count 14 -f -o "$logs/details" \
    luajit bench/gpu_swav.lua only=swav_bf16 steps=1 warmup=1
  ncu --import "$logs/details.ncu-rep" --page details > "$logs/ncu_details.txt" 2>&1
  rm -f "$logs"/*.ncu-rep
  pack
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >> "$logs/nvidia-smi.txt" 2>&1
pack
echo "--- summary"
cat "$out/summary.txt"
for f in "$logs"/cuda_*spec.txt; do echo "--- $(basename "$f")"; grep -E '^[0-9]+ success|rror|Failure' "$f" | head -5; done
grep -h 'img/s\|failed' "$logs"/gpu_swav*.txt 2>/dev/null
