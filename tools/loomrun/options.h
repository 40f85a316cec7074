// The command line of loomrun.
#pragma once

#include <string>
#include <vector>

namespace loom::loomrun {

// What one loomrun invocation launches: this node's share of the job's ranks.
struct LaunchOptions {
  int nproc = 0;  // ranks of the whole job, across all nodes
  int nnodes = 1;
  int nodeRank = 0;
  std::string masterAddr;     // always set after parsing (127.0.0.1 on one node)
  int masterPort = 0;         // 0: loomrun picks a free port (one node only)
  double timeoutSeconds = 0;  // 0: no time limit
  bool tagOutput = false;
  std::vector<std::string> command;  // program and its arguments

  // Every node runs the same number of ranks, numbered in node order.
  int localRanks() const { return nproc / nnodes; }
  int firstRank() const { return nodeRank * localRanks(); }
};

enum class ParseOutcome { kRun, kHelp, kUsageError };

struct ParseResult {
  ParseOutcome outcome = ParseOutcome::kUsageError;
  LaunchOptions options;  // complete and consistent when outcome is kRun
  std::string error;      // one line naming the offending option, when kUsageError
};

// Parses the arguments after argv[0]. Options end at "--" or at the first argument that
// is not an option, so the program's own options are never taken for loomrun's.
ParseResult parseOptions(const std::vector<std::string>& args);

// The one-line synopsis printed after a usage error.
const char* usageLine();

// The full --help text.
const char* helpText();

}  // namespace loom::loomrun
