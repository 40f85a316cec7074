// The table of every environment variable Loom reads, and the typed readers over it (env.h).
#include "base/env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace loom::env {

namespace {
constexpr const char* kCore = "Communicators and bootstrap";
constexpr const char* kLog = "Logging";
constexpr const char* kLaunch = "Launcher variables read by loomCommInitFromEnv";
constexpr const char* kData = "Transports and algorithms";
constexpr const char* kTopo = "Topology";
constexpr const char* kSystem = "System variables Loom reads";
}  // namespace

const std::vector<Variable>& variables() {
  static const std::vector<Variable> table = {
      {"LOOM_DEBUG", "WARN", kLog,
       "Log level: NONE, WARN, INFO (decisions: addresses, transports, sources) or TRACE "
       "(every message)."},
      {"LOOM_DEVICE_TIMELINE", "0", kLog,
       "1: device communicators time each worker of each launch (the steps' start and end, on the "
       "GPU's global timer) and log, with LOOM_DEBUG=INFO, the means when the communicator ends. "
       "Means mix every launch: time one call shape per communicator."},
      {"LOOM_DEBUG_FILE", "", kLog,
       "Write logs to this file instead of stderr; %h becomes the host name, %p the pid."},
      {"LOOM_TIMEOUT_MS", "600000", kCore,
       "Deadline of every wait after init (send, receive, barrier, stream work); "
       "loomConfig_t.timeoutMs overrides it."},
      {"LOOM_INIT_TIMEOUT_MS", "120000", kCore,
       "Deadline of communicator creation (all ranks must arrive within it); "
       "loomConfig_t.initTimeoutMs overrides it."},
      {"LOOM_HANDSHAKE_TIMEOUT_MS", "5000", kCore,
       "How long an incoming connection may take to present the job's secret before it is "
       "dropped."},
      {"LOOM_SOCKET_IFNAME", "", kCore,
       "Interfaces to listen on: comma-separated name prefixes, '=' for exact names, a "
       "leading '^' to exclude (NCCL's syntax). Default: the first interface that is up "
       "and not loopback, else loopback."},
      {"LOOM_MASTER_ADDR", "", kCore,
       "Address of the root (host name, IPv4 or IPv6). loomGetUniqueId listens there; "
       "loomCommInitFromEnv connects there (required unless MASTER_ADDR is set)."},
      {"LOOM_MASTER_PORT", "29500", kCore,
       "Port of the root. loomGetUniqueId uses any free port when unset."},
      {"LOOM_SECRET", "", kCore,
       "32 hex digits: the secret every connection must present. Unset under "
       "loomCommInitFromEnv, it is derived from the master address and world size, which "
       "keeps separate jobs apart but authenticates nothing."},
      {"LOOM_HOSTID", "", kCore,
       "Host identity used to group ranks by host; default host name + boot id. Tests use "
       "it to place ranks of one machine on different hosts."},
      {"LOOM_TRANSPORTS", "shm,auto", kData,
       "Transports a communicator may use, comma-separated: shm (ranks on one host), socket "
       "(TCP), ucx (UCX: RDMA verbs, shared memory or TCP as UCX chooses; UCX_TLS narrows it; "
       "builds with UCX only) and auto (ucx between hosts where every rank's UCX reports an "
       "RDMA device, InfiniBand or RoCE, else socket); one of socket, ucx and auto. A pair of "
       "ranks on one host uses shm when it is listed, otherwise the network transport; ranks on "
       "different hosts use the network transport. Read at communicator creation."},
      {"LOOM_CHECK", "0", kData,
       "1: before each launch of collectives (a call, or a group), the ranks of the communicator "
       "exchange what they are about to call and every rank returns loomInvalidUsage naming the "
       "ranks and the field (collective, count, type, op, root) that differ, before any data "
       "moves. Costs one small allgather per launch. Read at communicator creation."},
      {"LOOM_ALGO", "", kData,
       "Which algorithms may run: ring, tree, rd (recursive doubling), oneshot (small calls of every "
       "collective on one host's shared-memory board), pairwise, hierarchical (allreduce, broadcast and reduce across hosts: every rank of a host carries "
       "a shard between hosts; set aside on one host). One name forces it for every collective that has it; a list allows only those "
       "('ring,tree'); ^ excludes ('^oneshot'); 'allreduce=tree,broadcast=^tree' applies per collective. "
       "Among the allowed, the tuner picks the one its cost model predicts fastest (docs/TUNING.md). "
       "Default: all allowed. Read at communicator creation."},
      {"LOOM_PROTO", "", kData,
       "Which protocols may run: on host communicators simple (plain stores, results stay in the cache) and "
       "streaming (results stored past the cache, reductions' as LOOM_REDUCTION_STORES says, only for calls of "
       "LOOM_STREAMING_MIN_BYTES or more); on device "
       "communicators simple (large FIFO slots, a flag per slot) and ll (low latency: 8 data bytes and their "
       "flags in each 16-byte store). One name forces it where it exists, ^ excludes one. Default: all, the "
       "tuner picks per call."},
      {"LOOM_TUNING_FILE", "", kData,
       "A tuning file written by `loom-perf --calibrate FILE`: the cost model's latencies and "
       "bandwidths measured on this machine (docs/TUNING.md). Rank 0's file decides for the whole "
       "communicator; each key it holds overrides the machine calibration's and the built-in value. "
       "Its data-path sizes (chunk.bytes, shm.fifo_bytes, socket.sndbuf) stand in for "
       "LOOM_CHUNK_SIZE, LOOM_SHM_FIFO_BYTES and LOOM_SOCKET_SNDBUF where those are unset: the "
       "chunk is rank 0's, a FIFO its creator's, a send buffer its sender's. A file that does not "
       "read fails communicator creation on the rank that holds it."},
      {"LOOM_MACHINE_CALIBRATION", "1", kData,
       "1: at a host communicator's creation rank 0 takes the copy, reduce and streaming constants "
       "(and, with two ranks or more on its host, the shared-memory link's and the one-shot board's) "
       "from a calibration of this machine: measured at first use (a few tenths of a second) and kept "
       "as a tuning file in $XDG_CACHE_HOME/loom (else $HOME/.cache/loom), one per CPU model and caches, CPU "
       "count, ranks on rank 0's host and build of Loom; delete it to measure again (docs/TUNING.md). "
       "0: built-in constants. LOOM_DEBUG=INFO names where each constant came from."},
      {"LOOM_CHANNELS", "0", kData,
       "Channels per call (1 to 64): each channel carries its share of the buffer over its own "
       "link to each peer (TCP connection c % LOOM_SOCKET_NSOCKS, UCX link c % LOOM_UCX_LINKS; on a "
       "device communicator its own FIFOs, worked by their own thread blocks). 0 (default): as many "
       "links as get two chunks each (on a device one per half LOOM_DEVICE_SLICE_BYTES, as a channel "
       "there is one thread block), at least one; device communicators connect 32 channels per peer "
       "(8 under LOOM_DEVICE_EMULATION), fewer where the ranks' share of the device's resident "
       "thread blocks holds fewer."},
      {"LOOM_RING_ORDER", "topology", kData,
       "topology (default): rings and trees order the ranks so that neighbours share the widest path "
       "(NVLink, one PCIe switch, one NUMA domain) and each host's ranks stay together "
       "(docs/TOPOLOGY.md); the ring is logged at INFO. rank: rank order 0, 1, ..., n-1."},
      {"LOOM_CHUNK_SIZE", "524288", kData,
       "Pipeline chunk (slice): collectives move and reduce data in pieces of at most this many "
       "bytes, so that sending one piece overlaps with reducing the next. Where unset, LOOM_TUNING_FILE's "
       "chunk.bytes (loom-perf --calibrate measures it), else this default."},
      {"LOOM_STREAMING_MIN_BYTES", "", kData,
       "Calls whose buffer is at least this large no longer fit the cache: the streaming protocol "
       "(non-temporal stores, saving the read of each destination line) exists for them, in-place "
       "calls from twice this size, never for an in-place reduction nor an in-place ring allreduce on "
       "one host (it writes only lines it has just read); the tuner decides whether it runs. 0: "
       "never. Default: LOOM_TUNING_FILE's streaming.min_bytes, else the machine calibration's "
       "(LOOM_MACHINE_CALIBRATION), else 33554432."},
      {"LOOM_MAPPED_MIN_BYTES", "", kData,
       "Host allreduces of at least this many bytes on a communicator whose ranks all share one host "
       "(and shared memory) first try the mapped allreduce: each rank reduces its slice of every rank's "
       "send buffer straight and writes it into every rank's receive buffer, with nothing through a FIFO. "
       "It runs where every rank can reach every other's buffers: ranks that are threads of one process, "
       "or processes whose buffers came from loomMemAlloc; otherwise the call runs its plan, having "
       "spent a board round finding that out (the round also tells the ranks whether all are in place: the "
       "plan is then the one the tuner chose for that). Not where LOOM_ALGO names a single allreduce "
       "algorithm. 0: never. Default: 65536 where every rank is a thread of one process (their buffers are "
       "always reachable), else 1048576 (docs/ARCHITECTURE.md, 'The mapped allreduce')."},
      {"LOOM_TORCH_MAPPED_MIN_BYTES", "", kData,
       "loom_torch: once a process group whose allreduces can run mapped is made (two or more ranks, all on "
       "this host, with shared memory), CPU tensors of at least this many bytes get loomMemAlloc memory "
       "(freed blocks are kept for reuse, up to 1 GiB; at most a quarter of the file-descriptor limit in "
       "blocks), so that allreduces on them (DDP's gradient buckets) take the mapped allreduce. A group "
       "across hosts changes nothing. 0: torch's own allocator for every tensor. Default: the size from "
       "which the group's allreduces run mapped (loomCommMappedMinBytes: LOOM_MAPPED_MIN_BYTES, else "
       "1048576) (docs/COMPAT_TORCH.md)."},
      {"LOOM_REDUCTION_STORES", "auto", kData,
       "How a host call on the streaming protocol, or a mapped allreduce out of place from "
       "LOOM_STREAMING_MIN_BYTES, writes what it reduces into the receive buffer (32 KiB pieces): streaming: "
       "non-temporal stores, from a piece in the cache; cached: plain stores, which read each line first; "
       "auto (default): each communicator times one of every 32 pieces (one sample in 8 with the stores not "
       "in use), starting non-temporal, and turns to the other kind once the "
       "medians of the last 5 samples say it writes a tenth faster. On the AMD EPYC VM plain reductions "
       "ran 1.25x faster inside a 2-rank allreduce, where a lone core's streamed one is the faster "
       "(docs/RESULTS.md). The protocol's copies out of a link always store non-temporally."},
      {"LOOM_SOCKET_NSOCKS", "2", kData,
       "TCP connections per pair of ranks; collectives spread their channels over them (1 to 16)."},
      {"LOOM_UCX_LINKS", "2", kData,
       "Links per pair of ranks over their UCX endpoint (LOOM_TRANSPORTS=ucx), each its own stream of "
       "tagged messages; collectives spread their channels over them (1 to 16). Two let a pair have "
       "a message of each channel in flight each way: over UCX's TCP, 1.1-1.4x the busbw of one from "
       "1 to 64 MiB (docs/RESULTS.md)."},
      {"LOOM_SOCKET_SNDBUF", "262144", kData,
       "Send buffer of each TCP connection in bytes (SO_SNDBUF; the kernel doubles it and caps it at "
       "net.core.wmem_max). A bounded buffer keeps a sender from running megabytes ahead of its "
       "receiver, whose copies then miss the cache (docs/RESULTS.md). 0: the kernel's autotuning. Where "
       "unset, LOOM_TUNING_FILE's socket.sndbuf (loom-perf --calibrate measures it), else this default."},
      {"LOOM_SHM_DIR", "/dev/shm", kData,
       "Directory of the shared-memory segments (a tmpfs). Segments are mode 0600 with random "
       "names and are unlinked as soon as both ranks have mapped them."},
      {"LOOM_SHM_FIFO_BYTES", "1048576", kData,
       "Bytes of each one-way shared-memory FIFO (a power of two, 4096 or more); a pair of ranks "
       "that exchange data maps two, 2 MiB in /dev/shm by default. Twice LOOM_CHUNK_SIZE lets a "
       "sender write a whole slice and the next while its peer reduces the first (docs/RESULTS.md). Where "
       "unset, LOOM_TUNING_FILE's shm.fifo_bytes (loom-perf --calibrate measures it), else this default."},
      {"LOOM_SHM_DIRECT", "threads", kData,
       "Which shared-memory receivers copy a message of LOOM_SHM_DIRECT_MIN_BYTES or more (not one "
       "they reduce in place as it arrives, nor one of LOOM_STREAMING_MIN_BYTES or more) straight out "
       "of the sender's buffer, one copy instead of the FIFO's two: threads (default): between "
       "threads of one process (memcpy); all: also between processes (cross-memory attach, "
       "process_vm_readv); none: every message through the FIFO. Where unset, LOOM_TUNING_FILE's "
       "shm.direct_min_bytes decides between processes (loom-perf --calibrate measures both ways; 0: the "
       "FIFO), else rank 0's machine calibration, which measures the two on this machine (docs/TUNING.md), "
       "else threads. Between processes the FIFO was faster on the AMD EPYC VM, the single copy on the "
       "Intel Xeon VM (docs/RESULTS.md)."},
      {"LOOM_SHM_DIRECT_MIN_BYTES", "524288", kData,
       "Smallest send that LOOM_SHM_DIRECT offers for a direct read (smaller ones are cheaper "
       "through the FIFO; docs/RESULTS.md). The tuner's cost model times receives from this size "
       "at direct.gbps when its ranks read each other directly (docs/TUNING.md)."},
      {"LOOM_SHM_FIFO_STORES", "auto", kData,
       "How a shared-memory sender writes 4 KiB or more into a FIFO: cached: plain stores, the "
       "reader fetches the lines from the writer's cache; streaming: non-temporal stores, the "
       "lines go through memory; auto (default): each sender times one of every 32 writes of 16 KiB "
       "or more (one sample in 8 with the stores not in use) and takes non-temporal stores while "
       "the median of its last 5 plain copies runs below 0.25 of the non-temporal one. Streaming was 2-5x faster where the two cores reach "
       "each other's caches slowly (two CCDs or sockets; a VM phase) and half as fast where they "
       "share a cache; auto followed the better one in both (docs/RESULTS.md)."},
      {"LOOM_DEVICE_EMULATION", "0", kData,
       "1: device communicators (config.device >= 0) run their plan kernel on CPU threads over host memory "
       "instead of a GPU: the same FIFO protocol and plan interpreter, built as host code (docs/ARCHITECTURE.md, "
       "'Device communicators'). Buffers are then host memory and streams are Loom host streams (NULL: the call "
       "completes before it returns). For tests and debugging without a GPU; builds without CUDA accept it too."},
      {"LOOM_DEVICE_EMULATION_BLOCKS", "0", kData,
       "With LOOM_DEVICE_EMULATION=1: how many plan-kernel workers the emulated device runs at once, shared by "
       "every emulated communicator of the process, as a GPU holds only so many resident thread blocks (a worker "
       "waits for a free one before it starts). 0: no limit. Tests use it to check that device plans fit the GPU "
       "they share (docs/ARCHITECTURE.md, 'Device communicators')."},
      {"LOOM_P2P_DISABLE", "0", kData,
       "1: a device communicator's rank puts the FIFOs it receives into from GPUs of its host in pinned host "
       "memory, which both GPUs reach over PCIe, even where they could reach each other's memory "
       "(NCCL_P2P_DISABLE's use: a machine whose peer-to-peer path is broken or slow). Each rank decides for its "
       "own FIFOs, so a pair may use both kinds; GPUs without peer access get host memory whatever this says."},
      {"LOOM_DEVICE_FIFO_BYTES", "4194304", kData,
       "Bytes of each simple-wire FIFO of a device communicator, per channel, peer and direction (8 slots of an "
       "eighth each; 16384 or more). A pair of ranks that exchange data holds two per channel."},
      {"LOOM_DEVICE_SLICE_BYTES", "2097152", kData,
       "Pipeline slice of device communicators: a plan step moves or reduces at most this many bytes, and the "
       "next hop of a ring may forward a slice as soon as it is reduced."},
      {"LOOM_TOPO_FILE", "", kTopo,
       "An hwloc XML file (lstopo --of xml, LOOM_TOPO_DUMP_FILE, or tests/topologies/) whose machine "
       "Loom uses instead of discovering this one: rings, trees and the tuner then plan for that "
       "machine. Conventions for GPUs, NICs, NVLink and Loom's own attributes: docs/TOPOLOGY.md."},
      {"LOOM_TOPO_DUMP_FILE", "", kTopo,
       "Write the discovered machine as hwloc XML to this file (loadable with LOOM_TOPO_FILE; needs "
       "a build with hwloc)."},
      {"LOOM_RANK", "", kLaunch, "Rank of this process (loomrun sets it)."},
      {"LOOM_WORLD_SIZE", "", kLaunch, "Number of ranks (loomrun sets it)."},
      {"LOOM_LOCAL_RANK", "", kLaunch, "Rank among the ranks of this host (informational)."},
      {"LOOM_LOCAL_WORLD_SIZE", "", kLaunch, "Ranks on this host (set by loomrun; informational)."},
      {"LOOM_NODE_RANK", "", kLaunch, "Index of this node (set by loomrun; informational)."},
      {"LOOM_NNODES", "", kLaunch, "Number of nodes (set by loomrun; informational)."},
      {"RANK", "", kLaunch, "torchrun's rank, used when LOOM_RANK is unset."},
      {"WORLD_SIZE", "", kLaunch, "torchrun's world size."},
      {"LOCAL_RANK", "", kLaunch, "torchrun's local rank."},
      {"MASTER_ADDR", "", kLaunch, "torchrun's master address."},
      {"MASTER_PORT", "", kLaunch,
       "torchrun's master port, used when LOOM_MASTER_PORT is unset; the port after it where "
       "TORCHELASTIC_USE_AGENT_STORE=True (docs/LAUNCH.md)."},
      {"TORCHELASTIC_USE_AGENT_STORE", "", kLaunch,
       "Set by torchrun: True when its agent's TCPStore holds MASTER_PORT (static rendezvous), so "
       "Loom's root listens on MASTER_PORT + 1 instead."},
      {"OMPI_COMM_WORLD_RANK", "", kLaunch, "Open MPI's rank (mpirun)."},
      {"OMPI_COMM_WORLD_SIZE", "", kLaunch, "Open MPI's world size."},
      {"OMPI_COMM_WORLD_LOCAL_RANK", "", kLaunch, "Open MPI's local rank."},
      {"SLURM_PROCID", "", kLaunch, "Slurm's rank (srun)."},
      {"SLURM_NTASKS", "", kLaunch, "Slurm's world size."},
      {"SLURM_LOCALID", "", kLaunch, "Slurm's local rank."},
      {"CUDA_DEVICE_MAX_CONNECTIONS", "8", kSystem,
       "CUDA's hardware queues per device context (1-32), read by the CUDA driver. Ranks that are "
       "threads of one process on one GPU need two each (their stream and the communicator's "
       "own), or a rank's kernel can queue behind a thread peer's kernel that waits for it; Loom "
       "warns when they are too few (docs/ARCHITECTURE.md, 'Thread ranks on one GPU')."},
      {"XDG_CACHE_HOME", "", kSystem,
       "Where the machine calibration is kept (in loom/ under it) when it is an absolute path."},
      {"HOME", "", kSystem, "The machine calibration is kept in $HOME/.cache/loom when XDG_CACHE_HOME is not usable."},
  };
  return table;
}

