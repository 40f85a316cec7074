#!/usr/bin/env python3
"""Fails when a folder of src/ includes a folder above it (docs/ARCHITECTURE.md, "Layers").

Usage: layering_test.py SRC_DIR. Every quoted include "folder/file.h" must name the file's
own folder or one lower in LAYERS; the public header (loom/) and the generated build
configuration are below everything. A folder that is not in LAYERS is an error too, so a
new folder gets its place here before it builds.
"""
import pathlib
import re
import sys

# Bottom first. A folder may include only folders before it in this list (and itself).
LAYERS = ["base", "kernels", "topology", "bootstrap", "transport", "algorithms", "device",
          "core", "ddp", "compat"]
BELOW_ALL = {"loom", "loom_build_config.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = {".h", ".cc", ".cu", ".cuh", ".c"}


def main():
    src = pathlib.Path(sys.argv[1])
    rank = {name: i for i, name in enumerate(LAYERS)}
    problems = []
    files = 0
    for path in sorted(src.rglob("*")):
        if path.suffix not in SOURCES:
            continue
        files += 1
        folder = path.relative_to(src).parts[0]
        if folder not in rank:
            problems.append(f"{path}: folder '{folder}' has no place in the layer order")
            continue
        for target in INCLUDE.findall(path.read_text()):
            top = target.split("/")[0]
            if "/" not in target or top in BELOW_ALL or top == folder:
                continue  # the file's own folder, the public header, the build config
            if top not in rank:
                problems.append(f"{path}: includes \"{target}\", outside the layer order")
            elif rank[top] > rank[folder]:
                problems.append(f"{path}: includes \"{target}\": {folder} may not include {top}, "
                                f"which is above it")
    for p in problems:
        print(p)
    print(f"{files} files checked; layers bottom up: {' < '.join(LAYERS)}; "
          f"{len(problems)} upward include(s)")
    return 1 if problems or files == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
