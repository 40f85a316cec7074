// The variables loomrun sets for each rank (job_environment.h).
#include "job_environment.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "unique_fd.h"

namespace loom::loomrun {
namespace {

constexpr size_t kSecretBytes = 16;

// Every variable loomrun owns; inherited values of these never reach a rank.
constexpr const char* kLauncherVariables[] = {
    "LOOM_RANK",      "LOOM_WORLD_SIZE", "LOOM_LOCAL_RANK",  "LOOM_LOCAL_WORLD_SIZE",
    "LOOM_NODE_RANK", "LOOM_NNODES",     "LOOM_MASTER_ADDR", "LOOM_MASTER_PORT",
    "LOOM_SECRET",
};

bool isLauncherVariable(const char* entry) {
  const char* eq = std::strchr(entry, '=');
  size_t nameLength = eq ? static_cast<size_t>(eq - entry) : std::strlen(entry);
  for (const char* name : kLauncherVariables) {
    if (std::strlen(name) == nameLength && std::strncmp(entry, name, nameLength) == 0) return true;
  }
  return false;
}

}  // namespace

Status generateSecret(std::string* hex) {
  unsigned char bytes[kSecretBytes];
  size_t filled = 0;
  while (filled < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::error(std::string("cannot generate LOOM_SECRET: getrandom: ") +
                           std::strerror(errno));
    }
    filled += static_cast<size_t>(n);
  }
  static const char kDigits[] = "0123456789abcdef";
  hex->clear();
  for (unsigned char byte : bytes) {
    hex->push_back(kDigits[byte >> 4]);
    hex->push_back(kDigits[byte & 0xf]);
  }
  return Status::ok();
}

Status findFreePort(const std::string& addr, int* port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &found);
  if (rc != 0) {
    return Status::error("cannot resolve master address '" + addr + "': " + ::gai_strerror(rc));
  }
  std::string lastError = "no usable address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    UniqueFd sock(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!sock.valid() || ::bind(sock.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      lastError = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
      lastError = std::strerror(errno);
      continue;
    }
    ::freeaddrinfo(found);
    *port = bound.ss_family == AF_INET6
                ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return Status::ok();
  }
  ::freeaddrinfo(found);
  return Status::error("cannot find a free port on " + addr + ": " + lastError +
                       " (pass --master-port)");
}

Status prepareJobEnvironment(const LaunchOptions& options, JobEnvironment* job) {
  job->masterAddr = options.masterAddr;
  job->masterPort = options.masterPort;
  if (job->masterPort == 0) LOOMRUN_TRY(findFreePort(job->masterAddr, &job->masterPort));

  if (const char* preset = std::getenv("LOOM_SECRET")) {
    job->secret = preset;
  } else if (options.nnodes == 1) {
    // One launcher starts every rank, so it can hand all of them the same fresh secret.
    std::string secret;
    LOOMRUN_TRY(generateSecret(&secret));
    job->secret = std::move(secret);
  }
  return Status::ok();
}

std::vector<std::string> rankEnvironment(const JobEnvironment& job, const LaunchOptions& options,
                                         int localRank, const char* const* inherited) {
  std::vector<std::string> env;
  for (const char* const* entry = inherited; *entry != nullptr; ++entry) {
    if (!isLauncherVariable(*entry)) env.emplace_back(*entry);
  }
  auto set = [&env](const char* name, const std::string& value) {
    env.push_back(std::string(name) + "=" + value);
  };
  set("LOOM_RANK", std::to_string(options.firstRank() + localRank));
  set("LOOM_WORLD_SIZE", std::to_string(options.nproc));
  set("LOOM_LOCAL_RANK", std::to_string(localRank));
  set("LOOM_LOCAL_WORLD_SIZE", std::to_string(options.localRanks()));
  set("LOOM_NODE_RANK", std::to_string(options.nodeRank));
  set("LOOM_NNODES", std::to_string(options.nnodes));
  set("LOOM_MASTER_ADDR", job.masterAddr);
  set("LOOM_MASTER_PORT", std::to_string(job.masterPort));
  if (job.secret) set("LOOM_SECRET", *job.secret);
  return env;
}

}  // namespace loom::loomrun
