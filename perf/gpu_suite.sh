#!/usr/bin/env bash
# The GPU path in one command: builds Loom with CUDA, runs the GPU tests (kernels, device
# collectives as threads and as processes, the DDP layer on device buffers, NVML's view of
# the GPUs), then the GPU benchmarks (reduce-kernel and copy bandwidth; loom-perf allreduce
# and broadcast on 2 and 4 ranks of GPU 0 from 8 B to 1 GiB; the 8 B allreduce in a loop and
# inside a replayed CUDA graph, and what a plan kernel's fixed cost is made of; the tuner's
# device constants calibrated on the GPU, and the allreduce again under them), and leaves
# every output under OUT.
#
#   perf/gpu_suite.sh [--builddir DIR] [--out DIR] [--prebuilt DIR] [--bundle DIR] [--part P]
#                     [--nccl-tests KIT]
#
#   --builddir DIR   build here (default build-gpu, release with tests)
#   --bundle DIR     only build, then copy the stripped programs and libcudart into DIR, for a
#                    GPU machine that cannot build (no packages); run them there with --prebuilt
#   --prebuilt DIR   skip the build: take the programs from a --bundle DIR
#   --out DIR        where logs and tables go (default gpu-results)
#   --tar FILE       also pack OUT into FILE (.tgz), after every step
#   --part P         device (default): the steps above; torch: instead, build the backend
#                    loom_torch with torch's extension tooling against python3's torch (the
#                    GPU machine's is torch 2) and the bundle's libloom, and run its tests
#                    that need that machine (tests/compat/torch/torch_backend_test.py, 1-4
#                    ranks: CUDA tensors, DDP and FSDP on them, and what differs on its torch 2:
#                    blocking calls on the caller's thread, torch.compile; the CPU cases run on
#                    torch 2.6 in tests/compat/torch/torch2_chroot.sh),
#                    then PyTorch's backend "nccl" and CuPy on Loom's libnccl.so.2
#                    (tests/compat/nccl/frameworks_on_shim.py), NVIDIA's nccl-tests on it
#                    (1 and 2 ranks, 8 B to 64 MiB: what device time allows) where their kit is,
#                    and last the backend's CPU all_reduce against the C API (torch_bench.py)
#   --nccl-tests KIT the kit perf/nccl_tests.sh build made (default build-nccl-tests; its
#                    bin and debs are what must travel, about 27 MiB built for sm_90 only:
#                    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90")
#
# Without a GPU every test prints `skipped: no CUDA device` and the benchmarks say so.
#
# On a lent GPU machine (no packages there, hence the bundle; 64 MiB travel, 8 files come back):
#   here:  perf/gpu_suite.sh --bundle build-gpubundle        (build-* is git-ignored)
#   there: tar -xJf build-gpubundle/device.tar.xz &&
#          perf/gpu_suite.sh --prebuilt build-gpubundle --out /tmp/g/r --tar $OUT/r.tgz
#          with build-gpubundle/device.tar.xz carried (the bundle's programs, compressed: a
#          carry holds 64 MiB with the tree, and the programs alone are 62). The whole suite
#          took about 4 minutes on an H100. For --part torch carry build-gpubundle/torch.tar.xz
#          (libloom, libnccl, libcudart and, when perf/nccl_tests.sh built it before the
#          bundle, the nccl-tests kit's bin and debs).
#   Use a fresh --builddir for a bundle: it is configured without the libraries the GPU
#   machine lacks (hwloc, UCX, verbs, MPI). NCCL there comes from its PyTorch.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

builddir=build-gpu out=gpu-results prebuilt="" bundle="" tarfile="" part=device nccl_tests=build-nccl-tests
while (($#)); do
  case "$1" in
    --builddir) builddir=$2; shift ;;
    --out) out=$2; shift ;;
    --prebuilt) prebuilt=$2; shift ;;
    --bundle) bundle=$2; shift ;;
    --tar) tarfile=$2; shift ;;
    --part) part=$2; shift ;;
    --nccl-tests) nccl_tests=$2; shift ;;
    *) echo "gpu_suite.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