namespace {
const Variable& lookup(const char* name) {
  for (const Variable& v : variables()) {
    if (std::strcmp(v.name, name) == 0) return v;
  }
  throw std::logic_error(std::string("environment variable not declared in env.cc: ") + name);
}
}  // namespace

std::vector<std::string> splitList(const std::string& value) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    if (comma > start) items.push_back(value.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

std::optional<std::string> get(const char* name, From from) {
  lookup(name);
  const char* value = from == From::kEnvironment ? std::getenv(name) : nullptr;
  if (value == nullptr || value[0] == '\0') return std::nullopt;
  return std::string(value);
}

std::string getOrDefault(const char* name, From from) {
  std::optional<std::string> value = get(name, from);
  return value ? *value : declaredDefault(name);
}

std::string declaredDefault(const char* name) { return lookup(name).defaultValue; }

Status getInt(const char* name, long long min, long long max, long long* out, From from) {
  std::string text = getOrDefault(name, from);
  if (text.empty()) {
    return error(loomInvalidArgument, "%s is not set and has no default", name);
  }
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    return error(loomInvalidArgument, "%s=\"%s\" is not an integer", name, text.c_str());
  }
  if (value < min || value > max) {
    return error(loomInvalidArgument, "%s=%lld is out of range [%lld, %lld]", name, value, min,
                 max);
  }
  *out = value;
  return Status::ok();
}

