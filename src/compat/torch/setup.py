"""Builds loom_torch._C with torch's extension tooling against the installed torch.

    python3 setup.py build_ext --build-lib DIR --build-temp TMP   (meson runs this; see
    src/compat/torch/meson.build)

LOOM_SOURCE_ROOT and LOOM_LIB_DIR name Loom's headers and the directory of libloom.so.
"""
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
root = os.environ.get("LOOM_SOURCE_ROOT", os.path.join(here, "..", "..", ".."))
lib_dir = os.environ["LOOM_LIB_DIR"]

setup(
    name="loom_torch",
    packages=["loom_torch"],
    package_dir={"loom_torch": os.path.join(here, "loom_torch")},
    ext_modules=[
        CppExtension(
            "loom_torch._C",
            [os.path.join(here, f) for f in ("bindings.cc", "process_group_loom.cc", "runner.cc")],
            include_dirs=[os.path.join(root, "include"), os.path.join(root, "src")],
            library_dirs=[lib_dir],
            libraries=["loom"],
            extra_compile_args=["-std=c++17", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            extra_link_args=["-Wl,-rpath," + lib_dir],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
