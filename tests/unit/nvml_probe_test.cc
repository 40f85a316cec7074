// NVLink and peer access from NVML: what the reports of machines we do not have (bridged
// pairs, an NVSwitch box, a PCIe box without peer traffic across sockets) make of the
// graph, and NVML's absence on this one.
#include "topology/nvml_probe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "topology/render.h"
#include "topology/rings.h"

namespace loom::topo {
namespace {

// One CPU node with `gpus` GPUs straight under it over PCIe, bus ids 0000:1N:00.0.
Graph pcieHost(int gpus) {
  Graph g;
  Node cpu;
  cpu.kind = NodeKind::kCpu;
  cpu.name = "cpu0";
  cpu.index = 0;
  cpu.socket = 0;
  const int c = g.add(cpu);
  for (int i = 0; i < gpus; ++i) {
    Node gpu;
    gpu.kind = NodeKind::kGpu;
    gpu.name = "gpu" + std::to_string(i);
    gpu.index = i;
    gpu.cpu = c;
    gpu.busId = "0000:1" + std::to_string(i) + ":00.0";
    g.connect(c, g.add(gpu), LinkKind::kPcie, 31.5, kPcieLatencyUs);
  }
  return g;
}

// NVML's answers, written down: each GPU's bus id, generation, and the far end of each
// port that is up ("switch" for an NVSwitch).
class FakeNvml : public NvmlSource {
 public:
  struct Gpu {
    std::string busId;
    int major;
    std::vector<std::string> ports;
  };
  explicit FakeNvml(std::vector<Gpu> gpus) : gpus_(std::move(gpus)) {}

  int gpuCount() override { return static_cast<int>(gpus_.size()); }
  std::string busId(int gpu) override { return gpus_[static_cast<size_t>(gpu)].busId; }
  int computeMajor(int gpu) override { return gpus_[static_cast<size_t>(gpu)].major; }
  bool remote(int gpu, int port, std::string* busId, bool* toSwitch) override {
    ++asked_[gpu];
    const std::vector<std::string>& ports = gpus_[static_cast<size_t>(gpu)].ports;
    if (static_cast<size_t>(port) >= ports.size()) return false;
    *toSwitch = ports[static_cast<size_t>(port)] == "switch";
    *busId = *toSwitch ? "0000:ff:00.0" : ports[static_cast<size_t>(port)];
    return true;
  }
  bool peerRead(int a, int b, bool* readable) override {
    if (!knowsPeers) return false;
    *readable = std::find(unreadable.begin(), unreadable.end(), std::make_pair(a, b)) == unreadable.end();
    return true;
  }
  int portsAsked(int gpu) { return asked_[gpu]; }

  std::vector<std::pair<int, int>> unreadable;  // NVML's GPU index pairs, lower first
  bool knowsPeers = true;

