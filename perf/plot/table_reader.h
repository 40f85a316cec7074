// Reads the tables nccl-tests prints (and loom-perf, and perf/peers, in the same format):
// every line that is not a comment and has nccl-tests' 13 columns is a row.
#pragma once

#include <cstddef>
#include <istream>
#include <string>
#include <vector>

namespace loomplot {

struct TableMode {
  bool measured = false;  // false where the program printed "-"
  double timeUs = 0;
  double algBw = 0;
  double busBw = 0;
};

struct TableRow {
  size_t bytes = 0;
  size_t count = 0;
  std::string type;
  std::string op;
  int root = -1;
  TableMode outOfPlace;
  TableMode inPlace;
};

// The rows of `in`, in order. Lines that are neither comments nor rows are an error naming
// the line, so a truncated or foreign file is not plotted as if it were complete.
bool readTable(std::istream& in, std::vector<TableRow>* rows, std::string* error);

}  // namespace loomplot