programs=(tests/gpu/device_collectives_test tests/gpu/device_collectives_processes_test
          tests/gpu/kernels_test tests/gpu/ddp_device_test tests/unit/nvml_probe_test tools/loom-topo
          perf/loom-kernel-bw perf/loom-kernel-latency perf/loom-perf tools/loomrun/loomrun)

if [[ -z $prebuilt ]]; then
  if [[ ! -d $builddir ]]; then
    # A bundle leaves out the libraries the GPU machine lacks (hwloc, UCX, verbs, MPI).
    portable=()
    [[ -n $bundle ]] && portable=(-Dhwloc=disabled -Ducx=disabled -Dibverbs=disabled -Dmpi=disabled)
    meson setup "$builddir" -Dbuildtype=release -Dtests=true -Dcuda=enabled "${portable[@]}" || exit 1
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
    # For --part torch: libloom for loom_torch, under its soname only (10 MB; the linker's name
    # is made there), and the NCCL shim (Loom's libnccl.so.2) for PyTorch's and CuPy's NCCL.
    mkdir -p "$bundle/lib"
    strip -o "$bundle/lib/libloom.so.0" "$builddir/src/libloom.so" || exit 1
    strip -o "$bundle/lib/libnccl.so.2" "$builddir/src/compat/nccl/libnccl.so.2" || exit 1
    # NCCL itself (over 200 MB) stays behind: the GPU machine's PyTorch brings one.
    if [[ -x $builddir/perf/loom-nccl-bench ]]; then
      strip -o "$bundle/perf/loom-nccl-bench" "$builddir/perf/loom-nccl-bench" || exit 1
    fi
    # What each call carries, compressed (the binaries hold the plan kernel's fatbin many times
    # over: 62 MiB of device part went into 6.6 MiB), with the nccl-tests kit where built.
    tar -cf - "$bundle"/{perf,tests,tools,libcudart.so.13} | xz -T2 -6 > "$bundle/device.tar.xz" || exit 1
    kit=()
    [[ -d $nccl_tests/bin ]] && kit=("$nccl_tests/bin" "$nccl_tests/debs")
    tar -cf - "$bundle"/{lib,libcudart.so.13} "${kit[@]}" | xz -T2 -6 > "$bundle/torch.tar.xz" || exit 1
    echo "gpu_suite.sh: bundle in $bundle ($(du -sh "$bundle" | cut -f1)); carry $bundle/device.tar.xz" \
      "($(du -h "$bundle/device.tar.xz" | cut -f1)) and $bundle/torch.tar.xz ($(du -h "$bundle/torch.tar.xz" | cut -f1))"
    exit 0
  fi
else
  bin=$prebuilt
  export LD_LIBRARY_PATH="$prebuilt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # loom-nccl-bench needs a libnccl.so.2: the one of the pip package nvidia-nccl (PyTorch's).
  nccl=$(find / -xdev -name libnccl.so.2 -path '*nvidia/nccl/lib/*' 2>/dev/null | head -1)
  [[ -n $nccl ]] && LD_LIBRARY_PATH+=":$(dirname "$nccl")"
fi

mkdir -p "$out"
rc=0
run() {  # run NAME COMMAND...: output to OUT/NAME.log and to the terminal
  local name=$1; shift
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$out/$name.log"
  local status=${PIPESTATUS[0]}
  if ((status == 77)); then
    echo "=== $name skipped (exit 77: what it needs is not here, its log says what)"
  elif ((status != 0)); then
    echo "=== $name failed (exit $status)"
    rc=1
  fi
  # Packed after every step: a command stopped at the machine's limit still brings back all
  # that ran before.
  [[ -z $tarfile ]] || tar czf "$tarfile" -C "$(dirname "$out")" "$(basename "$out")"
  return "$status"
}

