#!/usr/bin/python3
"""Tables for perf/compare.sh: reads the nccl-tests tables that Loom's loom-perf and the peers
in perf/peers/ printed, and prints, per collective and transport, each program's best round per
size with the spread over rounds, the time ratios against Loom, and Loom's busbw as a fraction
of the transport's limit (for shared memory what the memory-traffic model allows at the copy
bandwidth of as many threads as ranks, for TCP the loopback link's); as markdown, with the
machine and the exact commands.

    perf/compare_table.py --dir DIR [--collectives allreduce,broadcast,...] [--transports shm,tcp]
                          [--ranks 2] [--pin WHAT] [--markdown FILE] [--best DIR]

DIR holds what compare.sh kept: COLL.TRANSPORT.loom.R.txt, COLL.TRANSPORT.mpi.R.txt,
COLL.gloo.R.txt (Gloo has TCP only: one run serves both transports), memcpy.R.txt and
tcp_loopback.R.txt (the limits; R: round),
NAME.cmd (the command of each), machine, loom_version, foreign.txt and line_exchange.txt (the
cache line trip between cpus 0 and 1 after each program, NAME ROUND US). --best DIR writes there,
for each program, its table made of the best round's row at each size (for loom-plot).
"""
import argparse
import glob
import os
import sys

