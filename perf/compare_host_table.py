#!/usr/bin/python3
"""Tables for perf/compare_host.sh: reads the raw outputs it kept (NAME.ROUND.txt, one row
per size: bytes count iters time_us algbw busbw) and prints, as markdown, the best round per
size for each program with the spread over rounds, the ratios, and issue 3's targets marked
met or not met.

    perf/compare_host_table.py --dir build-perf/compare-host [--pin WHAT] [--markdown FILE]
"""
import argparse
import glob
import os
import re
import sys

PROGRAMS = [  # (name in the raw files, column title)
    ("loom", "Loom (default transports)"),
    ("loom-socket", "Loom (socket)"),
    ("mpi", "Open MPI (shm)"),
    ("mpi-tcp", "Open MPI (TCP)"),
    ("gloo", "Gloo"),
]
RATIOS = [  # (numerator, denominator, title): busbw ratios, higher is better for Loom
    ("loom", "mpi", "Loom / Open MPI"),
    ("loom", "gloo", "Loom / Gloo"),
    ("loom-socket", "mpi-tcp", "Loom socket / Open MPI TCP"),
    ("loom-socket", "gloo", "Loom socket / Gloo"),
]
MIB = 1 << 20
TARGETS = [  # (Loom program, peer, bytes, needed ratio of busbw, text)
    ("loom", "mpi", 8, 1.0, "8 B latency <= Open MPI's"),
    ("loom", "mpi", MIB, 1.0, "1 MiB busbw >= Open MPI's"),
    ("loom", "mpi", 16 * MIB, 1.5, "16 MiB busbw >= 1.5x Open MPI's"),
    ("loom", "mpi", 128 * MIB, 3.0, "128 MiB busbw >= 3x Open MPI's"),
    ("loom", "gloo", 128 * MIB, 3.0, "128 MiB busbw >= 3x Gloo's"),
    ("loom-socket", "gloo", 128 * MIB, 2.0, "TCP loopback 128 MiB busbw >= 2x Gloo's"),
]
ISSUE_SIZES = {8, MIB, 16 * MIB, 128 * MIB}


def read_rows(path):
    rows = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if not fields or line.startswith("#"):
                continue
            nbytes, time_us = int(fields[0]), float(fields[3])
            # busbw from the time rather than the printed column, for its precision at 8 B
            # (2 ranks: busbw = algbw)
            rows[nbytes] = (time_us, nbytes / time_us / 1e3)
    return rows


def collect(directory):
    """{program: {bytes: (best time_us, busbw at best, spread)}}"""
    out = {}
    for name, _ in PROGRAMS:
        rounds = [read_rows(p) for p in sorted(glob.glob(os.path.join(directory, f"{name}.*.txt")))]
        if not rounds:
            continue
        table = {}
        for nbytes in rounds[0]:
            seen = [r[nbytes] for r in rounds if nbytes in r]
            best = min(seen)
            worst = max(t for t, _ in seen)
            table[nbytes] = (best[0], best[1], worst / best[0] - 1.0, len(seen))
        out[name] = table
    return out


def size_label(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def time_label(us):
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.2f} µs" if us < 100 else f"{us:.0f} µs"


def cell(data, name, nbytes):
    if name not in data:
        return "pending"
    if nbytes not in data[name]:
        return "–"
    time_us, busbw, spread, _ = data[name][nbytes]
    bw = f"{busbw:.3g}" if busbw >= 0.01 else f"{busbw:.1e}"
    return f"{time_label(time_us)} · {bw} (+{100 * spread:.0f}%)"


def ratio_from_time(data, a, b, nbytes):
    """Same bytes, so busbw ratio = inverse time ratio; times keep precision at 8 B."""
    if a not in data or b not in data or nbytes not in data[a] or nbytes not in data[b]:
        return None
    return data[b][nbytes][0] / data[a][nbytes][0]


def memcpy_lines(directory):
    path = os.path.join(directory, "memcpy.txt")
    lines = []
    if os.path.exists(path):
        for nbytes, (time_us, gbps) in sorted(read_rows(path).items()):
            if nbytes not in ISSUE_SIZES | {1 << 30}:
                continue
            lines.append(f"one-thread memcpy of {size_label(nbytes)}: {gbps:.2f} GB/s copied "
                         f"({2 * gbps:.1f} GB/s of memory traffic, read + write)")
        return lines
    path = os.path.join(directory, "kernel_bench.txt")
    if os.path.exists(path):
        size = None
        for line in open(path):
            m = re.match(r"(\d+) KiB per array", line)
            if m:
                size = int(m.group(1)) * 1024
            m = re.match(r"\s+memcpy\s+([\d.]+)", line)
            if m and size:
                gbps = float(m.group(1)) / 2
                lines.append(f"one-thread memcpy of {size_label(size)} (kernel_bench, median of 5): "
                             f"{gbps:.2f} GB/s copied ({2 * gbps:.1f} GB/s of memory traffic)")
    return lines


