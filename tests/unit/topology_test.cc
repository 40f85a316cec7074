// Topology: path classification on hand-built graphs, /sys discovery on a made-up /sys tree,
// and the graphs, matrices and rings of the shipped machines (tests/topologies/).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/status.h"
#include "loom_build_config.h"
#include "topology/affinity.h"
#include "topology/discover.h"
#include "topology/ibverbs_ports.h"
#include "topology/pci.h"
#include "topology/render.h"
#include "topology/rings.h"

namespace loom::topo {
namespace {

namespace fs = std::filesystem;

// cpu0 = cpu1; under cpu0 a host bridge with a switch holding gpu0 and nic0, and gpu1 straight
// under the bridge; gpu2 under cpu1; gpu0 and gpu1 joined by NVLink.
Node makeNode(NodeKind kind, const char* name, int index, int socket, int cpu = -1) {
  Node n;
  n.kind = kind;
  n.name = name;
  n.index = index;
  n.socket = socket;
  n.cpu = cpu;
  return n;
}

struct SmallMachine {
  Graph g;
  int cpu0, cpu1, bridge, sw, gpu0, gpu1, gpu2, nic0;
  SmallMachine() {
    cpu0 = g.add(makeNode(NodeKind::kCpu, "cpu0", 0, 0));
    cpu1 = g.add(makeNode(NodeKind::kCpu, "cpu1", 1, 1));
    bridge = g.add(makeNode(NodeKind::kHostBridge, "hb", -1, -1, cpu0));
    sw = g.add(makeNode(NodeKind::kPciSwitch, "sw", -1, -1, cpu0));
    gpu0 = g.add(makeNode(NodeKind::kGpu, "gpu0", 0, -1, cpu0));
    gpu1 = g.add(makeNode(NodeKind::kGpu, "gpu1", 1, -1, cpu0));
    gpu2 = g.add(makeNode(NodeKind::kGpu, "gpu2", 2, -1, cpu1));
    nic0 = g.add(makeNode(NodeKind::kNic, "nic0", -1, -1, cpu0));
    g.connect(cpu0, cpu1, LinkKind::kSmp, 40, kSmpLatencyUs);
    g.connect(cpu0, bridge, LinkKind::kPcie, 32, kPcieLatencyUs);
    g.connect(bridge, sw, LinkKind::kPcie, 32, kPcieLatencyUs);
    g.connect(sw, gpu0, LinkKind::kPcie, 32, kPcieLatencyUs);
    g.connect(sw, nic0, LinkKind::kPcie, 16, kPcieLatencyUs);
    g.connect(bridge, gpu1, LinkKind::kPcie, 32, kPcieLatencyUs);
    g.connect(cpu1, gpu2, LinkKind::kPcie, 32, kPcieLatencyUs);
    g.connect(gpu0, gpu1, LinkKind::kNvlink, 100, kNvlinkLatencyUs, 4);
  }
};

TEST(TopologyPath, ClassifiesLikeNvidiaSmi) {
  SmallMachine m;
  EXPECT_EQ(m.g.path(m.gpu0, m.gpu0).type, PathType::kSelf);
  Path nv = m.g.path(m.gpu0, m.gpu1);
  EXPECT_EQ(nv.type, PathType::kNvlink);
  EXPECT_EQ(nv.nvlinks, 4);
  EXPECT_DOUBLE_EQ(nv.gbps, 100);
  Path pix = m.g.path(m.gpu0, m.nic0);
  EXPECT_EQ(pix.type, PathType::kPix);
  EXPECT_DOUBLE_EQ(pix.gbps, 16);
  EXPECT_EQ(pix.hops, 2);
  EXPECT_EQ(m.g.path(m.nic0, m.gpu1).type, PathType::kPhb);
  Path sys = m.g.path(m.gpu0, m.gpu2);
  EXPECT_EQ(sys.type, PathType::kSys);
  EXPECT_DOUBLE_EQ(sys.gbps, 32);
  EXPECT_EQ(sys.hops, 5);
  EXPECT_DOUBLE_EQ(sys.latencyUs, 4 * kPcieLatencyUs + kSmpLatencyUs);
}

TEST(TopologyPath, DevicesDoNotForward) {
  // gpu1 reaches nic0 through the bridge, not through gpu0's NVLink and gpu0's switch.
  SmallMachine m;
  Path p = m.g.path(m.gpu1, m.nic0);
  EXPECT_EQ(p.type, PathType::kPhb);
  EXPECT_EQ(p.hops, 3);
}

TEST(TopologyPci, LinkBandwidthAsHwlocReportsIt) {
  EXPECT_NEAR(pcieGbps(32, 16), 63.015, 0.001);
  EXPECT_NEAR(pcieGbps(16, 8), 15.754, 0.001);
  EXPECT_NEAR(pcieGbps(5, 4), 2.0, 0.001);
  EXPECT_EQ(busIdString(0, 0x18, 0, 0), "0000:18:00.0");
  EXPECT_EQ(pciRole(0x10de, 0x0302), PciRole::kGpu);
  EXPECT_EQ(pciRole(0x10de, 0x0680), PciRole::kNvSwitch);
  EXPECT_EQ(pciRole(0x15b3, 0x0207), PciRole::kNic);
  EXPECT_EQ(pciRole(0x1002, 0x0300), PciRole::kOther);  // not a CUDA device
  EXPECT_EQ(pciRole(0x144d, 0x0108), PciRole::kOther);  // NVMe
}

TEST(TopologyPci, RdmaPortRateAsIbstatPrintsIt) {
  EXPECT_EQ(ibverbsRateGbps(32, 2), 100);    // 4x EDR
  EXPECT_EQ(ibverbsRateGbps(64, 2), 200);    // 4x HDR
  EXPECT_EQ(ibverbsRateGbps(128, 2), 400);   // 4x NDR (ConnectX-7)
  EXPECT_EQ(ibverbsRateGbps(128, 16), 200);  // 2x NDR
  EXPECT_EQ(ibverbsRateGbps(128, 1), 100);   // 1x NDR
  EXPECT_EQ(ibverbsRateGbps(16, 2), 56);     // 4x FDR
  EXPECT_EQ(ibverbsRateGbps(4, 8), 120);     // 12x QDR
  EXPECT_EQ(ibverbsRateGbps(3, 2), 0);       // no such speed code
  EXPECT_EQ(ibverbsRateGbps(32, 3), 0);      // no such width code
  // A device this machine does not have: no speed, no crash.
  EXPECT_EQ(ibverbsPortGbps("loom_no_such_hca"), 0);
}

// A made-up /sys: two NUMA domains on two sockets; under socket 0 a root port, a switch
// with an H100 and a 400G InfiniBand NIC; under socket 1 an H100 straight on a root port.
class FakeSysfs {
 public:
  FakeSysfs() {
    char dir[] = "/tmp/loom-sysfs-XXXXXX";
    root_ = mkdtemp(dir);
    for (int numa = 0; numa < 2; ++numa) {
      fs::path node = root_ / "devices/system/node" / ("node" + std::to_string(numa));
      write(node / "cpulist", numa == 0 ? "0-3" : "4-7");
      write(node / "meminfo", "Node " + std::to_string(numa) + " MemTotal:       1048576 kB\n");
    }
    write(root_ / "devices/system/node/possible", "0-1");  // not a node directory
    for (int cpu = 0; cpu < 8; ++cpu) {
      fs::path c = root_ / "devices/system/cpu" / ("cpu" + std::to_string(cpu));
      write(c / "topology/physical_package_id", cpu < 4 ? "0" : "1");
      write(c / "topology/core_id", std::to_string(cpu % 4));
      write(c / "cache/index0/type", "Data");
      write(c / "cache/index0/size", "48K");
      write(c / "cache/index3/type", "Unified");
      write(c / "cache/index3/size", "107520K");
    }
    std::string s0 = "devices/pci0000:17/0000:17:01.0";
    device(s0, "0x8086", "0x347a", "0x060400", 0, "32.0 GT/s PCIe", "16");
    device(s0 + "/0000:18:00.0", "0x1000", "0xc030", "0x060400", 0, "32.0 GT/s PCIe", "16");
    device(s0 + "/0000:18:00.0/0000:19:00.0", "0x1000", "0xc030", "0x060400", 0, "32.0 GT/s PCIe", "16");
    device(s0 + "/0000:18:00.0/0000:19:01.0", "0x1000", "0xc030", "0x060400", 0, "32.0 GT/s PCIe", "16");
    device(s0 + "/0000:18:00.0/0000:19:00.0/0000:1a:00.0", "0x10de", "0x2330", "0x030200", 0, "32.0 GT/s PCIe", "16");
    std::string nic = s0 + "/0000:18:00.0/0000:19:01.0/0000:1b:00.0";
    device(nic, "0x15b3", "0x1021", "0x020700", 0, "32.0 GT/s PCIe", "16");
    write(root_ / nic / "net/ibp27s0/ifindex", "3");
    write(root_ / nic / "infiniband/mlx5_0/ibdev", "mlx5_0");
    write(root_ / "class/infiniband/mlx5_0/ports/1/rate", "400 Gb/sec (4X NDR)");
    std::string s1 = "devices/pci0000:97/0000:97:01.0";
    device(s1, "0x8086", "0x347a", "0x060400", 1, "32.0 GT/s PCIe", "16");
    device(s1 + "/0000:98:00.0", "0x10de", "0x2330", "0x030200", 1, "16.0 GT/s PCIe", "16");
    device("devices/pci0000:00/0000:00:1f.2", "0x8086", "0x1572", "0x020000", -1, "Unknown", "0");
    write(root_ / "devices/pci0000:00/0000:00:1f.2/net/eno1/ifindex", "2");
    write(root_ / "class/net/eno1/speed", "10000");
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  std::string root() const { return root_.string(); }

 private:
  void write(const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text << "\n";
  }
  void device(const std::string& path, const char* vendor, const char* id, const char* cls, int numa,
              const char* speed, const char* width) {
    fs::path dir = root_ / path;
    write(dir / "vendor", vendor);
    write(dir / "device", id);
    write(dir / "class", cls);
    write(dir / "numa_node", std::to_string(numa));
    write(dir / "current_link_speed", speed);
    write(dir / "current_link_width", width);
    fs::create_directories(root_ / "bus/pci/devices");
    fs::create_symlink(fs::relative(dir, root_ / "bus/pci/devices"), root_ / "bus/pci/devices" / dir.filename());
  }
  fs::path root_;
};

TEST(TopologySysfs, ReadsDomainsDevicesAndTheirPaths) {
  FakeSysfs sys;
  Graph g;
  Status status = discoverSysfs(sys.root(), &g);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(g.all(NodeKind::kCpu).size(), 2u);
  const Node& cpu1 = g.node(g.cpuByNuma(1));
  EXPECT_EQ(cpu1.socket, 1);
  EXPECT_EQ(cpu1.cores, 4);
  EXPECT_EQ(cpu1.memoryBytes, size_t{1} << 30);
  EXPECT_EQ(cpu1.cacheBytes, size_t{107520} << 10);
  EXPECT_EQ(cpu1.cpuList, (std::vector<int>{4, 5, 6, 7}));
  ASSERT_EQ(g.all(NodeKind::kGpu).size(), 2u);
  int gpu0 = g.gpuByOrdinal(0), gpu1 = g.gpuByOrdinal(1);
  EXPECT_EQ(g.node(gpu0).busId, "0000:1a:00.0");
  EXPECT_EQ(g.node(gpu1).busId, "0000:98:00.0");
  EXPECT_EQ(g.node(gpu1).cpu, g.cpuByNuma(1));
  std::vector<int> nics = g.all(NodeKind::kNic);  // in bus order
  ASSERT_EQ(nics.size(), 2u);
  std::swap(nics[0], nics[1]);
  const Node& ib = g.node(nics[0]);
  EXPECT_EQ(ib.name, "mlx5_0");
  EXPECT_EQ(ib.model, "ibp27s0");
  EXPECT_DOUBLE_EQ(ib.portGbps, 400);
  const Node& eth = g.node(nics[1]);
  EXPECT_EQ(eth.name, "eno1");
  EXPECT_DOUBLE_EQ(eth.portGbps, 10);
  EXPECT_EQ(eth.cpu, g.cpuByNuma(0));  // numa_node -1: the first domain
  // The switch's downstream ports are the switch: GPU and NIC meet in one switch.
  Path gpuNic = g.path(gpu0, nics[0]);
  EXPECT_EQ(gpuNic.type, PathType::kPix);
  EXPECT_NEAR(gpuNic.gbps, 63.015, 0.001);
  Path across = g.path(gpu0, gpu1);
  EXPECT_EQ(across.type, PathType::kSys);
  EXPECT_NEAR(across.gbps, 31.508, 0.001);
  EXPECT_EQ(g.path(nics[0], nics[1]).type, PathType::kNode);
}

TEST(TopologySysfs, NoCpusIsAnError) {
  char dir[] = "/tmp/loom-sysfs-XXXXXX";
  std::string root = mkdtemp(dir);
  Graph g;
  Status status = discoverSysfs(root, &g);
  fs::remove_all(root);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("no CPUs"), std::string::npos) << status.message();
}

TEST(TopologyLive, ThisMachineHasAtLeastOneCpu) {
  Graph g;
  Source source;
  Status status = discoverLive(&g, &source);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(source, LOOM_HAVE_HWLOC ? Source::kHwloc : Source::kSysfs);
  EXPECT_FALSE(g.all(NodeKind::kCpu).empty());
  EXPECT_FALSE(g.host.empty());
  int cores = 0;
  size_t cpus = 0;
  for (int c : g.all(NodeKind::kCpu)) {
    cores += g.node(c).cores;
    cpus += g.node(c).cpuList.size();
  }
  EXPECT_GE(cores, 1);
  EXPECT_GE(cpus, static_cast<size_t>(cores));
}

TEST(TopologyAffinity, BindsToAllowedCpusOnly) {
  std::thread([] {
    cpu_set_t before;
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(before), &before), 0);
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; ++c) {
      if (CPU_ISSET(c, &before)) first = c;
    }
    std::string note;
    EXPECT_FALSE(bindCurrentThread({-1, CPU_SETSIZE + 5}, &note));
    EXPECT_NE(note.find("none of the 2 CPUs"), std::string::npos) << note;
    ASSERT_TRUE(bindCurrentThread({first, CPU_SETSIZE + 5}, &note)) << note;
    cpu_set_t after;
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(after), &after), 0);
    EXPECT_EQ(CPU_COUNT(&after), 1);
    EXPECT_TRUE(CPU_ISSET(first, &after));
  }).join();
}