std::string markdown() {
  std::string out =
      "# Environment variables\n\n"
      "Generated from the table in src/base/env.cc by `loom-info --env-markdown`; a test "
      "keeps this file equal to it. Values are read when a communicator is created. The "
      "variables that shape plans and links (LOOM_TRANSPORTS, LOOM_ALGO, LOOM_PROTO, LOOM_CHANNELS, "
      "LOOM_RING_ORDER, LOOM_CHUNK_SIZE, LOOM_STREAMING_MIN_BYTES, LOOM_MAPPED_MIN_BYTES, LOOM_SOCKET_NSOCKS, "
      "LOOM_UCX_LINKS, LOOM_CHECK, "
      "LOOM_DEVICE_EMULATION, LOOM_DEVICE_FIFO_BYTES, LOOM_DEVICE_SLICE_BYTES) are rank 0's for the whole "
      "communicator: a rank whose "
      "value differs warns and uses rank 0's, since ranks that planned differently would wait on "
      "each other.\n";
  const char* section = nullptr;
  for (const Variable& v : variables()) {
    if (section == nullptr || std::strcmp(section, v.section) != 0) {
      section = v.section;
      out += format("\n## %s\n\n| Variable | Default | Meaning |\n|---|---|---|\n", section);
    }
    std::string def = v.defaultValue[0] ? format("`%s`", v.defaultValue) : std::string("—");
    out += format("| `%s` | %s | %s |\n", v.name, def.c_str(), v.description);
  }
  return out;
}

}  // namespace loom::env
