#include "common/free_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>

namespace loomtest {
namespace {

// Whether port (0: any) binds on 127.0.0.1 now; the port bound in *bound.
bool bindsNow(int port, int* bound) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (ok) *bound = ntohs(addr.sin_port);
  return ok;
}

// The lowest port the kernel gives outgoing connections (Linux's default when unreadable).
int ephemeralLow() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  range >> low;
  return low;
}

}  // namespace

int freePort(int count) {
  constexpr int kLowest = 10000;
  const int high = ephemeralLow() - count;
  if (high > kLowest) {
    std::mt19937 pick{std::random_device{}()};
    std::uniform_int_distribution<int> ports(kLowest, high);
    for (int tries = 0; tries < 200; ++tries) {
      const int first = ports(pick);
      int k = 0, bound = 0;
      while (k < count && bindsNow(first + k, &bound)) ++k;
      if (k == count) return first;
    }
  }
  // A host whose ephemeral range starts low: whatever the kernel hands out.
  int bound = 0;
  return count == 1 && bindsNow(0, &bound) ? bound : 0;
}

}  // namespace loomtest