finish() {  # the verdict, the outputs packed once more, and the exit status
  echo "gpu_suite.sh: outputs in $out; $( ((rc == 0)) && echo 'everything passed' || echo 'SOMETHING FAILED (see above)')"
  [[ -z $tarfile ]] || tar czf "$tarfile" -C "$(dirname "$out")" "$(basename "$out")"
  exit "$rc"
}

nvidia-smi -L 2>&1 | tee "$out/device.txt"

if [[ $part == torch ]]; then
  # The extension is built here, against this machine's torch, into a fresh directory.
  # The python3 that imports torch (Debian's lives in /usr/bin; an earlier one on PATH may not).
  python=python3
  "$python" -c 'import torch' 2>/dev/null || python=/usr/bin/python3
  work=$(mktemp -d)
  lib=$work/lib
  mkdir -p "$lib"
  if [[ -f $bin/lib/libloom.so.0 ]]; then
    ln -s "$(realpath "$bin/lib/libloom.so.0")" "$lib/libloom.so.0"
    shim=$(realpath "$bin/lib")
  else
    ln -s "$(realpath "$bin/src/libloom.so.0")" "$lib/libloom.so.0"
    shim=$(realpath "$bin/src/compat/nccl")
  fi
  ln -s libloom.so.0 "$lib/libloom.so"
  run torch-version "$python" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.__file__)'
  run torch-build timeout -k 10 240 "$python" src/compat/torch/build_extension.py "$lib" "$work/python" \
    "$work/tmp" "$work/stamp"
  if [[ -f $work/stamp ]]; then
    run torch-backend env PYTHONPATH="$work/python" LOOM_TIMEOUT_MS=60000 timeout -k 10 300 "$python" \
      tests/compat/torch/torch_backend_test.py --ranks 1,2,3,4 \
      --only cuda,ddp_cuda,ddp_fp16_hook_cuda,fsdp_cuda,caller_runs,compiled,allreduce
  fi
  # PyTorch's own backend "nccl" and CuPy on Loom's libnccl.so.2, 2 ranks on the one GPU; then
  # what NCCL itself does with them (it refuses two ranks on one GPU).
  run nccl-shim-frameworks timeout -k 10 300 "$python" tests/compat/nccl/frameworks_on_shim.py "$shim"
  run nccl-real-torch timeout -k 10 120 "$python" tests/compat/nccl/frameworks_on_shim.py "$shim" --only torch \
    --real
  # NVIDIA's nccl-tests on the shim, where a kit was carried (perf/nccl_tests.sh build; its
  # library left out to save carrying it twice: the bundle's is the same).
  if [[ -d $nccl_tests/bin ]]; then
    mkdir -p "$nccl_tests/lib"
    [[ -f $nccl_tests/lib/libnccl.so.2 ]] || ln -sf "$shim/libnccl.so.2" "$nccl_tests/lib/libnccl.so.2"
    run nccl-tests env MAX_BYTES=64M timeout -k 10 240 perf/nccl_tests.sh run "$nccl_tests" 1 2
    cp -r "$nccl_tests/results" "$out/nccl-tests" 2>/dev/null
  fi
  if [[ -f $work/stamp ]]; then
    # Last, being a CPU figure: CPU tensors through the backend against Loom's C API in the same
    # processes, on torch 2, whose blocking calls run on the caller's thread (issue 26: within
    # 10 % from 1 MiB).
    run torch-bench env PYTHONPATH="$work/python" timeout -k 10 180 "$python" perf/torch_bench.py \
      --only allreduce --rounds 1 --out "$out/torch_bench.md"
  fi
  finish
fi

