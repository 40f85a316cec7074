// The owner of a file descriptor (unique_fd.h).
#include "unique_fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace loom::loomrun {

Status makePipe(UniqueFd* readEnd, UniqueFd* writeEnd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return Status::error(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  readEnd->reset(fds[0]);
  writeEnd->reset(fds[1]);
  return Status::ok();
}

}  // namespace loom::loomrun
