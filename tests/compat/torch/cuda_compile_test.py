"""loom_torch's CUDA-tensor code compiles where torch has no CUDA: every source of
src/compat/torch checked (-fsyntax-only, warnings as errors in Loom's own lines) with
LOOM_TORCH_CUDA defined, against the installed torch's headers and the CUDA toolkit's, as
setup.py builds it where torch has CUDA. The build itself compiles that code only there (the
GPU machine), so without this a change could break it unseen until a GPU session.

    python3 tests/compat/torch/cuda_compile_test.py

Debian's torch ships c10/cuda's headers without the one its build generates
(c10/cuda/impl/cuda_cmake_macros.h, which only says the library is shared); the test supplies
that one line. Exit status 77 (skipped, reason printed) without torch, its c10/cuda headers
or CUDA's.
"""
import glob
import os
import subprocess
import sys
import sysconfig
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def skip(why):
    print(f"skipped: {why}")
    sys.exit(77)


try:
    from torch.utils.cpp_extension import CUDA_HOME, include_paths
except ImportError as e:
    skip(f"torch is not importable by {sys.executable} ({e})")


def main():
    torch_includes = include_paths()
    if not any(os.path.exists(os.path.join(d, "c10", "cuda", "CUDAStream.h")) for d in torch_includes):
        skip("this torch's headers have no c10/cuda")
    cuda_include = os.path.join(CUDA_HOME or os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")
    if not os.path.exists(os.path.join(cuda_include, "cuda_runtime_api.h")):
        skip(f"no CUDA toolkit headers ({cuda_include}/cuda_runtime_api.h)")
    with tempfile.TemporaryDirectory() as shim:
        generated = os.path.join("c10", "cuda", "impl", "cuda_cmake_macros.h")
        if not any(os.path.exists(os.path.join(d, generated)) for d in torch_includes):
            os.makedirs(os.path.dirname(os.path.join(shim, generated)))
            with open(os.path.join(shim, generated), "w") as f:
                f.write("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
            print(f"supplied {generated} (torch's build generates it; this torch ships without it)")
        system = [shim] + torch_includes + [sysconfig.get_paths()["include"], cuda_include]
        flags = (["-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
                  "-DLOOM_TORCH_CUDA=1", "-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "src")]
                 + [arg for d in system for arg in ("-isystem", d)])
        compiler = os.environ.get("CXX", "c++")
        sources = sorted(glob.glob(os.path.join(ROOT, "src", "compat", "torch", "*.cc")))
        failed = 0
        for source in sources:
            r = subprocess.run([compiler] + flags + [source], capture_output=True, text=True)
            name = os.path.relpath(source, ROOT)
            print(f"{name}: {'ok' if r.returncode == 0 else 'FAILED'}", flush=True)
            if r.returncode != 0:
                print(r.stdout + r.stderr)
                failed += 1
    print(f"{len(sources) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
