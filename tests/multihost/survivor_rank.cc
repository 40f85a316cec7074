// One rank of the kill trial across namespace hosts (netns_four_hosts_test.sh): joins the job
// from the launcher's environment, prints its pid, then runs allreduces and broadcasts until
// one fails, and prints when (wall clock, so that the script can set it against the moment
// it killed the victim) and why.
//
//   survivor_rank VICTIM during|before
//     during: every rank calls from the start; the script kills VICTIM mid-loop.
//     before: VICTIM makes no call (it waits to be killed) and the others begin 2 s after
//             they printed their pid, once the script has killed it: its death comes before
//             any data connection to it.
//
// Output: "rank R pid P ready", "rank R calls from T ms", then "rank R failed at T ms:
// MESSAGE" (exit 0: an error is what a survivor should see) or "rank R: no error within S s"
// (exit 1). Times are wall-clock milliseconds.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"
#include "multihost/join_job.h"

namespace {

constexpr auto kGiveUp = std::chrono::seconds(20);

long long wallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: survivor_rank VICTIM during|before\n");
    return 2;
  }
  const int victim = std::atoi(argv[1]);
  const bool before = std::string(argv[2]) == "before";
  // loomrun stops the other ranks of a host once one of them ended in failure (SIGTERM,
  // SIGKILL 3 s later): the trial wants each survivor's own error, not the launcher's stop.
  signal(SIGTERM, SIG_IGN);
  int rank = -1, nranks = 0;
  loomComm_t comm = loomtest::joinJob(&rank, &nranks);
  if (comm == nullptr) return 2;
  std::printf("rank %d pid %d ready\n", rank, static_cast<int>(getpid()));
  std::fflush(stdout);
  if (before && rank == victim) {
    for (;;) pause();
  }
  if (before) std::this_thread::sleep_for(std::chrono::seconds(2));
  std::printf("rank %d calls from %lld ms\n", rank, wallMs());
  std::fflush(stdout);

  std::vector<float> data(256 << 10, 1.0f);  // 1 MiB
  const auto start = std::chrono::steady_clock::now();
  for (long call = 0; std::chrono::steady_clock::now() - start < kGiveUp; ++call) {
    const loomResult_t r = call % 2 == 0 ? loomAllReduce(data.data(), data.data(), data.size(), loomFloat32, loomSum, comm, nullptr)
                      : loomBroadcast(data.data(), data.data(), data.size(), loomFloat32, static_cast<int>(call % nranks),
                                      comm, nullptr);
    if (r != loomSuccess) {
      std::printf("rank %d failed at %lld ms: %s: %s\n", rank, wallMs(), loomGetErrorString(r), loomGetLastError(comm));
      std::fflush(stdout);
      loomCommDestroy(comm);
      return 0;
    }
    // Sums of ones grow by a factor of 8 each allreduce: keep them small.
    if (call % 2 == 0) std::fill(data.begin(), data.end(), 1.0f);
  }
  std::printf("rank %d: no error within %lld s\n", rank, static_cast<long long>(kGiveUp.count()));
  loomCommDestroy(comm);
  return 1;
}
