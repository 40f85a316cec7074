// loom-topo: the machine as Loom sees it (docs/TOPOLOGY.md).
//   loom-topo                      tree and GPU/NIC matrix of this machine
//   loom-topo --file X.xml         the same for an hwloc XML (tests/topologies/, lstopo --of xml)
//   loom-topo --dot F [--svg F]    Graphviz DOT (SVG through `dot` when it is installed)
//   loom-topo --rings N [--host]   the ring and trees for N ranks on this host (GPU ranks
//                                  round-robin over the GPUs; --host: host ranks spread
//                                  evenly over the NUMA domains), with predicted bandwidth
//   loom-topo --predict COLL --ranks N [--hosts H] [--device]
//                                  the cost model's time for each algorithm of COLL and the
//                                  tuner's choice, 8 B to 256 MiB, with LOOM_TUNING_FILE's
//                                  constants (built-in ones without it), LOOM_ALGO, LOOM_PROTO;
//                                  --device: for a device communicator (its device.* keys)
//   loom-topo --scale [--per-host R] [--intra GBPS,US] [--inter GBPS,US] [--reduce GBPS]
//                     [--bytes N]     the allreduce of N bytes (default 1 GiB) predicted for
//                                  ring, tree and hierarchical from 2 to 65,536 ranks on a
//                                  described cluster (docs/TUNING.md, "A model of scale")
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "algorithms/calibration_cache.h"
#include "algorithms/cost_model.h"
#include "algorithms/select.h"
#include "algorithms/tree.h"
#include "algorithms/tuning_file.h"
#include "base/env.h"
#include "core/communicator.h"
#include "core/tuner_constants.h"
#include "topology/discover.h"
#include "topology/render.h"
#include "topology/rings.h"

