"""Builds loom_torch (and its extension loom_torch._C) with torch's extension tooling against
the torch of the python that runs it. Two ways in:

    meson's build: build_extension.py runs `setup.py build` into <builddir>/python, against
        the libloom of that build (LOOM_LIB_DIR)
    a user's environment: pip install --no-build-isolation src/compat/torch
        against the Loom that `meson install` put where pkg-config finds it

LOOM_SOURCE_ROOT names Loom's source tree (default: three levels up from here). Where torch has
CUDA (and CUDA's toolkit is found), CUDA tensors are built in too (device_calls.cc,
LOOM_TORCH_CUDA).
"""
import os
import subprocess
import sys

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

here = os.path.dirname(os.path.abspath(__file__))
root = os.environ.get("LOOM_SOURCE_ROOT", os.path.join(here, "..", "..", ".."))


def installed_loom(variable):
    """A variable of the installed Loom's pkg-config file (sysroot applied), or exit saying why."""
    try:
        return subprocess.run(["pkg-config", variable, "loom"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit("loom_torch: pkg-config finds no installed Loom (" + (getattr(e, "stderr", "") or str(e)).strip()
                 + "); install it first (meson install -C build; PKG_CONFIG_PATH for another prefix)"
                 + " or set LOOM_LIB_DIR to the directory of libloom.so")


# The extension's run path names libloom's directory, so that importing needs no LD_LIBRARY_PATH.
lib_dir = os.environ.get("LOOM_LIB_DIR") or installed_loom("--variable=libdir")
# meson's build installs nothing, so only pip's needs a version: the installed Loom's.
version = None if "LOOM_LIB_DIR" in os.environ else installed_loom("--modversion")

cuda = torch.version.cuda is not None and CUDA_HOME is not None
sources = ["bindings.cc", "process_group_loom.cc", "runner.cc", "rendezvous.cc", "mapped_tensors.cc"] + (["device_calls.cc"] if cuda else [])
print(f"loom_torch: building against torch {torch.__version__}, "
      + (f"CUDA tensors too (CUDA {torch.version.cuda}, {CUDA_HOME})" if cuda else "CPU tensors only (torch without CUDA)"))
# torch 1.13's tooling asks for C++14, which Loom's sources outgrow; torch 2 asks for the standard
# its own headers need.
std = ["-std=c++17"] if int(torch.__version__.split(".")[0]) < 2 else []
Extension = CUDAExtension if cuda else CppExtension

setup(
    name="loom_torch",
    version=version,
    packages=["loom_torch"],
    package_dir={"loom_torch": os.path.join(here, "loom_torch")},
    ext_modules=[
        Extension(
            "loom_torch._C",
            [os.path.join(here, f) for f in sources],
            include_dirs=[os.path.join(root, "include"), os.path.join(root, "src")],
            library_dirs=[lib_dir],
            libraries=["loom"],
            define_macros=[("LOOM_TORCH_CUDA", "1")] if cuda else [],
            extra_compile_args=std + ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            extra_link_args=["-Wl,-rpath," + lib_dir],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
