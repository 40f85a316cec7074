// Starting one rank and describing how it ended.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "status.h"
#include "unique_fd.h"

namespace loom::loomrun {

// What to run as one rank.
struct RankSpec {
  int rank = 0;                   // global rank, for messages
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::vector<std::string> env;   // the complete environment, "NAME=value"
  bool captureOutput = false;     // stdout/stderr into pipes (--tag-output)
};

// The read ends of a rank's output pipes; invalid when output is not captured.
struct RankOutput {
  UniqueFd out;
  UniqueFd err;
};

// One started rank. It leads a process group of its own: stopping the rank stops what it
// started too (a shell wrapper's children, say), and the terminal's Ctrl-C reaches it only
// through loomrun, which forwards it exactly once. Its stdin is /dev/null: several ranks
// reading one stream would split it at random.
class RankProcess {
 public:
  // Forks and execs, and returns once the program runs or has failed to start; on failure
  // the message is "cannot run 'prog': <reason>" and the child has already been reaped.
  // The child runs with `signalMask`, the mask loomrun itself was started with.
  static Status start(const RankSpec& spec, const sigset_t& signalMask, RankProcess* process,
                      RankOutput* output);

  int rank() const { return rank_; }
  pid_t pid() const { return pid_; }
  bool running() const { return running_; }

  // Sends `sig` to the rank's process group. Does nothing once the rank has been reaped, as
  // its pid and group id may then belong to someone else.
  void signal(int sig) const;
  void markReaped() { running_ = false; }

 private:
  int rank_ = -1;
  pid_t pid_ = -1;
  bool running_ = false;
};

// "SIGTERM", or just the number ("40") for signals without a classic name.
std::string signalName(int sig);

// How a process ended, as read by waitpid: "exited with status 3",
// "was killed by signal SIGSEGV (core dumped)".
std::string describeWaitStatus(int waitStatus);

// The shell's convention: the exit status, or 128 + the signal number.
int exitCodeOf(int waitStatus);

}  // namespace loom::loomrun
