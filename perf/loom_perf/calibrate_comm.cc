// The calibration's measuring tools (calibrate_comm.h).
#include "calibrate_comm.h"

#include <chrono>
#include <cstdlib>
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

ScopedComm::ScopedComm(loomComm_t parent, int rank, int nranks, const Settings& settings) {
  loomUniqueId id{};
  if (rank == 0) require(loomGetUniqueId(&id), nullptr, "loomGetUniqueId");
  require(loomBroadcast(&id, &id, sizeof id, loomInt8, 0, parent, nullptr), parent, "loomBroadcast");
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  for (const auto& [name, value] : settings) {
    const char* old = std::getenv(name.c_str());
    saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    setenv(name.c_str(), value.c_str(), 1);
  }
  require(loomCommInitRank(&comm_, nranks, id, rank), nullptr, "loomCommInitRank");
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