TRANSPORTS = {  # transport: (title, how Loom and Open MPI were told)
    "shm": ("shared memory", "Loom LOOM_TRANSPORTS=shm, Open MPI btl self,vader"),
    "tcp": ("TCP loopback", "Loom LOOM_TRANSPORTS=socket, Open MPI btl self,tcp on lo"),
}
BUS_FACTOR = {  # nccl-tests' busbw / algbw, by collective and ranks
    "allreduce": lambda n: 2 * (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}
WHAT = {  # what the call does, for the table's caption
    "allreduce": "sum", "broadcast": "from rank 0", "reduce": "sum to rank 0", "allgather": "",
    "reducescatter": "sum", "alltoall": "", "sendrecv": "to the next rank, from the one before",
}
# Collectives without an in-place form (all-to-all, send/recv): their main table is out of place.
NO_IN_PLACE = {"alltoall", "sendrecv"}
COLUMNS = {"oop": 5, "ip": 9}  # first field of each mode in a 13-field row
LIMITS = {  # transport: (the program that measures its limit, the ratio column's title)
    "shm": ("memcpy", "Loom/limit"),
    "tcp": ("tcp_loopback", "Loom/TCP link"),
}
# Bytes of the user's buffers the busiest rank reads + writes per byte of busbw, by collective
# and ranks (docs/PERF.md, "Memory traffic"): the ring allreduce on one host, forwarding what
# it reduces from the cache, moves 4(n-1)/n of its buffer for a busbw of 2(n-1)/n; the chain
# broadcast's inner ranks write and forward the buffer, the root only reads it and the last
# rank only writes it. The other collectives have no model yet: no memory limit is shown.
TRAFFIC = {
    "allreduce": lambda n: 2.0,
    "broadcast": lambda n: 1.0 if n == 2 else 2.0,
}


# Below this size the threads' copies are shorter than starting them together, and other
# algorithms than the model's run on data in the caches: no limit is shown.
MEMORY_LIMIT_MIN_BYTES = 1 << 20


def memory_limit(memcpy, coll, ranks):
    """{bytes: (None, busbw limit)}: a thread of memcpy_bw -t RANKS moves 2 bytes (read +
    write) per byte it copies; a rank whose core moves as much can reach at most that over
    TRAFFIC bytes per byte of busbw."""
    if not memcpy or coll not in TRAFFIC:
        return None
    return {n: (None, 2 * m[1] / TRAFFIC[coll](ranks)) for n, m in memcpy.items()
            if n >= MEMORY_LIMIT_MIN_BYTES}


def read_table(path):
    """{bytes: (fields, line)} of the data rows: 13 fields, size first; headers start with #."""
    rows = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 13 and fields[0].isdigit():
                rows.setdefault(int(fields[0]), (fields, line))
    return rows


def measure(fields, mode, factor):
    """(time in us, busbw in GB/s) of one mode of a row, None where the program printed `-`.
    busbw comes from the time or from the printed column, whichever printed more digits (both
    have 2 decimals when small: 8 B at 0.5 us prints busbw 0.02)."""
    first = COLUMNS[mode]
    if fields[first] == "-":
        return None
    time_us, busbw = float(fields[first]), float(fields[first + 2])
    if time_us >= busbw and time_us > 0:
        busbw = int(fields[0]) / time_us / 1e3 * factor
    return time_us, busbw


def best_of_rounds(paths, mode, factor):
    """{bytes: (time, busbw, spread, raw line)} of the round with the shortest time at each
    size; spread = slowest round's time / fastest's - 1."""
    rounds = [read_table(p) for p in paths]
    out = {}
    for nbytes in sorted(set().union(*rounds)):
        seen = [(measure(r[nbytes][0], mode, factor), r[nbytes][1]) for r in rounds if nbytes in r]
        seen = [(m, line) for m, line in seen if m is not None]
        if not seen:
            continue
        (time_us, busbw), line = min(seen, key=lambda s: s[0][0])
        slowest = max(m[0] for m, _ in seen)
        out[nbytes] = (time_us, busbw, slowest / time_us - 1 if time_us > 0 else 0.0, line)
    return out


def size_label(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def time_cell(data, nbytes, runs):
    if not data or nbytes not in data:
        return "–"
    time_us, _, spread, _ = data[nbytes]
    decimals = 2 if time_us < 10 else 1 if time_us < 1000 else 0
    text = f"{time_us:.{decimals}f}"
    return f"{text} (+{100 * spread:.0f}%)" if runs > 1 else text


def bw_cell(data, nbytes):
    if not data or nbytes not in data:
        return "–"
    busbw = data[nbytes][1]
    if busbw < 0.01:
        return f"{busbw:.1e}"
    return f"{busbw:.{1 if busbw >= 10 else 2 if busbw >= 0.1 else 3}f}"


def ratio_cell(numerator, denominator):
    if numerator is None or denominator is None or denominator <= 0:
        return "–"
    r = numerator / denominator
    return f"{r:.0f}" if r >= 10 else f"{r:.2f}" if r >= 0.1 else f"{r:.2g}"


def render_legend(runs):
    spread = ", (+x%): how much slower the slowest round was" if runs > 1 else ""
    return [
        f"The main tables come from each program's **in-place** column, the only mode all three "
        f"measure (MPI_Bcast and torch.distributed's calls have one buffer; all-to-all's and "
        f"sendrecv's from the out-of-place one, which have no in-place form); the out-of-place "
        f"tables put Loom beside Open MPI where both measure that mode. Time: µs per call "
        f"(mean over ranks) in the best of {runs} round{'s' * (runs > 1)}{spread}. busbw: GB/s "
        f"(GB = 1e9), nccl-tests' bus bandwidth. MPI/Loom and Gloo/Loom: peer time / Loom time "
        f"(> 1: Loom is faster). Loom/limit: Loom's busbw / the busbw the memory-traffic model "
        f"allows at that size, from 1 MiB (docs/PERF.md, \"Memory traffic\"): each of as many threads as "
        f"ranks copying at once moves twice the bytes it copies (read + write), and the busiest "
        f"rank must move 2 bytes of its buffers per byte of busbw in a ring allreduce, 1 in a "
        f"2-rank broadcast (2 with more ranks); the other collectives have no model yet. Loom/TCP link: "
        f"Loom's busbw / what one TCP connection on 127.0.0.1 carries "
        f"each way while two processes send each other a buffer of that size at once "
        f"(perf/peers/tcp_loopback_bw.c; a 2-rank allreduce sends and receives its whole buffer "
        f"on each rank). Gloo (torch.distributed) has TCP only: the same Gloo column shows under "
        f"every transport.", ""]


def render_table(args, coll, transport, loom, mpi, gloo, limit, runs):
    title, how = TRANSPORTS[transport]
    mode = "out of place" if coll in NO_IN_PLACE else "in-place"
    gloo_how = "; Gloo over TCP" if gloo else "; no Gloo (perf/peers/gloo_collective.py runs allreduce and broadcast)"
    out = [f"### {coll}, {title}", "",
           f"{args.ranks} ranks, float32{' ' + WHAT[coll] if WHAT[coll] else ''}, {mode}; {how}{gloo_how}.", "",
           "| size | Loom µs | Open MPI µs | Gloo µs | Loom GB/s | Open MPI GB/s "
           f"| Gloo GB/s | MPI/Loom | Gloo/Loom | {LIMITS[transport][1]} |",
           "|---:|" + "---:|" * 9]
    sizes = sorted(set().union(*(d for d in (loom, mpi, gloo) if d)))
    for n in sizes:
        def get(data, field):
            return data[n][field] if data and n in data else None
        cells = [time_cell(d, n, runs) for d in (loom, mpi, gloo)]
        cells += [bw_cell(d, n) for d in (loom, mpi, gloo)]
        cells.append(ratio_cell(get(mpi, 0), get(loom, 0)))
        cells.append(ratio_cell(get(gloo, 0), get(loom, 0)))
        cells.append(ratio_cell(get(loom, 1), get(limit, 1)))
        out.append(f"| {size_label(n)} | " + " | ".join(cells) + " |")
    out.append("")
    return out


def render_out_of_place(args, coll, transport, loom, mpi, limit, runs):
    """Loom beside Open MPI out of place, where both measure it (Gloo cannot: torch's calls
    have one buffer), unless the main table is out of place already."""
    if not loom or not mpi or coll in NO_IN_PLACE:
        return []
    title, how = TRANSPORTS[transport]
    out = [f"### {coll}, {title}, out of place (Loom and Open MPI)", "",
           f"{args.ranks} ranks, float32, separate send and receive buffers; {how}.", "",
           f"| size | Loom µs | Open MPI µs | Loom GB/s | Open MPI GB/s | MPI/Loom | {LIMITS[transport][1]} |",
           "|---:|" + "---:|" * 6]
    for n in sorted(set(loom) & set(mpi)):
        cells = [time_cell(loom, n, runs), time_cell(mpi, n, runs), bw_cell(loom, n), bw_cell(mpi, n),
                 ratio_cell(mpi[n][0], loom[n][0]),
                 ratio_cell(loom[n][1], limit[n][1] if limit and n in limit else None)]
        out.append(f"| {size_label(n)} | " + " | ".join(cells) + " |")
    out.append("")
    return out


def read_text(directory, name):
    path = os.path.join(directory, name)
    return open(path).read().strip() if os.path.exists(path) else None


def render_notes(args, keys):
    out = []
    memcpy = read_text(args.dir, "memcpy.cmd")
    if memcpy:
        out.append(f"- memory limit: memcpy_bw -t {args.ranks}, {args.ranks} threads copying "
                   "their own pair of buffers of each size at once, thread i on cpu i, best "
                   "round; its GB/s counts the bytes one thread copied (its memory traffic is "
                   "twice that)")
    if read_text(args.dir, "tcp_loopback.cmd"):
        out.append("- TCP link: two processes on cpus 0 and 1, each sending the other a buffer of "
                   "each size over one TCP connection on 127.0.0.1 while receiving the other's, "
                   "best round; its GB/s counts the bytes each way")
    out.append(f"- pinned (rank r on cpu r): {args.pin}")
    version = read_text(args.dir, "loom_version")
    if version:
        commit, changed = (version.split() + ["?", "0"])[:2]
        extra = f", with {changed} changed files in src/ and include/" if changed != "0" else ""
        out.append(f"- Loom at commit {commit}{extra}")
    foreign = read_text(args.dir, "foreign.txt")
    if foreign:
        seen = [line.split() for line in foreign.splitlines() if line.strip()]
        worst = max(seen, key=lambda f: int(f[2]))
        out.append(f"- other processes on the machine used {min(int(f[2]) for f in seen)}-"
                   f"{worst[2]}% of the cpus while the kept runs ran (most: {worst[0]}, round "
                   f"{worst[1]}); perf/foreign_load.py measures it")
    exchanges = read_text(args.dir, "line_exchange.txt")
    if exchanges:
        rounds = {}
        for name, r, us in (line.split() for line in exchanges.splitlines() if line.strip()):
            if us != "?":
                rounds.setdefault(int(r), []).append(float(us))
        if rounds:
            spans = "; ".join(f"round {r}: {min(v):.3f}-{max(v):.3f}" for r, v in sorted(rounds.items()))
            out.append("- a cache line each way between cpus 0 and 1 (perf/peers/line_exchange.c, after each "
                       f"program), us: {spans}. On the VMs we meet it is about 0.05 in a fast phase and "
                       "0.3 in a slow one, and shared-memory figures move with it (docs/RESULTS.md)")
    machine = read_text(args.dir, "machine")
    if machine:
        out += ["", "Machine:", "", "```", machine, "```"]
    commands = [(k, read_text(args.dir, f"{k}.cmd")) for k in keys]
    commands = [(k, c) for k, c in commands if c]
    if commands:
        out += ["", "Each program, as perf/compare.sh ran it:", "", "```"]
        out += [f"# {k}\n{c}" for k, c in commands]
        out.append("```")
    return out


def write_best(directory, key, data, source):
    """The header of the program's first round, then its best row at each size."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{key}.txt"), "w") as f:
        for line in open(source):
            if not line.startswith("#"):
                break
            f.write(line)
        for nbytes in sorted(data):
            f.write(data[nbytes][3])
        f.write("# best round per size\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--collectives", default="allreduce,broadcast")
    parser.add_argument("--transports", default="shm,tcp")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--pin", default="all", help="what compare.sh pinned")
    parser.add_argument("--markdown", help="also write the text to this file")
    parser.add_argument("--best", help="write each program's best-round table to this folder")
    args = parser.parse_args()
    collectives = args.collectives.split(",")
    transports = args.transports.split(",")
    for c in collectives:
        if c not in BUS_FACTOR:
            parser.error(f"--collectives: unknown '{c}' ({', '.join(BUS_FACTOR)})")
    for t in transports:
        if t not in TRANSPORTS:
            parser.error(f"--transports: unknown '{t}' ({', '.join(TRANSPORTS)})")

    keys = []  # programs, in the order their commands are listed
    for coll in collectives:
        keys += [f"{coll}.{t}.{program}" for t in transports for program in ("loom", "mpi")]
        keys.append(f"{coll}.gloo")
    programs = list(keys)
    keys += [LIMITS[t][0] for t in transports]
    paths = {k: sorted(glob.glob(os.path.join(args.dir, f"{k}.*.txt"))) for k in keys}
    if not any(paths.values()):
        print(f"compare_table.py: no NAME.ROUND.txt in {args.dir}", file=sys.stderr)
        return 1
    runs = max(len(paths[k]) for k in programs)

    def load(key, mode, factor):
        data = best_of_rounds(paths[key], mode, factor) if paths[key] else None
        if args.best and data:
            write_best(args.best, key, data, paths[key][0])
        return data

    limits = {t: load(LIMITS[t][0], "oop", 1.0) for t in transports}
    out = render_legend(max(runs, 1))
    for coll in collectives:
        factor = BUS_FACTOR[coll](args.ranks)
        main_mode = "oop" if coll in NO_IN_PLACE else "ip"
        gloo = load(f"{coll}.gloo", "ip", factor)
        for t in transports:
            loom = load(f"{coll}.{t}.loom", main_mode, factor)
            mpi = load(f"{coll}.{t}.mpi", main_mode, factor)
            limit = memory_limit(limits[t], coll, args.ranks) if t == "shm" else limits[t]
            out += render_table(args, coll, t, loom, mpi, gloo, limit, max(runs, 1))
            # The best-round files for loom-plot hold in-place rows: read these without --best.
            oop = {k: best_of_rounds(paths[k], "oop", factor) if paths[k] else None
                   for k in (f"{coll}.{t}.loom", f"{coll}.{t}.mpi")}
            out += render_out_of_place(args, coll, t, oop[f"{coll}.{t}.loom"], oop[f"{coll}.{t}.mpi"],
                                       limit, max(runs, 1))
    out += render_notes(args, keys)
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
