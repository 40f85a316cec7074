#!/usr/bin/env bash
# The torch backend's tests on torch 2 where Debian 12 has only 1.13: a Debian 13 (trixie)
# root with its python3-torch (2.6, CPU) and GCC 14, made with debootstrap, in which this
# checkout's committed HEAD is built and `meson test --suite torch` runs. Needs root and
# Debian's package mirror; the root is kept for the next run.
#
#   tests/compat/torch/torch2_chroot.sh [--root DIR] [--all]
#
#   --root DIR   where the trixie root lives (default /var/tmp/loom-trixie)
#   --all        every suite of the plain build, not only torch (the build under GCC 14)
#
# Exits with meson test's status; the test's own closing line is the last it prints.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
root=/var/tmp/loom-trixie
suites=(--suite torch)
while (($#)); do
  case "$1" in
    --root) root=$2; shift ;;
    --all) suites=() ;;
    *) echo "usage: $0 [--root DIR] [--all]" >&2; exit 2 ;;
  esac
  shift
done
((EUID == 0)) || { echo "torch2_chroot.sh: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
say() { echo "torch2_chroot.sh: $*"; }

packages=(python3 python3-torch libtorch-dev pybind11-dev python3-setuptools g++ meson ninja-build pkg-config
          libhwloc-dev libucx-dev libibverbs-dev libgtest-dev libgmock-dev git procps iproute2 python3-pip python3-venv)
if [[ ! -x "$root/usr/bin/apt-get" ]]; then
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
  say "making a Debian trixie root in $root"
  debootstrap --variant=minbase trixie "$root" http://deb.debian.org/debian
fi

mounts=()
cleanup() {
  local m
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null || true; done
}
trap cleanup EXIT
for m in proc sys dev; do
  if ! mountpoint -q "$root/$m"; then
    case $m in
      proc) mount -t proc proc "$root/proc" ;;
      *) mount --rbind "/$m" "$root/$m"; mount --make-rslave "$root/$m" ;;
    esac
    mounts+=("$root/$m")
  fi
done

# apt inside the root resolves what debootstrap's --include leaves unconfigured.
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get update -q
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"
say "torch $(chroot "$root" python3 -c 'import torch; print(torch.__version__)'), $(chroot "$root" g++ --version | head -1)"

say "building $(git rev-parse --short HEAD) (committed work only) in $root/root/loom"
rm -rf "$root/root/loom"
git clone -q "$PWD" "$root/root/loom"
chroot "$root" bash -c 'cd /root/loom && ./setup.sh --no-deps --builddir build -Dbuildtype=debugoptimized'
status=0
chroot "$root" bash -c "cd /root/loom && meson test -C build ${suites[*]} --print-errorlogs" || status=$?
grep -E '^[0-9]+ passed, [0-9]+ failed' "$root/root/loom/build/meson-logs/testlog.txt" | tail -1 || true
exit $status
