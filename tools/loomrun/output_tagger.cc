// Prefixing each rank's output lines with its rank (output_tagger.h).
#include "output_tagger.h"

#include <unistd.h>

#include <cerrno>

namespace loom::loomrun {
namespace {

// A rank that never prints a newline must not grow loomrun's memory without bound; such a
// line is cut into pieces of this size, each tagged.
constexpr size_t kMaxLine = 64 * 1024;

// Errors are dropped: a closed stdout (loomrun ... | head) must not stop the job, and
// SIGPIPE is ignored in loomrun for the same reason.
void writeAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

LineTagger::LineTagger(int rank, int destinationFd)
    : prefix_("[" + std::to_string(rank) + "] "), destinationFd_(destinationFd) {}

void LineTagger::append(const char* data, size_t size) {
  pending_.append(data, size);
  size_t lastNewline = pending_.rfind('\n');
  if (lastNewline != std::string::npos) emit(lastNewline + 1);
  while (pending_.size() >= kMaxLine) emit(kMaxLine);
}

void LineTagger::finish() {
  if (!pending_.empty()) emit(pending_.size());
}

void LineTagger::emit(size_t end) {
  // One buffer for all the lines in pending_[0, end), so they cost one write.
  std::string out;
  size_t start = 0;
  while (start < end) {
    size_t newline = pending_.find('\n', start);
    size_t lineEnd = (newline == std::string::npos || newline >= end) ? end : newline;
    out += prefix_;
    out.append(pending_, start, lineEnd - start);
    out += '\n';
    start = lineEnd + 1;
  }
  writeAll(destinationFd_, out);
  pending_.erase(0, end);
}

}  // namespace loom::loomrun
