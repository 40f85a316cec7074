// loomrun: starts this node's ranks of a Loom job. See docs/LOOMRUN.md.

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "job_environment.h"
#include "job_supervisor.h"
#include "options.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitInternalError = 1;

// With stdout or stderr closed, the next pipe or /dev/null loomrun opens would take fd 1
// or 2, and a rank would write its output into it.
void openMissingStandardFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace loom::loomrun;
  openMissingStandardFds();

  ParseResult parsed = parseOptions(std::vector<std::string>(argv + 1, argv + argc));
  if (parsed.outcome == ParseOutcome::kHelp) {
    std::fputs(helpText(), stdout);
    return 0;
  }
  if (parsed.outcome == ParseOutcome::kUsageError) {
    std::fprintf(stderr, "loomrun: %s\n%s\nRun 'loomrun --help' for all options.\n",
                 parsed.error.c_str(), usageLine());
    return kExitUsage;
  }
  const LaunchOptions& options = parsed.options;

  JobEnvironment job;
  Status prepared = prepareJobEnvironment(options, &job);
  if (!prepared.isOk()) {
    std::fprintf(stderr, "loomrun: %s\n", prepared.message().c_str());
    return kExitInternalError;
  }
  if (!job.secret) {
    std::fprintf(stderr,
                 "loomrun: warning: LOOM_SECRET is not set; the ranks will derive the secret "
                 "from the master address, which authenticates nothing. Export the same random "
                 "LOOM_SECRET (32 hex digits) on every node, e.g. from "
                 "`od -An -tx1 -N16 /dev/urandom | tr -d ' \\n'`.\n");
  }
  return runJob(options, job);
}
