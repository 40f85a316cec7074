#!/usr/bin/env python3
"""perf/tuner_check.sh's table: the tuner's choice per size, its predicted and measured times,
and every forced algorithm's measured time, from loom-topo --predict and loom-perf's CSVs.

Two targets (issue 5): the prediction of the tuner's choice within 2x of its measured time, and
the tuner's measured time within 10% of the best forced algorithm's. Times are the best round
per size (out of place). The choice's own forced time against the best forced one is shown
too: it judges the decision alone, where the tuned run and the forced run of the same
algorithm still differ by the rounds' noise (0.05 µs is 15% of a 0.3 µs call). Forced oneshot runs only up to 32 KiB (above that Loom sets it aside
for another algorithm, so its row would measure something else)."""

import argparse
import csv
import sys

ONESHOT_MAX = 32 << 10


def read_predicted(path):
    """{bytes: (choice, {algorithm: us or None})} from loom-topo --predict."""
    rows = {}
    names = []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            fields = line.split()
            if fields[0] == "bytes":
                names = fields[1:-1]
                continue
            times = {n: (None if v == "-" else float(v)) for n, v in zip(names, fields[1:-1])}
            rows[int(fields[0])] = (fields[-1], times)
    return rows


def read_best(paths):
    """{(algorithm, bytes): best out-of-place µs} over the CSVs ("tuned" is the tuner's sweep)."""
    best = {}
    for path in paths:
        with open(path) as f:
            for row in csv.DictReader(f):
                if not row["oop_time_us"]:
                    continue
                key = (row["algorithm"], int(row["size"]))
                best[key] = min(best.get(key, float("inf")), float(row["oop_time_us"]))
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--predicted", required=True)
    p.add_argument("--tuning", required=True)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--csv", nargs="+", required=True, help="loom-perf CSVs with --algo tuned,ring,...")
    p.add_argument("--markdown")
    a = p.parse_args()

    predicted = read_predicted(a.predicted)
    best = read_best(a.csv)
    algorithms = ["ring", "tree", "rd", "oneshot"]
    sizes = sorted(b for (name, b) in best if name == "tuned")

    lines = [
        f"allreduce, {a.ranks} ranks, constants from {a.tuning}; µs, best round, out of place",
        "",
        "| bytes | tuner's choice | predicted | measured | measured / predicted | "
        + " | ".join(algorithms) + " | best forced | tuner / best | choice forced / best |",
        "|---:|---|---:|---:|---:|" + "---:|" * len(algorithms) + "---|---:|---:|",
    ]
    within2 = within10 = choice10 = compared = 0
    for size in sizes:
        if size not in predicted:
            continue
        choice, times = predicted[size]
        algorithm = choice.split("/")[0]
        measured = best[("tuned", size)]
        guess = times.get(algorithm)
        ratio = measured / guess if guess else float("nan")
        cells = []
        best_name, best_us = None, float("inf")
        for name in algorithms:
            us = best.get((name, size))
            if us is None or (name == "oneshot" and size > ONESHOT_MAX):
                cells.append("")
                continue
            cells.append(f"{us:.1f}")
            if us < best_us:
                best_name, best_us = name, us
        versus = measured / best_us
        forced = best.get((algorithm, size))
        decision = forced / best_us if forced is not None else float("nan")
        compared += 1
        within2 += 0.5 <= ratio <= 2.0
        within10 += versus <= 1.10
        choice10 += decision <= 1.10
        lines.append(
            f"| {size} | {choice} | {guess:.1f} | {measured:.1f} | {ratio:.2f} | "
            + " | ".join(cells)
            + f" | {best_name} | {versus:.2f}{'' if versus <= 1.10 else ' (over 10%)'}"
            + f" | {decision:.2f}{'' if decision <= 1.10 else ' (over 10%)'} |"
        )
    lines += [
        "",
        f"predicted within 2x of measured: {within2} of {compared} sizes",
        f"tuner within 10% of the best forced algorithm: {within10} of {compared} sizes",
        f"the tuner's choice, forced, within 10% of the best forced algorithm: {choice10} of {compared} sizes",
    ]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
