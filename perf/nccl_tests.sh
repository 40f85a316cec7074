#!/usr/bin/env bash
# NVIDIA's nccl-tests on Loom: built against the CUDA install's nccl.h and Loom's
# libnccl.so.2 (src/compat/nccl, docs/COMPAT_NCCL.md), run on GPU 0 with every rank a
# process of its own (nccl-tests gives each rank of one process its own GPU, so ranks that
# share one GPU must be processes: NCCL_TESTS_DEVICE=0 under mpirun).
#
#   perf/nccl_tests.sh build SRC [OUT]        build a checkout of github.com/NVIDIA/nccl-tests
#                                             into OUT (default build-nccl-tests), with MPI when
#                                             mpicc is there; needs no GPU
#   perf/nccl_tests.sh run OUT [RANKS...]     all_reduce, all_gather, broadcast, reduce_scatter
#                                             and alltoall perf, 8 B to 1 GiB, -c 1, for each
#                                             rank count (default 1 2 4); tables in OUT/results
#
# Environment: LOOM_BUILD (default build) is where Loom's libnccl.so.2 was built;
# NVCC_GENCODE (default sm_80 and sm_90: A100, H100, H200) limits the build's architectures.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { echo "nccl_tests.sh: $*" >&2; exit 1; }
loom_build=${LOOM_BUILD:-build}
shim_dir=$("$loom_build/tools/loom-info" --nccl-path) || die "build Loom first (./setup.sh): no libnccl.so.2 in $loom_build"
tests=(all_reduce_perf all_gather_perf broadcast_perf reduce_scatter_perf alltoall_perf)

build() {
  local src=$1 out=${2:-build-nccl-tests}
  [[ -f $src/src/common.cu ]] || die "$src is not a checkout of nccl-tests"
  local cuda=/usr/local/cuda
  # NCCL_HOME as nccl-tests' Makefile wants it: include/nccl.h (CUDA's, the header the library
  # implements) and lib/libnccl.so (Loom's).
  local home=$out/nccl-home
  mkdir -p "$home/include" "$home/lib" || exit 1
  ln -sf "$cuda/include/nccl.h" "$home/include/nccl.h"
  ln -sf "$shim_dir/libnccl.so.2" "$home/lib/libnccl.so"
  local mpi=(MPI=0)
  if command -v mpicc >/dev/null; then
    mpi=(MPI=1 "MPI_HOME=$(dirname "$(mpicc --showme:libdirs | cut -d' ' -f1)")")
  fi
  rm -rf "$out/src" && cp -r "$src" "$out/src" || exit 1
  make -C "$out/src" -j"$(nproc)" "${mpi[@]}" CUDA_HOME=$cuda NCCL_HOME="$(realpath "$home")" \
    NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90}" \
    BUILDDIR="$(realpath "$out")/bin" || die "make failed"
  for t in "${tests[@]}"; do
    # The loader must find Loom's library, not a real NCCL: check it as the run will see it.
    local resolved
    resolved=$(LD_LIBRARY_PATH=$shim_dir ldd "$out/bin/$t" | grep 'libnccl.so.2 =>')
    [[ $resolved == *"$shim_dir/libnccl.so.2"* ]] || die "$t resolves ${resolved:-nothing}, not $shim_dir/libnccl.so.2"
  done
  echo "nccl_tests.sh: built ${tests[*]} in $out/bin (${mpi[0]}); libnccl.so.2 -> $shim_dir"
}

run() {
  local out=$1; shift
  local ranks=("$@")
  ((${#ranks[@]})) || ranks=(1 2 4)
  mkdir -p "$out/results"
  local rc=0
  for n in "${ranks[@]}"; do
    for t in "${tests[@]}"; do
      local log=$out/results/${t}_np$n.txt
      local launch=()
      if ((n > 1)); then
        command -v mpirun >/dev/null || { echo "nccl_tests.sh: no mpirun: $n ranks skipped"; continue; }
        launch=(mpirun --allow-run-as-root --oversubscribe -np "$n" -x LD_LIBRARY_PATH -x NCCL_TESTS_DEVICE)
      fi
      echo "=== $t on $n rank(s) of GPU 0"
      LD_LIBRARY_PATH=$shim_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} NCCL_TESTS_DEVICE=0 \
        timeout -k 10 240 "${launch[@]}" "$out/bin/$t" -b 8 -e 1G -f 2 -g 1 -c 1 2>&1 | tee "$log"
      local status=${PIPESTATUS[0]}
      # nccl-tests' verdict: "# Out of bounds values : 0 OK" and no non-zero #wrong.
      if ((status != 0)) || ! grep -q 'Out of bounds values : 0 OK' "$log"; then
        echo "=== $t on $n rank(s): FAILED (exit $status)"
        rc=1
      fi
    done
  done
  return $rc
}

case "${1:-}" in
  build) shift; (($# >= 1)) || die "usage: build SRC [OUT]"; build "$@" ;;
  run) shift; (($# >= 1)) || die "usage: run OUT [RANKS...]"; run "$@" ;;
  *) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