 private:
  std::vector<Gpu> gpus_;
  std::map<int, int> asked_;
};

std::vector<std::string> repeat(const std::string& far, int n) { return std::vector<std::string>(static_cast<size_t>(n), far); }

std::vector<std::string> join(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(NvmlProbe, PortSpeedFollowsTheGeneration) {
  EXPECT_EQ(nvlinkPortGbps(6), 20);   // P100, NVLink 1
  EXPECT_EQ(nvlinkPortGbps(7), 25);   // V100, NVLink 2
  EXPECT_EQ(nvlinkPortGbps(8), 25);   // A100, NVLink 3
  EXPECT_EQ(nvlinkPortGbps(9), 25);   // H100, NVLink 4
  EXPECT_EQ(nvlinkPortGbps(10), 50);  // B200, NVLink 5
  EXPECT_EQ(nvlinkPortGbps(0), 0);    // NVML could not say
}

// Two A100 pairs joined by NVLink bridges of 4 ports each, reported from both ends, and
// nothing between the pairs but PCIe.
TEST(NvmlProbe, BridgedPairsBecomeOneLinkEach) {
  Graph g = pcieHost(4);
  const std::string b0 = "0000:10:00.0", b1 = "0000:11:00.0", b2 = "0000:12:00.0", b3 = "0000:13:00.0";
  FakeNvml nvml({{b0, 8, repeat(b1, 4)}, {b1, 8, repeat(b0, 4)}, {b2, 8, repeat(b3, 4)}, {b3, 8, repeat(b2, 4)}});
  EXPECT_EQ(applyNvml(nvml, &g), 2);
  EXPECT_EQ(nvml.portsAsked(0), NvmlSource::kMaxPorts);
  Path pair = g.path(g.gpuByOrdinal(0), g.gpuByOrdinal(1));
  EXPECT_EQ(pair.type, PathType::kNvlink);
  EXPECT_EQ(pair.nvlinks, 4);
  EXPECT_DOUBLE_EQ(pair.gbps, 100);
  EXPECT_EQ(g.path(g.gpuByOrdinal(2), g.gpuByOrdinal(3)).nvlinks, 4);
  EXPECT_NE(g.path(g.gpuByOrdinal(1), g.gpuByOrdinal(2)).type, PathType::kNvlink);
  // Ranks handed the GPUs crosswise ring the bridged pairs together.
  std::vector<Place> places;
  for (int ordinal : {0, 2, 1, 3}) places.push_back({0, g.gpuByOrdinal(ordinal)});
  EXPECT_EQ(hostChain(g, places), (std::vector<int>{0, 1, 3, 2}));  // gpu0 | gpu2 gpu3 | gpu1 (gpu0)
}

// Four H100s with all 18 ports on the NVSwitches: one switch node, every pair NV18.
TEST(NvmlProbe, SwitchPortsMeetInOneNvswitchNode) {
  Graph g = pcieHost(4);
  std::vector<FakeNvml::Gpu> gpus;
  for (int i = 0; i < 4; ++i) gpus.push_back({"0000:1" + std::to_string(i) + ":00.0", 9, repeat("switch", 18)});
  FakeNvml nvml(gpus);
  EXPECT_EQ(applyNvml(nvml, &g), 4);
  ASSERT_EQ(g.all(NodeKind::kNvSwitch).size(), 1u);
  for (int a = 0; a < 4; ++a) {
    for (int b = a + 1; b < 4; ++b) {
      Path p = g.path(g.gpuByOrdinal(a), g.gpuByOrdinal(b));
      EXPECT_EQ(p.type, PathType::kNvlink) << a << "-" << b;
      EXPECT_EQ(p.nvlinks, 18);
      EXPECT_DOUBLE_EQ(p.gbps, 450);
    }
  }
}

// What the graph cannot place is left out: a GPU NVML has that the graph lacks, and ports
// to it. A GPU of unknown generation takes its peer's port speed; two such, no link.
TEST(NvmlProbe, LeavesOutWhatTheGraphLacks) {
  Graph g = pcieHost(4);
  const std::string b0 = "0000:10:00.0", b1 = "0000:11:00.0", b2 = "0000:12:00.0", b3 = "0000:13:00.0";
  const std::string stranger = "0000:99:00.0";
  FakeNvml nvml({{b0, 9, join(join(repeat(b1, 2), repeat(stranger, 2)), repeat("switch", 1))},
                 {b1, 9, join(repeat(b0, 2), repeat(b2, 6))},
                 {b2, 0, join(repeat(b1, 6), repeat(b3, 3))},
                 {b3, 0, repeat(b2, 3)},
                 {stranger, 9, repeat(b0, 2)}});
  EXPECT_EQ(applyNvml(nvml, &g), 3);  // gpu0-gpu1, gpu0-switch, gpu1-gpu2
  Path p = g.path(g.gpuByOrdinal(0), g.gpuByOrdinal(1));
  EXPECT_EQ(p.type, PathType::kNvlink);
  EXPECT_EQ(p.nvlinks, 2);
  EXPECT_DOUBLE_EQ(p.gbps, 50);
  p = g.path(g.gpuByOrdinal(1), g.gpuByOrdinal(2));
  EXPECT_EQ(p.nvlinks, 6);
  EXPECT_DOUBLE_EQ(p.gbps, 150);
  EXPECT_NE(g.path(g.gpuByOrdinal(2), g.gpuByOrdinal(3)).hops, 1);
}

// A PCIe box whose root complex does not forward peer traffic between its two sockets:
// NVML says GPUs 0,1 and 2,3 read each other, no pair across. Pairs NVML cannot answer for
// keep the default.
TEST(NvmlProbe, PeerAccessAsNvmlReportsIt) {
  Graph g = pcieHost(4);
  std::vector<FakeNvml::Gpu> gpus;
  for (int i = 0; i < 4; ++i) gpus.push_back({"0000:1" + std::to_string(i) + ":00.0", 8, {}});
  FakeNvml nvml(gpus);
  nvml.unreadable = {{0, 2}, {0, 3}, {1, 2}, {1, 3}};
  EXPECT_EQ(applyNvml(nvml, &g), 0);
  auto gpu = [&](int ordinal) { return g.gpuByOrdinal(ordinal); };
  EXPECT_TRUE(g.peerAccess(gpu(0), gpu(1)));
  EXPECT_TRUE(g.peerAccess(gpu(3), gpu(2)));
  EXPECT_FALSE(g.peerAccess(gpu(0), gpu(2)));
  EXPECT_FALSE(g.peerAccess(gpu(3), gpu(1)));  // either order
  const std::string tree = renderTree(g);
  EXPECT_NE(tree.find("gpu1 <-> gpu3  [no peer-to-peer access]"), std::string::npos) << tree;
  EXPECT_EQ(tree.find("gpu0 <-> gpu1  [no peer"), std::string::npos) << tree;

  Graph unknown = pcieHost(4);
  nvml.knowsPeers = false;
  applyNvml(nvml, &unknown);
  EXPECT_TRUE(unknown.peerAccess(unknown.gpuByOrdinal(0), unknown.gpuByOrdinal(2)));
}

// hwloc's NVML backend gave the NVLinks already: NVML adds none of its own.
TEST(NvmlProbe, KeepsNvlinksTheGraphHas) {
  Graph g = pcieHost(2);
  g.connect(g.gpuByOrdinal(0), g.gpuByOrdinal(1), LinkKind::kNvlink, 100, kNvlinkLatencyUs, 4);
  FakeNvml nvml({{"0000:10:00.0", 8, repeat("0000:11:00.0", 4)}, {"0000:11:00.0", 8, repeat("0000:10:00.0", 4)}});
  EXPECT_EQ(applyNvml(nvml, &g), 0);
  EXPECT_EQ(g.links().size(), 3u);  // two PCIe, one NVLink
}

// This machine has no NVIDIA driver (CI) or has one (the GPU machine): either way the probe
// answers without crashing, and says why when it has nothing.
TEST(NvmlProbe, OpensNvmlOrSaysWhy) {
  std::string why;
  std::unique_ptr<NvmlSource> nvml = openNvml(&why);
  if (!nvml) {
    EXPECT_NE(why.find("NVML"), std::string::npos) << why;
    std::printf("no NVML here: %s\n", why.c_str());
    return;
  }
  for (int i = 0; i < nvml->gpuCount(); ++i) {
    EXPECT_EQ(nvml->busId(i).size(), 12u) << nvml->busId(i);  // "0000:18:00.0"
    std::printf("gpu %d: %s, compute %d\n", i, nvml->busId(i).c_str(), nvml->computeMajor(i));
  }
}

}  // namespace
}  // namespace loom::topo
