"""Builds loom_torch._C with torch's extension tooling against the installed torch.

    python3 setup.py build_ext --build-lib DIR --build-temp TMP   (meson runs this; see
    src/compat/torch/meson.build)

LOOM_SOURCE_ROOT and LOOM_LIB_DIR name Loom's headers and the directory of libloom.so.
Where torch has CUDA (and CUDA's toolkit is found), CUDA tensors are built in too
(device_calls.cc, LOOM_TORCH_CUDA).
"""
import os

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

here = os.path.dirname(os.path.abspath(__file__))
root = os.environ.get("LOOM_SOURCE_ROOT", os.path.join(here, "..", "..", ".."))
lib_dir = os.environ["LOOM_LIB_DIR"]

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