# Steps run most telling first, each under its own limit, so that a device machine's command
# (10 minutes at most) that meets a stall still brings back the rest. Inside Loom every wait
# ends after LOOM_TIMEOUT_MS (20 s here unless set): a stalled kernel then reports the call,
# step and peer it waited for, which a kill would not. The plan kernel is loaded when a
# communicator is made; CUDA_MODULE_LOADING=EAGER loads the tests' own kernels at start too, so
# that a lazy load (which may wait for the whole device, where a peer's kernel waits) cannot
# stall them.
export CUDA_MODULE_LOADING=EAGER
export LOOM_TIMEOUT_MS=${LOOM_TIMEOUT_MS:-20000}
perf() {  # perf NAME LIMIT_S LOOM-PERF-ARGS...
  local name=$1 limit=$2; shift 2
  run "$name" timeout -k 10 "$limit" "$bin/perf/loom-perf" "$@"
}

# 8 B allreduce, 2 ranks: time per call in a loop of calls, and per call inside a replayed
# CUDA graph of 20 calls (the issue's targets: 10 and 5 µs).
perf latency-loop 45 allreduce --device cuda -t 2 -b 8 -e 8 -n 2000 -w 100 -c 1
# Where the time of those calls goes inside the kernel: every worker's steps timed on the GPU's
# global timer (LOOM_DEVICE_TIMELINE), their means logged per rank when the communicators end.
for ranks in 1 2; do
  run "latency-timeline-graph-$ranks" env LOOM_DEVICE_TIMELINE=1 LOOM_DEBUG=INFO timeout -k 10 45 \
    "$bin/perf/loom-perf" allreduce --device cuda -t "$ranks" -b 8 -e 8 -n 20 -w 5 -G 100
done
run latency-timeline-loop env LOOM_DEVICE_TIMELINE=1 LOOM_DEBUG=INFO timeout -k 10 45 \
  "$bin/perf/loom-perf" allreduce --device cuda -t 2 -b 8 -e 8 -n 2000 -w 100 -c 1
# What a plan kernel's fixed cost is made of: probe kernels that each add a piece of its start
# and end (fences, stores to host memory, scopes), and the plan kernel on a plan of no steps.
run kernel-latency timeout -k 10 60 "$bin/perf/loom-kernel-latency"
# The physical limit beside the collectives: a device-to-device copy of the same bytes
# (loom-kernel-bw's copy column), and the reduce kernels.
run kernel-bw timeout -k 10 60 "$bin/perf/loom-kernel-bw" --types f32,f16,bf16,f64,i8,f8e4m3
# Every power of two, so that the issue's sizes (256 MiB and above, 1 GiB) are on the grid: the
# large calls take milliseconds, the checks of the largest a few seconds.
perf allreduce-2threads 120 allreduce --device cuda -t 2 -b 8 -e 1G -f 2 -n 10 -w 3 -c 1 \
  --json "$out/allreduce-2threads.json"
# float8 through the plan kernel's conversion instructions, every op, checked.
perf allreduce-2threads-f8e4m3 60 allreduce --device cuda -t 2 -b 8 -e 256M -f 16 -n 10 -w 3 -c 1 -d f8e4m3 -o all
# Channels (thread blocks per peer and direction) forced, beside the default's pick above.
for channels in 8 16 32 64; do
  run "allreduce-2threads-ch$channels" env LOOM_CHANNELS=$channels timeout -k 10 60 "$bin/perf/loom-perf" allreduce \
    --device cuda -t 2 -b 8M -e 1G -f 4 -n 10 -w 3 -c 1
done
# The device constants of the tuner's model measured on this GPU (2 processes; docs/TUNING.md),
# its predictions under them, and the 2-rank allreduce with the tuner choosing under them.
run calibrate-device timeout -k 10 90 "$bin/tools/loomrun/loomrun" -n 2 \
  "$bin/perf/loom-perf" --calibrate "$out/device-tuning.txt" --device cuda
if [[ -s $out/device-tuning.txt ]]; then
  run predict-device env LOOM_TUNING_FILE="$out/device-tuning.txt" "$bin/tools/loom-topo" \
    --predict allreduce --ranks 2 --device
  run allreduce-2threads-calibrated env LOOM_TUNING_FILE="$out/device-tuning.txt" LOOM_DEBUG=INFO \
    timeout -k 10 90 "$bin/perf/loom-perf" allreduce --device cuda -t 2 -b 8 -e 1G -f 16 -n 10 -w 3 -c 1
