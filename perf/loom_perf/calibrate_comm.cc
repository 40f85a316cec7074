// The calibration's measuring tools (calibrate_comm.h).
#include "calibrate_comm.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "fatal.h"

namespace loomperf {

using Clock = std::chrono::steady_clock;

double fromRankZero(double value, loomComm_t comm) {
  require(loomBroadcast(&value, &value, 1, loomFloat64, 0, comm, nullptr), comm, "loomBroadcast");
  return value;
}

double slowest(double value, loomComm_t comm) {
  require(loomAllReduce(&value, &value, 1, loomFloat64, loomMax, comm, nullptr), comm, "loomAllReduce");
  return value;
}

std::string hostName() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

std::vector<std::string> hostNames(loomComm_t comm, int rank, int nranks) {
  constexpr size_t kNameBytes = 64;
  std::vector<char> names(kNameBytes * static_cast<size_t>(nranks));
  std::strncpy(&names[kNameBytes * static_cast<size_t>(rank)], hostName().c_str(), kNameBytes - 1);
  require(loomAllGather(&names[kNameBytes * static_cast<size_t>(rank)], names.data(), kNameBytes, loomInt8, comm,
                        nullptr),
          comm, "loomAllGather of host names");
  std::vector<std::string> hosts;
  for (int r = 0; r < nranks; ++r) hosts.emplace_back(&names[kNameBytes * static_cast<size_t>(r)]);
  return hosts;
}

bool canWrite(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (access(dir.c_str(), W_OK | X_OK) != 0) return false;
  return access(path.c_str(), F_OK) != 0 || access(path.c_str(), W_OK) == 0;
}

int writeTuningFile(const std::string& path, const loom::CommProfile& profile, const std::vector<std::string>& keys,
                    const std::string& comment, const loom::DataPathSizes& sizes) {
  const loom::Status saved = loom::saveTuningFile(path, profile, hostName(), keys, comment, sizes);
  if (!saved.isOk()) {
    std::fprintf(stderr, "loom-perf: --calibrate: %s\n", saved.message().c_str());
    return 1;
  }
  std::printf("# wrote %s:\n%s%s", path.c_str(), loom::tuningText(profile, keys).c_str(),
              loom::dataPathText(sizes).c_str());
  return 0;
}

double allReduceUs(loomComm_t comm, size_t bytes, int iters) {
  const size_t count = bytes / sizeof(float);
  std::vector<float> send(count, 1.0f), recv(count);
  auto once = [&] {
    require(loomAllReduce(send.data(), recv.data(), count, loomFloat32, loomSum, comm, nullptr), comm,
            "loomAllReduce");
  };
  for (int i = 0; i < 2; ++i) once();
  require(loomBarrier(comm, nullptr), comm, "loomBarrier");
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < iters; ++i) once();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
  return slowest(us, comm);
}

ScopedComm::ScopedComm(loomComm_t parent, int rank, int nranks, const Settings& settings, int device) {
  loomUniqueId id{};
  if (rank == 0) require(loomGetUniqueId(&id), nullptr, "loomGetUniqueId");
  require(loomBroadcast(&id, &id, sizeof id, loomInt8, 0, parent, nullptr), parent, "loomBroadcast");
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  for (const auto& [name, value] : settings) {
    const char* old = std::getenv(name.c_str());
    saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    setenv(name.c_str(), value.c_str(), 1);
  }
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.device = device;
  require(loomCommInitRankConfig(&comm_, nranks, id, rank, &config), nullptr, "loomCommInitRankConfig");
  // In reverse, so that a variable named twice ends as it began.
  for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
    if (it->second) {
      setenv(it->first.c_str(), it->second->c_str(), 1);
    } else {
      unsetenv(it->first.c_str());
    }
  }
}

ScopedComm::~ScopedComm() { loomCommDestroy(comm_); }

}  // namespace loomperf
