// --tag-output: each rank's output, line by line, with the rank in front.
#pragma once

#include <cstddef>
#include <string>

namespace loom::loomrun {

// Copies what one rank writes on one stream to one of loomrun's own streams, a whole line
// at a time with "[RANK] " in front. Only loomrun's one thread writes to its streams, and
// only whole lines, so the lines of different ranks never mix mid-line.
class LineTagger {
 public:
  LineTagger(int rank, int destinationFd);

  // Writes out every line completed by `data`; keeps the unfinished rest.
  void append(const char* data, size_t size);

  // Writes out the unfinished last line, if any, ending it with a newline so that the
  // next line starts at the left margin.
  void finish();

 private:
  void emit(size_t lineEnd);

  std::string prefix_;
  int destinationFd_;
  std::string pending_;
};

}  // namespace loom::loomrun