TEST(TopologySysfs, AgreesWithHwlocOnThisMachine) {
  Graph sysfs;
  ASSERT_TRUE(discoverSysfs("/sys", &sysfs).isOk());
  ASSERT_FALSE(sysfs.all(NodeKind::kCpu).empty());
  if (!LOOM_HAVE_HWLOC) GTEST_SKIP() << "built without hwloc: nothing to compare /sys with";
  Graph hwloc;
  Source source;
  ASSERT_TRUE(discoverLive(&hwloc, &source).isOk());
  ASSERT_EQ(sysfs.all(NodeKind::kCpu).size(), hwloc.all(NodeKind::kCpu).size());
  for (size_t i = 0; i < sysfs.all(NodeKind::kCpu).size(); ++i) {
    EXPECT_EQ(sysfs.node(sysfs.all(NodeKind::kCpu)[i]).cores, hwloc.node(hwloc.all(NodeKind::kCpu)[i]).cores);
  }
  EXPECT_EQ(sysfs.all(NodeKind::kGpu).size(), hwloc.all(NodeKind::kGpu).size());
  EXPECT_EQ(sysfs.all(NodeKind::kNic).size(), hwloc.all(NodeKind::kNic).size());
}

TEST(TopologyRings, HostRanksGroupBySocketThenDomain) {
  SmallMachine m;
  std::vector<Place> places = {{m.cpu1}, {m.cpu0}, {m.cpu1}, {m.cpu0}};
  EXPECT_EQ(hostChain(m.g, places), (std::vector<int>{1, 3, 0, 2}));
}