fi
run tests-threads timeout -k 10 180 "$bin/tests/gpu/device_collectives_test"
run tests-processes timeout -k 10 150 "$bin/tests/gpu/device_collectives_processes_test"
# FIFOs in pinned host memory, the path of GPUs without peer access (LOOM_P2P_DISABLE forces it
# on one GPU): every collective as threads and as processes, and the 2-rank allreduce over them.
run tests-threads-hostfifo env LOOM_P2P_DISABLE=1 timeout -k 10 90 "$bin/tests/gpu/device_collectives_test" \
  --gtest_filter='*DeviceCollectives.*'
run tests-processes-hostfifo env LOOM_P2P_DISABLE=1 timeout -k 10 90 \
  "$bin/tests/gpu/device_collectives_processes_test" --gtest_filter='*DeviceCollectives.*'
run allreduce-2threads-hostfifo env LOOM_P2P_DISABLE=1 LOOM_DEBUG=INFO timeout -k 10 60 "$bin/perf/loom-perf" \
  allreduce --device cuda -t 2 -b 8 -e 64M -f 8 -n 10 -w 3 -c 1
perf latency-graph 45 allreduce --device cuda -t 2 -b 8 -e 8 -n 20 -w 5 -G 100
# One rank alone in a graph: what a plan kernel costs on the device with no peer to wait for.
perf latency-graph-1rank 45 allreduce --device cuda -t 1 -b 8 -e 8 -n 20 -w 5 -G 100
# NCCL on the same calls (perf/nccl_bench): one rank alone, and 2 ranks, which NCCL refuses on
# one GPU (exit 3, its words in the log); beside them Loom's one rank.
if [[ -x $bin/perf/loom-nccl-bench ]]; then
  for ranks in 1 2; do
    run "nccl-${ranks}ranks" timeout -k 10 60 "$bin/perf/loom-nccl-bench" -n "$ranks" -b 8 -e 1G -f 4 -i 10
  done
  run nccl-latency-graph timeout -k 10 30 "$bin/perf/loom-nccl-bench" -n 1 -b 8 -e 8 -i 20 -G 100
  perf allreduce-1thread 60 allreduce --device cuda -t 1 -b 8 -e 1G -f 4 -n 10 -w 3 -c 1
else
  echo "gpu_suite.sh: no loom-nccl-bench (NCCL not found at build time): no NCCL figures" | tee "$out/nccl.log"
fi
perf allreduce-4threads 120 allreduce --device cuda -t 4 -b 8 -e 1G -f 2 -n 10 -w 3 -c 1 \
  --json "$out/allreduce-4threads.json"
for ranks in 2 4; do
  perf "broadcast-${ranks}threads" 120 broadcast --device cuda -t "$ranks" -b 8 -e 1G -f 2 -n 10 -w 3 -c 1 \
    --json "$out/broadcast-${ranks}threads.json"
done
run tests-ddp timeout -k 10 60 "$bin/tests/gpu/ddp_device_test"
# NVML as the live topology sees it: the GPUs' bus ids and generation, their NVLinks.
run tests-nvml timeout -k 10 30 "$bin/tests/unit/nvml_probe_test"
run topology timeout -k 10 30 env LOOM_DEBUG=INFO "$bin/tools/loom-topo"
# Each wire forced, 8 B to 1 MiB, so the cost model's constants can be fitted (docs/TUNING.md).
for proto in simple ll; do
  run "allreduce-2threads-$proto" env LOOM_PROTO=$proto timeout -k 10 60 "$bin/perf/loom-perf" allreduce \
    --device cuda -t 2 -b 8 -e 1M -f 4 -n 50 -w 5 -c 1
done
# The reduce kernels against the host, on every type, op, count and misalignment: long (the
# references are computed on the host), so last.
run tests-kernels timeout -k 10 150 "$bin/tests/gpu/kernels_test"

finish