namespace {

using namespace loom::topo;

int usage(const char* problem) {
  if (problem) std::fprintf(stderr, "loom-topo: %s\n", problem);
  std::fprintf(stderr,
               "usage: loom-topo [--file TOPOLOGY.xml] [--tree] [--matrix] [--dot FILE] [--svg FILE]\n"
               "                 [--rings N [--host]] [--predict COLLECTIVE --ranks N [--hosts H] [--device]]\n"
               "                 [--scale [--per-host R] [--intra GBPS,US] [--inter GBPS,US] [--reduce GBPS]\n"
               "                          [--bytes N]]\n");
  return 2;
}

// Runs `dot -Tsvg` without a shell; false when dot is missing or fails.
bool writeSvg(const std::string& dotFile, const std::string& svgFile) {
  pid_t pid = fork();
  if (pid == 0) {
    execlp("dot", "dot", "-Tsvg", dotFile.c_str(), "-o", svgFile.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::vector<Place> spreadRanks(const Graph& graph, int n, bool hostRanks) {
  std::vector<int> gpus = graph.all(NodeKind::kGpu);
  std::sort(gpus.begin(), gpus.end(), [&](int a, int b) { return graph.node(a).index < graph.node(b).index; });
  std::vector<int> cpus = graph.all(NodeKind::kCpu);
  std::vector<Place> places(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    Place& p = places[static_cast<size_t>(r)];
    if (!hostRanks && !gpus.empty()) {
      p.gpu = gpus[static_cast<size_t>(r) % gpus.size()];
      p.cpu = graph.node(p.gpu).cpu;
    } else {
      p.cpu = cpus[static_cast<size_t>(r) * cpus.size() / static_cast<size_t>(n)];
    }
  }
  return places;
}

void printRings(const Graph& graph, int n, bool hostRanks) {
  std::vector<Place> places = spreadRanks(graph, n, hostRanks);
  std::vector<int> chain = hostChain(graph, places);
  std::printf("%d %s ranks:\n", n, places.front().gpu >= 0 ? "GPU" : "host");
  for (int r = 0; r < n; ++r) {
    const Place& p = places[static_cast<size_t>(r)];
    std::printf("  rank %d on %s\n", r, graph.node(p.gpu >= 0 ? p.gpu : p.cpu).name.c_str());
  }
  std::printf("ring:");
  for (size_t i = 0; i < chain.size(); ++i) {
    const Place& a = places[static_cast<size_t>(chain[i])];
    const Place& b = places[static_cast<size_t>(chain[(i + 1) % chain.size()])];
    int na = a.gpu >= 0 ? a.gpu : a.cpu, nb = b.gpu >= 0 ? b.gpu : b.cpu;
    Path hop = graph.path(na, nb);
    std::printf(" %d -%s->", chain[i], hop.type == PathType::kNvlink ? ("NV" + std::to_string(hop.nvlinks)).c_str()
                                                                         : pathTypeName(hop.type));
  }
  std::printf(" %d\n", chain.front());
  ChainQuality q = chainQuality(graph, places, chain);
  if (q.gbps > 0) {
    std::printf("ring: narrowest hop %.1f GB/s, %d socket crossings, %d NUMA crossings within a socket; "
                "predicted allreduce bus bandwidth %.1f GB/s\n",
                q.gbps, q.socketCrossings, q.numaCrossings, q.gbps);
  } else {
    std::printf("ring: every rank shares one device; bandwidth is that of its memory\n");
  }
  const loom::RingOrder order(chain);
  std::printf("%s\n", loom::describeAllReduceTrees(&order, n).c_str());
}

struct NamedCollective {
  const char* name;
  loom::CallInfo::Kind kind;
};
constexpr NamedCollective kCollectives[] = {
    {"allreduce", loom::CallInfo::Kind::kAllReduce},         {"broadcast", loom::CallInfo::Kind::kBroadcast},
    {"reduce", loom::CallInfo::Kind::kReduce},               {"allgather", loom::CallInfo::Kind::kAllGather},
    {"reducescatter", loom::CallInfo::Kind::kReduceScatter}, {"alltoall", loom::CallInfo::Kind::kAllToAll},
};

// The table perf/tuner_check.sh sets beside loom-perf's: one row per size, one column per
// algorithm of the collective (µs, "-" where it cannot run), then the tuner's choice.
int printPredictions(loom::CallInfo::Kind kind, int nranks, int nhosts, bool device) {
  using namespace loom;
  CommProfile profile = device ? CommProfile::deviceDefaults(nranks, nhosts) : CommProfile::defaults(nranks, nhosts);
  // The settings and layers a communicator of this shape would take on this machine, from the
  // environment as a communicator resolves them (a device one: its slices and channels, the
  // tuning file alone; communicator.cc). Host channels stay the profile's: the links per peer
  // a transport would make are not known here.
  CommConfig config;
  Status status = resolveConfig(nullptr, nullptr, &config);
  TunerLayers layers;
  layers.tuningFile = config.tuningFile;
  applyDataPath(config, device, profile.channels, &profile);
  if (!device) {
    layers.streamingMinBytes = config.streamingMinBytes;
    layers.calibrationThreads = config.machineCalibration ? calibrationThreadsFor(profile.ranksPerHost()) : 0;
  }
  const AlgorithmSetting& algorithms = config.algorithms;
  const ProtocolSetting& protocols = config.protocols;
  std::string sources;
  if (status.isOk()) status = layerTunerConstants(layers, &profile, &sources);
  if (!status.isOk()) {
    std::fprintf(stderr, "loom-topo: %s\n", status.message().c_str());
    return 1;
  }
  std::printf("# predicted µs, %d ranks on %d host(s)%s, constants: %s\n", nranks, nhosts,
              device ? ", a device communicator" : "", sources.c_str());
  std::printf("%12s", "bytes");
  std::vector<Algorithm> candidates;
  for (int a = 0; a < kNumAlgorithms; ++a) {
    if (!supports(kind, static_cast<Algorithm>(a))) continue;
    candidates.push_back(static_cast<Algorithm>(a));
    std::printf(" %10s", algorithmName(candidates.back()));
  }
  std::printf("  choice\n");
  for (size_t bytes = 8; bytes <= (size_t{256} << 20); bytes *= 2) {
    CallShape shape;
    shape.info.kind = kind;
    shape.bytes = bytes;
    shape.oneHost = nhosts == 1;
    std::printf("%12zu", bytes);
    for (Algorithm a : candidates) {
      double us = predict(kind, a, bytes, profile).us;
      if (a == Algorithm::kOneShot && !shape.oneHost) us = INFINITY;
      if (std::isfinite(us)) {
        std::printf(" %10.1f", us);
      } else {
        std::printf(" %10s", "-");
      }
    }
    const Choice choice = chooseAlgorithm(shape, algorithms, protocols, profile);
    std::printf("  %s/%s\n", algorithmName(choice.algorithm), protocolName(choice.protocol));
  }
  return 0;
}

// A cluster described by its links: ranks per host, one link kind within a host and one
// between hosts (each rank's own connection, as with a network port per GPU), a reduction
// speed. The defaults are an 8-GPU H100 host (docs/ANCHORS: NVLink ring busbw 370 GB/s,
// NCCL's Simple per-hop latency 3.4 µs) with one 400 Gb/s NDR port per GPU (46-48 GB/s,
// network hop 14 µs).
struct Cluster {
  int perHost = 8;
  loom::LinkCost intra{3.4, 370.0};
  loom::LinkCost inter{14.0, 47.0};
  double reduceGbps = 2000.0;
  size_t bytes = size_t{1} << 30;
};

// "GBPS,US" into a link; false when it is not two positive numbers.
bool parseLink(const char* text, loom::LinkCost* out) {
  double gbps = 0, us = -1;
  if (text == nullptr || std::sscanf(text, "%lf,%lf", &gbps, &us) != 2 || gbps <= 0 || us < 0) return false;
  *out = {us, gbps};
  return true;
}

// Ring, tree and hierarchical allreduce times and bus bandwidths by rank count.
int printScale(const Cluster& cluster) {
  using namespace loom;
  std::printf("# allreduce of %zu bytes, %d ranks per host; within a host %.0f GB/s, %.1f us a hop; between "
              "hosts %.0f GB/s per rank, %.1f us a hop; reduction %.0f GB/s\n",
              cluster.bytes, cluster.perHost, cluster.intra.gbps, cluster.intra.latencyUs, cluster.inter.gbps,
              cluster.inter.latencyUs, cluster.reduceGbps);
  const Algorithm algorithms[] = {Algorithm::kRing, Algorithm::kTree, Algorithm::kHierarchical};
  std::printf("%8s %6s", "ranks", "hosts");
  for (Algorithm a : algorithms) std::printf(" %14s %8s", (std::string(algorithmName(a)) + " us").c_str(), "busbw");
  std::printf("  fastest\n");
  for (int n = 2; n <= 65536; n *= 2) {
    const int hosts = std::max(1, n / cluster.perHost);
    CommProfile p = CommProfile::defaults(n, hosts);
    p.intra = cluster.intra;
    p.inter = cluster.inter;
    p.reduceGbps = p.copyGbps = cluster.reduceGbps;
    p.streamingMinBytes = 0;  // no CPU caches to leave
    p.directMinBytes = 0;
    p.channels = 1;  // a rank's one network port
    p.sliceBytes = 4 << 20;  // NCCL's Simple buffer (docs/ANCHORS)
    std::printf("%8d %6d", n, hosts);
    double best = INFINITY;
    Algorithm fastest = Algorithm::kRing;
    for (Algorithm a : algorithms) {
      const double us = predictUs(CallInfo::Kind::kAllReduce, a, Protocol::kSimple, cluster.bytes, p);
      const double busbw = static_cast<double>(cluster.bytes) * 2 * (n - 1) / n / (us * 1e3);
      std::printf(" %14.1f %8.1f", us, busbw);
      if (us < best) {
        best = us;
        fastest = a;
      }
    }
    std::printf("  %s\n", algorithmName(fastest));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, dotFile, svgFile;
  bool tree = false, matrix = false, hostRanks = false, scale = false, device = false;
  Cluster cluster;
  int rings = 0, ranks = 0, hosts = 1;
  const NamedCollective* predicted = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (arg == "--file") {
      const char* v = value();
      if (!v) return usage("--file needs a path");
      file = v;
    } else if (arg == "--dot" || arg == "--svg") {
      const char* v = value();
      if (!v) return usage((arg + " needs a path").c_str());
      (arg == "--dot" ? dotFile : svgFile) = v;
    } else if (arg == "--rings") {
      const char* v = value();
      rings = v ? std::atoi(v) : 0;
      if (rings < 1 || rings > 4096) return usage("--rings needs a rank count from 1 to 4096");
    } else if (arg == "--predict") {
      const char* v = value();
      for (const NamedCollective& c : kCollectives) {
        if (v && std::strcmp(v, c.name) == 0) predicted = &c;
      }
      if (!predicted) return usage("--predict needs a collective (allreduce, broadcast, reduce, allgather, "
                                   "reducescatter, alltoall)");
    } else if (arg == "--ranks" || arg == "--hosts") {
      const char* v = value();
      (arg == "--ranks" ? ranks : hosts) = v ? std::atoi(v) : 0;
      if ((arg == "--ranks" ? ranks : hosts) < 1) return usage((arg + " needs a count of at least 1").c_str());
    } else if (arg == "--scale") {
      scale = true;
    } else if (arg == "--per-host") {
      const char* v = value();
      cluster.perHost = v ? std::atoi(v) : 0;
      if (cluster.perHost < 1 || cluster.perHost > 65536) return usage("--per-host needs a rank count from 1 to 65536");
    } else if (arg == "--intra" || arg == "--inter") {
      if (!parseLink(value(), arg == "--intra" ? &cluster.intra : &cluster.inter)) {
        return usage((arg + " needs GBPS,US: a bandwidth in GB/s and a latency in us, e.g. 47,14").c_str());
      }
    } else if (arg == "--reduce") {
      const char* v = value();
      cluster.reduceGbps = v ? std::atof(v) : 0;
      if (!(cluster.reduceGbps > 0)) return usage("--reduce needs a bandwidth in GB/s");
    } else if (arg == "--bytes") {
      const char* v = value();
      const long long bytes = v ? std::atoll(v) : 0;
      if (bytes < 8) return usage("--bytes needs a size of at least 8");
      cluster.bytes = static_cast<size_t>(bytes);
    } else if (arg == "--device") {
      device = true;
    } else if (arg == "--tree") {
      tree = true;
    } else if (arg == "--matrix") {
      matrix = true;
    } else if (arg == "--host") {
      hostRanks = true;
    } else if (arg == "--help" || arg == "-h") {
      usage(nullptr);
      return 0;
    } else {
      return usage(("unknown argument " + arg).c_str());
    }
  }
  if (scale) return printScale(cluster);
  if (predicted) {
    if (ranks < 1) return usage("--predict needs --ranks N");
    if (hosts > ranks || ranks % hosts != 0) return usage("--hosts must divide --ranks");
    return printPredictions(predicted->kind, ranks, hosts, device);
  }
  Graph graph;
  Source source = Source::kFile;
  loom::Status status = file.empty() ? discover(&graph, &source) : loadXml(file, &graph);
  if (!status.isOk()) {
    std::fprintf(stderr, "loom-topo: %s\n", status.message().c_str());
    return 1;
  }
  std::printf("# topology from %s%s\n", sourceName(source), file.empty() ? "" : (" " + file).c_str());
  bool chosen = tree || matrix || rings || !dotFile.empty() || !svgFile.empty();
  if (tree || !chosen) std::printf("%s\n", renderTree(graph).c_str());
  if (matrix || !chosen) std::printf("%s\n", renderMatrix(graph).c_str());
  if (rings) printRings(graph, rings, hostRanks);
  if (!svgFile.empty() && dotFile.empty()) dotFile = svgFile + ".dot";
  if (!dotFile.empty()) {
    std::ofstream(dotFile) << renderDot(graph);
    std::printf("wrote %s\n", dotFile.c_str());
  }
  if (!svgFile.empty()) {
    if (!writeSvg(dotFile, svgFile)) {
      std::fprintf(stderr, "loom-topo: could not run `dot -Tsvg` (install graphviz); the DOT is in %s\n",
                   dotFile.c_str());
      return 1;
    }
    std::printf("wrote %s\n", svgFile.c_str());
  }
  return 0;
}