// Two packages of two NUMA domains each, one GPU on each domain's own bridge: every GPU
// pair is SYS, but only pairs on different packages cross the socket interconnect.
TEST(TopologyRings, GpuRingCrossesSocketsBeforeDomains) {
  Graph g;
  std::vector<int> cpus, gpus;
  for (int numa = 0; numa < 4; ++numa) {
    std::string name = "cpu" + std::to_string(numa);
    int cpu = g.add(makeNode(NodeKind::kCpu, name.c_str(), numa, numa / 2));
    // Every domain one hop from every other, so hop counts cannot break the tie.
    for (int other : cpus) g.connect(other, cpu, LinkKind::kSmp, 40, kSmpLatencyUs);
    cpus.push_back(cpu);
    name = "gpu" + std::to_string(numa);
    int gpu = g.add(makeNode(NodeKind::kGpu, name.c_str(), numa, -1, cpu));
    g.connect(cpu, gpu, LinkKind::kPcie, 32, kPcieLatencyUs);
    gpus.push_back(gpu);
  }
  // Ranks take the GPUs alternating between the packages: rank order would cross them at
  // every hop.
  std::vector<Place> places;
  for (int ordinal : {0, 2, 1, 3}) places.push_back({g.node(gpus[static_cast<size_t>(ordinal)]).cpu, gpus[static_cast<size_t>(ordinal)]});
  std::vector<int> chain = hostChain(g, places);
  EXPECT_EQ(chain, (std::vector<int>{0, 1, 3, 2}));  // gpu0 | gpu2 gpu3 | gpu1 (gpu0)
  ChainQuality q = chainQuality(g, places, chain);
  EXPECT_EQ(q.socketCrossings, 2);
  EXPECT_EQ(q.numaCrossings, 2);
  ChainQuality rankOrder = chainQuality(g, places, {0, 1, 2, 3});
  EXPECT_EQ(rankOrder.socketCrossings, 4);
  EXPECT_EQ(rankOrder.numaCrossings, 0);
}

