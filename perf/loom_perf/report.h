// What global rank 0 prints: nccl-tests' header, table and footer on stdout, a progress
// line on stderr when it is a terminal, and the same rows as JSON, CSV and an SVG plot.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "options.h"

namespace loomperf {

struct ModeResult {
  bool measured = false;  // false: the collective has no such mode (printed as "-")
  double timeUs = 0;
  double algBw = 0;  // GB/s, GB = 1e9
  double busBw = 0;
  bool checked = false;  // false: #wrong is N/A (-c 0)
  long long wrong = 0;   // summed over ranks
};

struct Row {
  std::string algorithm;  // --algo's value, "" for Loom's own choice
  size_t bytes = 0;       // nccl-tests' size column: the larger of the send and receive buffers
  size_t count = 0;       // the count argument of the call
  std::string type;
  std::string op;  // "none" where the collective takes none
  int root = -1;   // -1 where it takes none
  int iters = 0;   // timed calls (more than -n when --min-time asked for more)
  ModeResult outOfPlace;
  ModeResult inPlace;
};

class Report {
 public:
  Report(const Options& options, int nranks);

  // "# nThread ..." and one line per rank (given in rank order).
  void printHeader(const std::vector<std::string>& rankLines);
  // Column headings; `algorithm` is also printed when --algo named one.
  void beginTable(const std::string& algorithm);
  // Before each row: "[k/n] ..." on stderr, overwritten in place, when stderr is a terminal.
  void progress(const std::string& what, size_t bytes);
  void addRow(const Row& row);
  // Footer; then the JSON, CSV and plot files asked for. Returns the total of #wrong (and
  // exits through fatal() when a file cannot be written).
  long long finish();

 private:
  const Options& options_;
  int nranks_;
  std::vector<Row> rows_;
  size_t rowsExpected_;
  bool terminal_;
  bool progressShown_ = false;
};

}  // namespace loomperf
