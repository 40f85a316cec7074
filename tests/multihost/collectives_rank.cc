// One rank of the multi-host collective check (netns_collectives_test.sh): joins the job
// from the launcher's environment (loomCommInitFromEnv), runs every collective x every type
// with rotating ops, counts, roots and in-place (loomtest::sliceCases) plus float
// determinism checks, and exits 0 only if every result matched the reference.
//
//   collectives_rank [ROTATION [full]]
//     ROTATION (default 0) shifts which case meets which count, root and in-place;
//     "full" runs loomtest::fullCases instead (every type x op x count x in-place).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "multirank/collective_reference.h"
#include "multihost/join_job.h"

int main(int argc, char** argv) {
  const unsigned rotation = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 0;
  const bool full = argc > 2 && std::string(argv[2]) == "full";
  const char* algo = std::getenv("LOOM_ALGO");
  int rank = -1, nranks = 0;
  loomComm_t comm = loomtest::joinJob(&rank, &nranks);
  if (comm == nullptr) return 2;

  int wrong = 0, done = 0;
  auto report = [&](const loomtest::CaseOutcome& outcome) {
    ++done;
    if (outcome.error.empty()) return;
    if (++wrong <= 10) std::fprintf(stderr, "rank %d: %s\n", rank, outcome.error.c_str());
  };
  bool stopped = false;
  const std::vector<loomtest::CollectiveCase> cases =
      full ? loomtest::fullCases(nranks, rotation) : loomtest::sliceCases(nranks, rotation);
  for (const loomtest::CollectiveCase& c : cases) {
    loomtest::CaseOutcome outcome = loomtest::runCollectiveCase(c, comm, rank, nranks);
    report(outcome);
    if (outcome.callFailed) {
      stopped = true;
      break;
    }
  }
  const struct {
    loomDataType_t type;
    loomRedOp_t op;
    size_t count;
  } determinism[] = {{loomFloat32, loomSum, 300007}, {loomFloat16, loomAvg, 65537}, {loomBfloat16, loomSum, 1023}};
  for (size_t i = 0; i < sizeof determinism / sizeof determinism[0] && !stopped; ++i) {
    loomtest::CaseOutcome outcome = loomtest::runDeterminismCase(
        determinism[i].type, determinism[i].op, determinism[i].count, 4242 + i, comm, rank, nranks);
    report(outcome);
    stopped = outcome.callFailed;
  }

  const loomResult_t r = loomCommDestroy(comm);
  if (r != loomSuccess) {
    std::fprintf(stderr, "rank %d: loomCommDestroy: %s: %s\n", rank, loomGetErrorString(r), loomGetLastError(nullptr));
    ++wrong;
  }
  if (wrong > 0 || stopped) {
    std::printf("rank %d of %d: %d of %d checks FAILED (LOOM_ALGO=%s)%s\n", rank, nranks, wrong, done,
                algo ? algo : "", stopped ? ", stopped at a failed call" : "");
    return 1;
  }
  std::printf("rank %d of %d: all %d checks passed (LOOM_ALGO=%s)\n", rank, nranks, done, algo ? algo : "");
  return 0;
}