TEST(TopologyRings, GlobalRingKeepsHostsTogether) {
  // Ranks 0,2 on host 0 (chain 2,0), ranks 1,3 on host 1 (chain 1,3).
  std::vector<int> hostOf = {0, 1, 0, 1};
  std::vector<int> position = {1, 0, 0, 1};
  EXPECT_EQ(globalRing(hostOf, position), (std::vector<int>{2, 0, 1, 3}));
}

// loom-topo, run as a user would. Returns its exit status; `out` gets stdout and stderr.
int loomTopo(const std::string& args, std::string* out) {
  const char* exe = std::getenv("LOOM_TOPO_EXE");
  if (exe == nullptr) {
    ADD_FAILURE() << "LOOM_TOPO_EXE is set by meson";
    return -1;
  }
  FILE* pipe = ::popen((std::string(exe) + " " + args + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  out->clear();
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out->append(buf, n);
  int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(LoomTopo, PrintsThisMachine) {
  std::string out;
  ASSERT_EQ(loomTopo("", &out), 0) << out;
  EXPECT_NE(out.find(LOOM_HAVE_HWLOC ? "# topology from hwloc" : "# topology from sysfs"), std::string::npos) << out;
  EXPECT_NE(out.find("NUMA domains"), std::string::npos) << out;
  EXPECT_NE(out.find("cpu"), std::string::npos) << out;
}

TEST(LoomTopo, RingsForHostRanks) {
  std::string out;
  ASSERT_EQ(loomTopo("--rings 3 --host", &out), 0) << out;
  EXPECT_NE(out.find("3 host ranks"), std::string::npos) << out;
  EXPECT_NE(out.find("ring: "), std::string::npos) << out;
  EXPECT_NE(out.find("tree 1 (rank:parent):"), std::string::npos) << out;
}

TEST(LoomTopo, WritesDotAndSvg) {
  std::string dir = fs::temp_directory_path() / ("loom-topo-" + std::to_string(getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    std::string dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};
  std::string out;
  ASSERT_EQ(loomTopo("--dot " + dir + "/t.dot", &out), 0) << out;
  std::ifstream dot(dir + "/t.dot");
  std::string first;
  std::getline(dot, first);
  EXPECT_EQ(first.rfind("graph ", 0), 0u) << first;
  bool haveDot = std::system("command -v dot >/dev/null 2>&1") == 0;
  int svg = loomTopo("--svg " + dir + "/t.svg", &out);
  bool wrote = fs::exists(dir + "/t.svg");
  if (!haveDot) {
    EXPECT_EQ(svg, 1);
    EXPECT_NE(out.find("install graphviz"), std::string::npos) << out;
    GTEST_SKIP() << "skipped: graphviz's dot is not installed, so only the error for --svg was checked";
  }
  EXPECT_EQ(svg, 0) << out;
  EXPECT_TRUE(wrote);
}

TEST(LoomTopo, PredictsTheTunersChoices) {
  std::string out;
  // The built-in constants, which the choices below are for.
  ASSERT_EQ(setenv("LOOM_MACHINE_CALIBRATION", "0", 1), 0);
  ASSERT_EQ(loomTopo("--predict allreduce --ranks 4 --hosts 2", &out), 0) << out;
  unsetenv("LOOM_MACHINE_CALIBRATION");
  EXPECT_NE(out.find("# predicted µs, 4 ranks on 2 host(s), constants: built in: intra.latency_us = 1.5"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("ring       tree         rd    oneshot hierarchical  choice"), std::string::npos) << out;
  // Across hosts: no one-shot board, recursive doubling's two latencies win 8 B, the
  // hierarchical allreduce 256 MiB.
  std::istringstream lines(out);
  std::string line, first, last;
  while (std::getline(lines, line)) {
    if (line.find("       8 ") == 4) first = line;
    if (line.find("268435456") != std::string::npos) last = line;
  }
  EXPECT_NE(first.find("rd/simple"), std::string::npos) << out;
  EXPECT_NE(first.find("       -  "), std::string::npos) << out;  // no oneshot
  EXPECT_NE(last.find("hierarchical/"), std::string::npos) << out;
  EXPECT_EQ(loomTopo("--predict gather --ranks 2", &out), 2);
  EXPECT_NE(out.find("--predict needs a collective"), std::string::npos) << out;
  EXPECT_EQ(loomTopo("--predict allreduce", &out), 2);
  EXPECT_NE(out.find("--predict needs --ranks N"), std::string::npos) << out;
  EXPECT_EQ(loomTopo("--predict allreduce --ranks 3 --hosts 2", &out), 2);
  EXPECT_NE(out.find("--hosts must divide --ranks"), std::string::npos) << out;
}

TEST(LoomTopo, BadArgumentsSayWhat) {
  std::string out;
  EXPECT_EQ(loomTopo("--bogus", &out), 2);
  EXPECT_NE(out.find("unknown argument --bogus"), std::string::npos) << out;
  EXPECT_EQ(loomTopo("--rings 0", &out), 2);
  EXPECT_NE(out.find("--rings needs a rank count"), std::string::npos) << out;
  EXPECT_EQ(loomTopo("--file /nonexistent/topo.xml", &out), 1);
  EXPECT_NE(out.find("/nonexistent/topo.xml"), std::string::npos) << out;
}

// The shipped machines (tests/topologies/), as LOOM_TOPO_FILE loads them.
Graph fixture(const char* name) {
  Graph g;
  Status st = loadXml(std::string(LOOM_SOURCE_ROOT) + "/tests/topologies/" + name, &g);
  EXPECT_TRUE(st.isOk()) << st.message();
  return g;
}

// One GPU rank per listed ordinal, each on its GPU's NUMA domain.
std::vector<Place> gpuRanks(const Graph& g, const std::vector<int>& ordinals) {
  std::vector<Place> places;
  for (int ordinal : ordinals) {
    const int gpu = g.gpuByOrdinal(ordinal);
    EXPECT_GE(gpu, 0) << "gpu" << ordinal;
    places.push_back({g.node(gpu).cpu, gpu});
  }
  return places;
}

std::vector<int> ordinalsAround(const Graph& g, const std::vector<Place>& places, const std::vector<int>& chain) {
  std::vector<int> ordinals;
  for (int i : chain) ordinals.push_back(g.node(places[static_cast<size_t>(i)].gpu).index);
  return ordinals;
}

TEST(TopologyFixtures, DgxH100HasEightNvSwitchedGpusEachWithItsNic) {
  Graph g = fixture("dgx_h100.xml");
  EXPECT_EQ(g.all(NodeKind::kCpu).size(), 2u);
  EXPECT_EQ(g.all(NodeKind::kGpu).size(), 8u);
  EXPECT_EQ(g.all(NodeKind::kNic).size(), 9u);  // 8 ConnectX-7 and the management port
  std::string matrix = renderMatrix(g);
  // Every GPU pair through the NVSwitches (18 links each), each GPU's own NIC on its switch.
  // Columns after the GPUs: eno1 (the 10 GbE port on socket 0's host bridge), then mlx5_0...
  EXPECT_NE(matrix.find("gpu0   X      NV18   NV18   NV18   NV18   NV18   NV18   NV18   NODE   PIX    PHB"),
            std::string::npos)
      << matrix;
  int mlx5_3 = -1;
  for (int nic : g.all(NodeKind::kNic)) {
    if (g.node(nic).name == "mlx5_3") mlx5_3 = nic;
  }
  ASSERT_GE(mlx5_3, 0);
  EXPECT_EQ(g.path(g.gpuByOrdinal(3), mlx5_3).type, PathType::kPix);
}

TEST(TopologyFixtures, DgxH100RingIsGpuOrderWithoutCrossings) {
  Graph g = fixture("dgx_h100.xml");
  std::vector<Place> places = gpuRanks(g, {0, 1, 2, 3, 4, 5, 6, 7});
  std::vector<int> chain = hostChain(g, places);
  EXPECT_EQ(chain, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  ChainQuality q = chainQuality(g, places, chain);
  EXPECT_DOUBLE_EQ(q.gbps, 450.0);  // 18 NVLink 4 links of 25 GB/s each way
  EXPECT_EQ(q.socketCrossings, 0);
  EXPECT_EQ(q.numaCrossings, 0);
}

TEST(TopologyFixtures, PcieBoxRingPairsGpusOfOneSwitch) {
  Graph g = fixture("pcie_2socket_4gpu.xml");
  EXPECT_EQ(g.all(NodeKind::kCpu).size(), 2u);
  EXPECT_EQ(g.all(NodeKind::kGpu).size(), 4u);
  EXPECT_EQ(g.all(NodeKind::kNic).size(), 2u);
  EXPECT_EQ(g.path(g.gpuByOrdinal(0), g.gpuByOrdinal(1)).type, PathType::kPix);
  EXPECT_EQ(g.path(g.gpuByOrdinal(1), g.gpuByOrdinal(2)).type, PathType::kSys);
  // Ranks handed their GPUs crosswise still ring switch neighbours together: the ring
  // crosses sockets twice, the least a closed ring over two sockets can, where rank
  // order (0 2 1 3) would cross four times.
  // The ring 0 2 3 1 (back to 0) keeps the pairs 2,3 and 1,0 on their switches.
  std::vector<Place> places = gpuRanks(g, {0, 2, 1, 3});
  std::vector<int> chain = hostChain(g, places);
  EXPECT_EQ(ordinalsAround(g, places, chain), (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(chainQuality(g, places, chain).socketCrossings, 2);
  EXPECT_EQ(chainQuality(g, places, {0, 1, 2, 3}).socketCrossings, 4);
  EXPECT_EQ(chainQuality(g, places, chain).numaCrossings, 0);
  EXPECT_NEAR(chainQuality(g, places, chain).gbps, 31.5, 0.01);  // PCIe 4.0 x16
}

TEST(TopologyFixtures, TwoSocketCpuHostGroupsRanksByNumaDomain) {
  Graph g = fixture("cpu_2socket.xml");
  std::vector<int> cpus = g.all(NodeKind::kCpu);
  ASSERT_EQ(cpus.size(), 4u);  // EPYC in NPS2: two NUMA domains per socket
  EXPECT_EQ(g.node(cpus[1]).socket, 0);
  EXPECT_EQ(g.node(cpus[2]).socket, 1);
  EXPECT_EQ(g.all(NodeKind::kGpu).size(), 0u);
  // Ranks dealt round-robin over the domains come back grouped, socket 0's domains first.
  std::vector<Place> places;
  for (int r = 0; r < 8; ++r) places.push_back({cpus[static_cast<size_t>(r % 4)]});
  EXPECT_EQ(hostChain(g, places), (std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}));
  // Of the four hops between domains, two stay within a package.
  ChainQuality grouped = chainQuality(g, places, hostChain(g, places));
  EXPECT_EQ(grouped.socketCrossings, 2);
  EXPECT_EQ(grouped.numaCrossings, 2);
  // Dealt order crosses between packages at every other hop: cpu0 cpu1 | cpu2 cpu3 | cpu0 ...
  ChainQuality dealt = chainQuality(g, places, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(dealt.socketCrossings, 4);
  EXPECT_EQ(dealt.numaCrossings, 4);
}

TEST(TopologyFixtures, LaptopHasOneGpuAndItsWifi) {
  Graph g = fixture("laptop.xml");
  EXPECT_EQ(g.all(NodeKind::kCpu).size(), 1u);
  ASSERT_EQ(g.all(NodeKind::kGpu).size(), 1u);
  ASSERT_EQ(g.all(NodeKind::kNic).size(), 1u);  // the NVMe drive is not a NIC
  EXPECT_EQ(g.path(g.all(NodeKind::kGpu)[0], g.all(NodeKind::kNic)[0]).type, PathType::kNode);
}

TEST(TopologyFixtures, TopoFileReplacesTheLiveMachine) {
  const std::string path = std::string(LOOM_SOURCE_ROOT) + "/tests/topologies/pcie_2socket_4gpu.xml";
  ASSERT_EQ(::setenv("LOOM_TOPO_FILE", path.c_str(), 1), 0);
  Graph g;
  Source source;
  Status st = discover(&g, &source);
  ::unsetenv("LOOM_TOPO_FILE");
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_EQ(source, Source::kFile);
  EXPECT_EQ(g.all(NodeKind::kGpu).size(), 4u);
}

TEST(TopologyFixtures, GarbageXmlIsAnErrorNamingTheFile) {
  const std::string path = fs::temp_directory_path() / ("loom-garbage-" + std::to_string(getpid()) + ".xml");
  std::ofstream(path) << "<topology version=\"2.0\"><object type=\"Nonsense\"";
  Graph g;
  Status st = loadXml(path, &g);
  fs::remove(path);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
}

TEST(LoomTopo, RingsOnTheShippedPcieBox) {
  std::string out;
  ASSERT_EQ(loomTopo("--file " + std::string(LOOM_SOURCE_ROOT) + "/tests/topologies/pcie_2socket_4gpu.xml --rings 4",
                     &out),
            0)
      << out;
  EXPECT_NE(out.find("ring: 0 -PIX-> 1 -SYS-> 2 -PIX-> 3 -SYS-> 0"), std::string::npos) << out;
  EXPECT_NE(out.find("narrowest hop 31.5 GB/s, 2 socket crossings, 0 NUMA crossings within a socket"),
            std::string::npos)
      << out;
}

}  // namespace
// The model of scale: a row per power of two from 2 to 65,536 ranks; on one host the
// hierarchical allreduce is the ring, across a few hosts of 8 ranks with a port each it wins
// large calls, across thousands the tree does; malformed cluster descriptions are refused.
TEST(LoomTopo, ScalesFromTwoTo65536Ranks) {
  std::string out;
  ASSERT_EQ(loomTopo("--scale", &out), 0) << out;
  EXPECT_NE(out.find("# allreduce of 1073741824 bytes, 8 ranks per host"), std::string::npos) << out;
  int rows = 0;
  std::string two, twoHosts, big;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line.find("ranks") != std::string::npos) continue;
    ++rows;
    if (rows == 1) two = line;
    if (rows == 4) twoHosts = line;
    big = line;
  }
  EXPECT_EQ(rows, 16) << out;
  std::istringstream first(two);
  int n = 0, hosts = 0;
  double ringUs = 0, ringBw = 0, treeUs = 0, treeBw = 0, hierUs = 0;
  first >> n >> hosts >> ringUs >> ringBw >> treeUs >> treeBw >> hierUs;
  EXPECT_EQ(n, 2);
  EXPECT_EQ(hosts, 1);
  EXPECT_EQ(ringUs, hierUs) << two;
  // Two hosts: the hierarchical allreduce drives every rank's port; 8192 hosts: the rings'
  // 2(n-1) hops of latency leave the tree's log2 depth ahead.
  EXPECT_EQ(twoHosts.rfind("16", 8), 6u) << twoHosts;
  EXPECT_NE(twoHosts.find("  hierarchical"), std::string::npos) << twoHosts;
  EXPECT_EQ(big.rfind("65536", 8), 3u) << big;
  EXPECT_NE(big.find("  tree"), std::string::npos) << big;
  EXPECT_EQ(loomTopo("--scale --inter 47", &out), 2);
  EXPECT_NE(out.find("--inter needs GBPS,US"), std::string::npos) << out;
  EXPECT_EQ(loomTopo("--scale --per-host 0", &out), 2);
  EXPECT_EQ(loomTopo("--scale --bytes 4", &out), 2);
}

}  // namespace loom::topo
