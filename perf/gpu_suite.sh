#!/usr/bin/env bash
# The GPU path in one command: builds Loom with CUDA, runs the GPU tests (kernels, then
# device collectives as threads and as processes, then NVML's view of the GPUs), then the GPU benchmarks (reduce-kernel
# bandwidth against a device-to-device copy; loom-perf allreduce on 2 ranks of GPU 0, plain
# and as a CUDA graph), and leaves every output under OUT.
#
#   perf/gpu_suite.sh [--builddir DIR] [--out DIR] [--prebuilt DIR] [--bundle DIR]
#
#   --builddir DIR   build here (default build-gpu, release with tests)
#   --bundle DIR     only build, then copy the stripped programs and libcudart into DIR, for a
#                    GPU machine that cannot build (no packages); run them there with --prebuilt
#   --prebuilt DIR   skip the build: take the programs from a --bundle DIR
#   --out DIR        where logs and tables go (default gpu-results)
#
# Without a GPU every test prints `skipped: no CUDA device` and the benchmarks say so.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

builddir=build-gpu out=gpu-results prebuilt="" bundle=""
while (($#)); do
  case "$1" in
    --builddir) builddir=$2; shift ;;
    --out) out=$2; shift ;;
    --prebuilt) prebuilt=$2; shift ;;
    --bundle) bundle=$2; shift ;;
    *) echo "gpu_suite.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

programs=(tests/gpu/device_collectives_test tests/gpu/device_collectives_processes_test
          tests/gpu/kernels_test tests/unit/nvml_probe_test tools/loom-topo perf/loom-kernel-bw
          perf/loom-perf)

if [[ -z $prebuilt ]]; then
  if [[ ! -d $builddir ]]; then
    meson setup "$builddir" -Dbuildtype=release -Dtests=true -Dcuda=enabled || exit 1
  fi
  ninja -C "$builddir" || exit 1
  bin=$builddir
  if [[ -n $bundle ]]; then
    mkdir -p "$bundle"
    for p in "${programs[@]}"; do
      mkdir -p "$bundle/$(dirname "$p")"
      strip -o "$bundle/$p" "$builddir/$p" || exit 1
    done
    cp -L /usr/local/cuda/lib64/libcudart.so.13 "$bundle/" || exit 1
    echo "gpu_suite.sh: bundle in $bundle ($(du -sh "$bundle" | cut -f1))"
    exit 0
  fi
else
  bin=$prebuilt
  export LD_LIBRARY_PATH="$prebuilt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

mkdir -p "$out"
rc=0
run() {  # run NAME COMMAND...: output to OUT/NAME.log and to the terminal
  local name=$1; shift
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$out/$name.log"
  local status=${PIPESTATUS[0]}
  ((status == 0)) || { echo "=== $name failed (exit $status)"; rc=1; }
  return "$status"
}

nvidia-smi -L 2>&1 | tee "$out/device.txt"

# A stalled test is killed after 4 minutes, so that one stall leaves time for the rest (a
# device machine's command runs at most 10).
run tests-kernels timeout -k 10 240 "$bin/tests/gpu/kernels_test"
threads_failed=0
run tests-threads timeout -k 10 240 "$bin/tests/gpu/device_collectives_test" || threads_failed=1
run tests-processes timeout -k 10 240 "$bin/tests/gpu/device_collectives_processes_test"
if ((threads_failed)); then
  # The direct path stalled before (docs/RESULTS.md) with lazy kernel loading on. One rank,
  # direct path, every module loaded at start: passing here but not above would mean a
  # kernel Loom does not load itself (cuda::loadKernels) is still loaded lazily.
  run diagnose-eager env CUDA_MODULE_LOADING=EAGER timeout -k 10 120 "$bin/tests/gpu/device_collectives_test" \
    --gtest_filter='Threads/DeviceCollectives.MatchReferences/1ranks_ipc'
fi
# NVML as the live topology sees it: the GPUs' bus ids and generation, their NVLinks.
run tests-nvml "$bin/tests/unit/nvml_probe_test"
run topology env LOOM_DEBUG=INFO "$bin/tools/loom-topo"

run kernel-bw "$bin/perf/loom-kernel-bw" --types f32,f16,bf16,f64,i8
# Device communicators are refused without LOOM_CUDA_EXPERIMENTAL=1 until verified (issue 8).
run allreduce-2threads env LOOM_CUDA_EXPERIMENTAL=1 "$bin/perf/loom-perf" allreduce --device cuda -t 2 \
  -b 8 -e 256M -f 8 -n 10 -w 3 -c 1
run allreduce-2threads-graph env LOOM_CUDA_EXPERIMENTAL=1 "$bin/perf/loom-perf" allreduce --device cuda -t 2 \
  -b 8 -e 16M -f 8 -n 10 -w 3 -G 5

echo "gpu_suite.sh: outputs in $out; $( ((rc == 0)) && echo 'everything passed' || echo 'SOMETHING FAILED (see above)')"
exit $rc