def render(data, directory, pin):
    out = []
    present = [(n, t) for n, t in PROGRAMS if n in data or n.startswith("loom")]
    runs = max(r[3] for table in data.values() for r in table.values())
    sizes = sorted(set().union(*(set(t) for t in data.values())))
    out.append(f"2 ranks, float32 sum. Each cell: time per call (median of 5 timed batches of "
               f"the mean per call on the slowest rank) · busbw in GB/s (GB = 1e9; with 2 ranks "
               f"busbw = algbw) of the best of {runs} rounds, and (+x%) how much slower the "
               f"slowest round was. Ratios are "
               f"busbw ratios of the best rounds (> 1: Loom is faster). Pinned (rank r on cpu r): "
               f"{pin}. **Bold**: the issue's sizes.")
    out.append("")
    out.append("| bytes | " + " | ".join(t for _, t in present) + " | " +
               " | ".join(t for _, _, t in RATIOS) + " |")
    out.append("|---:|" + "---:|" * (len(present) + len(RATIOS)))
    for n in sizes:
        label = size_label(n)
        if n in ISSUE_SIZES:
            label = f"**{label}**"
        cells = [cell(data, name, n) for name, _ in present]
        ratios = []
        for a, b, _ in RATIOS:
            r = ratio_from_time(data, a, b, n)
            ratios.append("pending" if r is None else f"{r:.2f}" if r < 10 else f"{r:.0f}")
        out.append(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    out.append("")
    out.append("| issue 3 target | Loom | peer | ratio | needed | |")
    out.append("|---|---:|---:|---:|---:|---|")
    for a, b, n, needed, text in TARGETS:
        peer = data.get(b, {}).get(n)
        mine = data.get(a, {}).get(n)
        peer_text = "–" if peer is None else (time_label(peer[0]) if n == 8 else f"{peer[1]:.2f} GB/s")
        if mine is None:
            out.append(f"| {text} | pending | {peer_text} | | {needed:g}x | pending |")
            continue
        mine_text = time_label(mine[0]) if n == 8 else f"{mine[1]:.2f} GB/s"
        r = ratio_from_time(data, a, b, n)
        verdict = "**met**" if r >= needed else "not met"
        out.append(f"| {text} | {mine_text} | {peer_text} | {r:.2f}x | {needed:g}x | {verdict} |")
    lines = memcpy_lines(directory)
    if lines:
        out.append("")
        out.extend(f"- {line}" for line in lines)
    version_path = os.path.join(directory, "loom_version")
    if os.path.exists(version_path):
        commit, changed = (open(version_path).read().split() + ["?", "0"])[:2]
        extra = f", with {changed} changed files in src/ and include/" if changed != "0" else ""
        out.append(f"- Loom at commit {commit}{extra}")
    foreign_path = os.path.join(directory, "foreign.txt")
    if os.path.exists(foreign_path):
        seen = [line.split() for line in open(foreign_path) if line.strip()]
        worst = max(seen, key=lambda f: int(f[2]))
        out.append(f"- other processes on the machine used {min(int(f[2]) for f in seen)}-"
                   f"{int(worst[2])}% of the cpus while the kept runs ran (most: {worst[0]}, "
                   f"round {worst[1]}); perf/foreign_load.py measures it")
    commands = [(t, open(os.path.join(directory, f"{n}.cmd")).read().strip())
                for n, t in PROGRAMS if os.path.exists(os.path.join(directory, f"{n}.cmd"))]
    if commands:
        out.append("")
        out.append("Each program, as perf/compare_host.sh ran it:")
        out.append("")
        out.append("```")
        out.extend(f"# {t}\n{c}" for t, c in commands)
        out.append("```")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--pin", default="all", help="what compare_host.sh pinned")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    data = collect(args.dir)
    if not data:
        print(f"compare_host_table.py: no NAME.ROUND.txt in {args.dir}", file=sys.stderr)
        return 1
    text = render(data, args.dir, args.pin)
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
