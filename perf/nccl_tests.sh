#!/usr/bin/env bash
# NVIDIA's nccl-tests on Loom: built against the CUDA install's nccl.h and Loom's
# libnccl.so.2 (src/compat/nccl, docs/COMPAT_NCCL.md), run on GPU 0 with every rank a
# process of its own (nccl-tests gives each rank of one process its own GPU, so ranks that
# share one GPU must be processes: NCCL_TESTS_DEVICE=0 under mpirun).
#
#   perf/nccl_tests.sh build SRC [OUT]        build a checkout of github.com/NVIDIA/nccl-tests
#                                             into OUT (default build-nccl-tests), with MPI when
#                                             mpicc is there; needs no GPU. OUT is a kit for a
#                                             machine without packages: it also holds Loom's
#                                             libnccl.so.2 (OUT/lib) and, with MPI, Open MPI's
#                                             runtime packages (OUT/debs, from apt)
#   perf/nccl_tests.sh run OUT [RANKS...]     all_reduce, all_gather, broadcast, reduce_scatter
#                                             and alltoall perf, 8 B to MAX_BYTES, -c 1, for each
#                                             rank count (default 1 2 4); tables in OUT/results
#
# Environment: LOOM_BUILD (default build) is where Loom's libnccl.so.2 was built (build: the
# kit copies it; run: used when the kit has none); NVCC_GENCODE (default sm_80 and sm_90: A100,
# H100, H200) limits the build's architectures; MAX_BYTES (run, default 1G) the largest size.
# Where run finds no mpirun it unpacks OUT/debs into a directory of its own and runs that Open
# MPI from there (OPAL_PREFIX), shared memory only, no single-copy (gVisor has no CMA).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

die() { echo "nccl_tests.sh: $*" >&2; exit 1; }
tests=(all_reduce_perf all_gather_perf broadcast_perf reduce_scatter_perf alltoall_perf)
# Open MPI's runtime and what it loads, as Debian 12 names them.
mpi_packages=(openmpi-bin libopenmpi3 openmpi-common libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1
              libhwloc15 libpmix2 libpsm-infinipath1 libpsm2-2 libnl-3-200 libnl-route-3-200 libibverbs1
              librdmacm1 libucx0)

loomShimDir() {
  "${LOOM_BUILD:-build}/tools/loom-info" --nccl-path ||
    die "build Loom first (./setup.sh): no libnccl.so.2 in ${LOOM_BUILD:-build}"
}

build() {
  local src=$1 out=${2:-build-nccl-tests}
  [[ -f $src/src/common.cu ]] || die "$src is not a checkout of nccl-tests"
  local shim_dir cuda=/usr/local/cuda
  shim_dir=$(loomShimDir) || exit 1
  mkdir -p "$out/lib" || exit 1
  strip -o "$out/lib/libnccl.so.2" "$shim_dir/libnccl.so.2" || exit 1
  # NCCL_HOME as nccl-tests' Makefile wants it: include/nccl.h (CUDA's, the header the library
  # implements) and lib/libnccl.so (Loom's).
  local home=$out/nccl-home
  mkdir -p "$home/include" "$home/lib" || exit 1
  ln -sf "$cuda/include/nccl.h" "$home/include/nccl.h"
  ln -sf "$(realpath "$out/lib/libnccl.so.2")" "$home/lib/libnccl.so"
  local mpi=(MPI=0)
  if command -v mpicc >/dev/null; then
    mpi=(MPI=1 "MPI_HOME=$(dirname "$(mpicc --showme:libdirs | cut -d' ' -f1)")")
    rm -rf "$out/debs" && mkdir -p "$out/debs" || exit 1
    (cd "$out/debs" && apt-get download "${mpi_packages[@]}" >/dev/null) || die "apt-get download of Open MPI failed"
  fi
  rm -rf "$out/src" && cp -r "$src" "$out/src" || exit 1
  make -C "$out/src" -j"$(nproc)" "${mpi[@]}" CUDA_HOME=$cuda NCCL_HOME="$(realpath "$home")" \
    NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90}" \
    BUILDDIR="$(realpath "$out")/build" || die "make failed"
  mkdir -p "$out/bin" || exit 1
  for t in "${tests[@]}"; do
    strip -o "$out/bin/$t" "$out/build/$t" || exit 1
    # The loader must find Loom's library, not a real NCCL: check it as the run will see it.
    local resolved
    resolved=$(LD_LIBRARY_PATH=$out/lib ldd "$out/bin/$t" | grep 'libnccl.so.2 =>')
    [[ $resolved == *"$out/lib/libnccl.so.2"* ]] || die "$t resolves ${resolved:-nothing}, not $out/lib/libnccl.so.2"
  done
  rm -rf "$out/src" "$out/build"
  echo "nccl_tests.sh: built ${tests[*]} in $out/bin (${mpi[0]}); kit $out: $(du -sh "$out" | cut -f1)"
}

# Puts an Open MPI on PATH: the machine's, or the kit's packages unpacked; prints the launcher.
findMpirun() {
  local out=$1
  if command -v mpirun >/dev/null; then
    echo mpirun
    return
  fi
  [[ -d $out/debs ]] || return 1
  local root=/tmp/nccl-tests-mpi
  if [[ ! -x $root/usr/bin/orterun ]]; then
    for deb in "$out"/debs/*.deb; do dpkg -x "$deb" "$root" || return 1; done
  fi
  export OPAL_PREFIX=$root/usr PATH=$root/usr/bin:$PATH
  export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo orterun
}

run() {
  local out=$1; shift
  local ranks=("$@")
  ((${#ranks[@]})) || ranks=(1 2 4)
  local shim_dir=$out/lib
  [[ -f $shim_dir/libnccl.so.2 ]] || shim_dir=$(loomShimDir) || exit 1
  shim_dir=$(realpath "$shim_dir")
  export LD_LIBRARY_PATH=$shim_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local mpirun=""
  mpirun=$(findMpirun "$out") || mpirun=""
  mkdir -p "$out/results"
  local rc=0
  for n in "${ranks[@]}"; do
    for t in "${tests[@]}"; do
      local log=$out/results/${t}_np$n.txt
      local launch=()
      if ((n > 1)); then
        [[ -n $mpirun ]] || { echo "nccl_tests.sh: no mpirun and no kit packages: $n ranks skipped"; continue; }
        launch=("$mpirun" --allow-run-as-root --oversubscribe -np "$n" --mca pml ob1 --mca btl "self,vader"
                --mca btl_vader_single_copy_mechanism none -x LD_LIBRARY_PATH -x NCCL_TESTS_DEVICE)
        [[ -n ${OPAL_PREFIX:-} ]] && launch+=(-x OPAL_PREFIX)
      fi
      echo "=== $t on $n rank(s) of GPU 0"
      NCCL_TESTS_DEVICE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        timeout -k 10 240 "${launch[@]}" "$out/bin/$t" -b 8 -e "${MAX_BYTES:-1G}" -f 2 -g 1 -c 1 2>&1 | tee "$log"
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
  *) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
