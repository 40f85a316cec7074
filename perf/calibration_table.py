#!/usr/bin/env python3
"""perf/calibration_check.sh's table: per size, the best round of a loom-perf collective with the
machine calibration and with the built-in constants (LOOM_MACHINE_CALIBRATION=0), in place and
out of place, and built-in time / calibrated time (> 1: the calibration is faster). The CSVs
are named VARIANT-roundR-SIZE.csv."""

import argparse
import csv
import os
import sys

from compare_table import BUS_FACTOR, size_label


def read_best(paths):
    """{(variant, mode, bytes): best µs} over the CSVs; mode is "ip" or "oop"."""
    best = {}
    for path in paths:
        variant = os.path.basename(path).split("-round")[0]
        with open(path) as f:
            for row in csv.DictReader(f):
                for mode in ("ip", "oop"):
                    if not row[f"{mode}_time_us"]:
                        continue
                    key = (variant, mode, int(row["size"]))
                    best[key] = min(best.get(key, float("inf")), float(row[f"{mode}_time_us"]))
    return best


def busbw(nbytes, us, factor):
    return nbytes / us / 1e3 * factor


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--collective", default="allreduce", choices=sorted(BUS_FACTOR))
    p.add_argument("--csv", nargs="+", required=True)
    p.add_argument("--markdown")
    p.add_argument("--transports", default="shm", help="LOOM_TRANSPORTS of the runs")
    args = p.parse_args()
    best = read_best(args.csv)
    factor = BUS_FACTOR[args.collective](args.ranks)
    sizes = sorted({size for (_, _, size) in best})
    lines = [f"{args.collective}, {args.ranks} ranks, float32 (sum where it reduces), "
             f"LOOM_TRANSPORTS={args.transports}; best round per size; busbw in GB/s",
             "",
             "| size | mode | calibrated µs | built-in µs | calibrated busbw | built-in busbw | built-in / calibrated |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for size in sizes:
        for mode, name in (("ip", "in place"), ("oop", "out of place")):
            cal, builtin = best.get(("calibrated", mode, size)), best.get(("builtin", mode, size))
            if cal is None or builtin is None:
                continue
            lines.append(f"| {size_label(size)} | {name} | {cal:.1f} | {builtin:.1f} | "
                         f"{busbw(size, cal, factor):.2f} | {busbw(size, builtin, factor):.2f} | "
                         f"{builtin / cal:.2f} |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
