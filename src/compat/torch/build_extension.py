"""meson's step for loom_torch: setup.py builds the package (loom_torch/ and its _C
extension) into BUILD_LIB, then STAMP is touched so that meson knows it is done.

    build_extension.py LOOM_LIB_DIR BUILD_LIB BUILD_TEMP STAMP
"""
import os
import subprocess
import sys

lib_dir, build_lib, build_temp, stamp = sys.argv[1:5]
here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, LOOM_LIB_DIR=os.path.abspath(lib_dir),
           LOOM_SOURCE_ROOT=os.path.abspath(os.path.join(here, "..", "..", "..")))
subprocess.run([sys.executable, "setup.py", "-q", "build", "--build-lib", os.path.abspath(build_lib),
                "--build-temp", os.path.abspath(build_temp)], cwd=here, env=env, check=True)
with open(stamp, "w"):
    pass
