#!/usr/bin/env bash
# loom_torch installed as README tells a user to: `meson install` puts Loom in a prefix, and
# `pip install --no-build-isolation src/compat/torch` builds the package against the torch of
# a virtual environment and that installed libloom (found by pkg-config). Then 2 ranks, started
# from an unrelated directory with no PYTHONPATH or LD_LIBRARY_PATH, allreduce through backend
# "loom", and the test checks that the package and libloom came from the installation.
#
#   install_test.sh BUILDDIR SOURCE_ROOT PYTHON
#
# The prefix is a DESTDIR under a temporary directory (PKG_CONFIG_SYSROOT_DIR points pkg-config
# into it), and pip builds a copy of src/compat/torch so that the checkout stays clean.
# Exit status 77 (skipped, reason printed) where BUILDDIR did not build loom_torch (no torch or
# pybind11, a sanitizer build) or PYTHON lacks venv or pip.
set -euo pipefail
builddir=$(realpath "$1") root=$(realpath "$2") python=$3
say() { echo "install_test: $*"; }

[[ -f $builddir/src/compat/torch/loom_torch.stamp ]] ||
  { echo "skipped: $builddir has no loom_torch (meson setup's log says why)"; exit 77; }
for module in venv pip; do
  "$python" -c "import $module" 2>/dev/null || { echo "skipped: $python cannot import $module"; exit 77; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

say "meson install -C $builddir --destdir $tmp/dest"
meson install -C "$builddir" --no-rebuild --destdir "$tmp/dest" --quiet >/dev/null
pcdir=$(dirname "$(find "$tmp/dest" -name loom.pc -print -quit)")
[[ -f $pcdir/loom.pc ]] || { say "FAIL: meson install put no loom.pc under $tmp/dest"; exit 1; }

say "venv with the system's packages (its torch), pip install src/compat/torch"
"$python" -m venv --system-site-packages "$tmp/venv"
cp -r "$root/src/compat/torch" "$tmp/src"
unset PYTHONPATH LD_LIBRARY_PATH
PKG_CONFIG_PATH=$pcdir PKG_CONFIG_SYSROOT_DIR=$tmp/dest LOOM_SOURCE_ROOT=$root \
  "$tmp/venv/bin/python" -m pip install --quiet --no-build-isolation --no-index --no-deps "$tmp/src"

cat > "$tmp/two_ranks.py" <<'EOF'
import os, sys
import loom_torch, torch, torch.distributed as dist
rank, prefix = int(os.environ["RANK"]), sys.argv[2]
dist.init_process_group("loom", init_method="file://" + sys.argv[1], rank=rank, world_size=2)
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
libloom = {line.split()[-1] for line in open("/proc/self/maps") if "/libloom.so" in line}
problems = []
if not torch.equal(t, torch.full((1000,), 3.0)):
    problems.append(f"all_reduce gave {t[:4].tolist()}..., not 3.0")
if not loom_torch.__file__.startswith(sys.prefix):
    problems.append(f"loom_torch came from {loom_torch.__file__}, not the venv {sys.prefix}")
if len(libloom) != 1 or not next(iter(libloom)).startswith(prefix):
    problems.append(f"libloom came from {sorted(libloom)}, not under {prefix}")
dist.destroy_process_group()
print(f"rank {rank}: " + ("; ".join(problems) if problems else "ok"), flush=True)
sys.exit(1 if problems else 0)
EOF

say "2 ranks from $tmp/run"
mkdir "$tmp/run"
cd "$tmp/run"
pids=()
for rank in 0 1; do
  RANK=$rank timeout 120 "$tmp/venv/bin/python" "$tmp/two_ranks.py" "$tmp/store" "$tmp/dest" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
((rc == 0)) && say "passed" || say "FAIL"
exit "$rc"
