#!/usr/bin/env bash
# Install what Loom needs to build (Debian 12 packages), configure and build.
#
#   ./setup.sh [--no-deps] [--builddir DIR] [MESON SETUP ARGS...]
#
#   --no-deps        skip the package step
#   --builddir DIR   build directory (default: build)
#   everything else (and anything after `--`) goes to `meson setup`,
#   e.g. ./setup.sh -Dcuda=disabled
#
# Packages are installed only when dpkg says one is missing, so a second run
# is fast and needs no network. The build dir is configured only when it has
# no build.ninja yet; when it has one, extra meson args are applied with
# `meson setup --reconfigure`, and without any it is left alone.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

PACKAGES=(
  meson ninja-build pkg-config g++ python3
  libhwloc-dev libucx-dev libibverbs-dev
  libgtest-dev libgmock-dev
  openmpi-bin libopenmpi-dev
  iproute2
  graphviz
  clang libclang-rt-14-dev
  python3-torch libtorch-dev pybind11-dev python3-setuptools python3-pip python3-venv
)

say() { echo "setup.sh: $*"; }
die() { echo "setup.sh: error: $*" >&2; exit 1; }

usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

deps=1
builddir=build
meson_args=()
while (($#)); do
  case "$1" in
    --no-deps) deps=0 ;;
    --builddir)
      (($# >= 2)) || die "--builddir needs a directory"
      builddir=$2; shift ;;
    --builddir=*) builddir=${1#--builddir=} ;;
    -h|--help) usage; exit 0 ;;
    --) shift; meson_args+=("$@"); break ;;
    *) meson_args+=("$1") ;;
  esac
  shift
done
[[ -n "$builddir" ]] || die "--builddir must not be empty"

# --- packages ---------------------------------------------------------------
if ((deps)); then
  missing=()
  for p in "${PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != installed ]]; then
      missing+=("$p")
    fi
  done
  if ((${#missing[@]})); then
    command -v apt-get >/dev/null || die "missing packages (${missing[*]}) and no apt-get; install them by hand or use --no-deps"
    if ((EUID == 0)); then
      as_root=()
    elif command -v sudo >/dev/null; then
      as_root=(sudo)
    else
      die "missing packages (${missing[*]}): run as root or install sudo (or install them yourself and use --no-deps)"
    fi
    say "installing: ${missing[*]}"
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends "${missing[@]}"
  else
    say "packages: all present"
  fi
fi

command -v meson >/dev/null || die "meson not found (run without --no-deps, or install meson)"
command -v ninja >/dev/null || die "ninja not found (run without --no-deps, or install ninja-build)"

# --- CUDA (optional) ---------------------------------------------------------
# nvcc may live in /usr/local/cuda/bin without being on PATH; meson's cuda
# dependency looks at CUDA_PATH (or /usr/local/cuda).
if [[ -d /usr/local/cuda ]]; then
  if [[ -z "${CUDA_PATH:-}" ]]; then
    export CUDA_PATH=/usr/local/cuda
  fi
  if ! command -v nvcc >/dev/null && [[ -x "$CUDA_PATH/bin/nvcc" ]]; then
    export PATH="$PATH:$CUDA_PATH/bin"
  fi
fi

# --- configure ---------------------------------------------------------------
if [[ ! -f "$builddir/build.ninja" ]]; then
  if [[ -f "$builddir/meson-private/coredata.dat" ]]; then
    # An earlier configure stopped half way: redo it in place.
    say "meson setup --reconfigure $builddir ${meson_args[*]}"
    meson setup --reconfigure "$builddir" "${meson_args[@]}"
  else
    say "meson setup $builddir ${meson_args[*]}"
    meson setup "$builddir" "${meson_args[@]}"
  fi
elif ((${#meson_args[@]})); then
  say "meson setup --reconfigure $builddir ${meson_args[*]}"
  meson setup --reconfigure "$builddir" "${meson_args[@]}"
else
  say "$builddir already configured (meson setup --wipe $builddir to start over)"
fi

# --- build -------------------------------------------------------------------
say "ninja -C $builddir"
ninja -C "$builddir"

# The torch.distributed backend is built only where /usr/bin/python3 imports torch: say which.
if [[ -f $builddir/src/compat/torch/loom_torch.stamp ]]; then
  say "loom_torch (backend \"loom\" for torch.distributed) built: PYTHONPATH=$builddir/python"
else
  say "loom_torch not built: $(grep -ho 'loom_torch: not built[^\"]*' "$builddir/meson-logs/meson-log.txt" | tail -1)"
fi
