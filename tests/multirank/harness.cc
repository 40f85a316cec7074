#include "multirank/harness.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace loomtest {

ScopedEnv& ScopedEnv::set(const char* name, const std::string& value) {
  const char* old = std::getenv(name);
  saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
  if (value.empty()) {
    ::unsetenv(name);
  } else {
    ::setenv(name, value.c_str(), 1);
  }
  return *this;
}

ScopedEnv::~ScopedEnv() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->second) {
      ::setenv(it->first, it->second->c_str(), 1);
    } else {
      ::unsetenv(it->first);
    }
  }
}

ScopedFile::ScopedFile(const std::string& contents) {
  char dir[] = "/tmp/loom-test-XXXXXX";
  if (::mkdtemp(dir) == nullptr) {
    ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
    return;
  }
  dir_ = dir;
  path_ = dir_ + "/file";
  FILE* file = std::fopen(path_.c_str(), "w");
  const bool written = file != nullptr && std::fputs(contents.c_str(), file) >= 0;
  if (file == nullptr || std::fclose(file) != 0 || !written) ADD_FAILURE() << "cannot write " << path_;
}

ScopedFile::~ScopedFile() {
  if (dir_.empty()) return;
  std::remove(path_.c_str());
  ::rmdir(dir_.c_str());
}

namespace {

bool writeAll(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool readAll(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::read(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

// Waits for every child; kills the rest when the deadline passes. Reports each failure.
void reapChildren(const std::vector<pid_t>& pids, int deadlineMs) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadlineMs);
  std::vector<bool> done(pids.size(), false);
  size_t remaining = pids.size();
  while (remaining > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      pid_t r = ::waitpid(pids[i], &status, WNOHANG);
      if (r == 0) continue;
      done[i] = true;
      --remaining;
      if (r < 0) {
        ADD_FAILURE() << "rank " << i << ": waitpid failed";
      } else if (WIFSIGNALED(status)) {
        ADD_FAILURE() << "rank " << i << " was killed by signal " << WTERMSIG(status);
      } else if (WEXITSTATUS(status) != 0) {
        ADD_FAILURE() << "rank " << i << " failed (exit status " << WEXITSTATUS(status)
                      << "); its messages are above";
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
        ADD_FAILURE() << "rank " << i << " did not finish within " << deadlineMs << " ms (killed)";
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

loomConfig_t configFor(const RankOptions& options) {
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = options.timeoutMs;
  config.initTimeoutMs = options.initTimeoutMs;
  config.device = options.device;
  return config;
}

}  // namespace

std::string modeName(Mode mode) { return mode == Mode::kThreads ? "threads" : "processes"; }

std::string debugLogPath() {
  const char* pattern = std::getenv("LOOM_DEBUG_FILE");
  if (pattern == nullptr) return "";
  std::string path = pattern;
  const size_t at = path.find("%p");
  if (at != std::string::npos) path.replace(at, 2, std::to_string(::getpid()));
  return path;
}

void runProcesses(int nranks, const std::function<void(int)>& body, int deadlineMs) {
  std::fflush(nullptr);  // or buffered output would be printed again by every child
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      ADD_FAILURE() << "fork failed";
      break;
    }
    if (pid == 0) {
      body(r);
      std::fflush(nullptr);
      // _exit: the child must not run the parent's atexit handlers or gtest's reporting.
      ::_exit(testing::Test::HasFailure() ? 1 : 0);
    }
    pids.push_back(pid);
  }
  reapChildren(pids, deadlineMs);
}

void runRanks(int nranks, Mode mode, const std::function<void(loomComm_t, int)>& body,
              const RankOptions& options) {
  if (mode == Mode::kThreads) {
    ASSERT_FALSE(options.beforeInit) << "RankOptions::beforeInit needs ranks as processes";
    // loomCommInitAll takes no config: the same deadlines come through the environment.
    ::setenv("LOOM_TIMEOUT_MS", std::to_string(options.timeoutMs).c_str(), 1);
    ::setenv("LOOM_INIT_TIMEOUT_MS", std::to_string(options.initTimeoutMs).c_str(), 1);
    std::vector<loomComm_t> comms(static_cast<size_t>(nranks), nullptr);
    std::vector<int> devices(static_cast<size_t>(nranks), options.device);
    LOOM_ASSERT_OK(loomCommInitAll(comms.data(), nranks, options.device >= 0 ? devices.data() : nullptr), nullptr);
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r) {
      threads.emplace_back([&, r] { body(comms[static_cast<size_t>(r)], r); });
    }
    for (std::thread& t : threads) t.join();
    for (loomComm_t c : comms) LOOM_EXPECT_OK(loomCommDestroy(c), nullptr);
    return;
  }

  // Rank 0 makes the id (its root runs in rank 0's process) and the parent relays it.
  std::vector<int> toChild(static_cast<size_t>(nranks), -1);
  int fromRank0[2];
  ASSERT_EQ(::pipe(fromRank0), 0);
  std::vector<int> childEnds(static_cast<size_t>(nranks), -1);
  for (int r = 0; r < nranks; ++r) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    childEnds[static_cast<size_t>(r)] = p[0];
    toChild[static_cast<size_t>(r)] = p[1];
  }
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      // Keep only this rank's ends, so a dead rank 0 shows as end-of-file, not a hang.
      if (r != 0) ::close(fromRank0[1]);
      ::close(fromRank0[0]);
      for (int other = 0; other < nranks; ++other) {
        ::close(toChild[static_cast<size_t>(other)]);
        if (other != r) ::close(childEnds[static_cast<size_t>(other)]);
      }
      if (options.beforeInit) options.beforeInit(r);
      loomUniqueId id;
      if (r == 0) {
        if (loomGetUniqueId(&id) != loomSuccess) {
          std::fprintf(stderr, "rank 0: loomGetUniqueId: %s\n", loomGetLastError(nullptr));
          ::_exit(3);
        }
        writeAll(fromRank0[1], &id, sizeof(id));
      } else if (!readAll(childEnds[static_cast<size_t>(r)], &id, sizeof(id))) {
        std::fprintf(stderr, "rank %d: no unique id from rank 0\n", r);
        ::_exit(3);
      }
      loomConfig_t config = configFor(options);
      loomComm_t comm = nullptr;
      loomResult_t result = loomCommInitRankConfig(&comm, nranks, id, r, &config);
      if (result != loomSuccess) {
        std::fprintf(stderr, "rank %d: loomCommInitRankConfig: %s: %s\n", r,
                     loomGetErrorString(result), loomGetLastError(nullptr));
        ::_exit(4);
      }
      body(comm, r);
      loomResult_t destroyed = loomCommDestroy(comm);
      std::fflush(nullptr);
      ::_exit(testing::Test::HasFailure() || destroyed != loomSuccess ? 1 : 0);
    }
    pids.push_back(pid);
  }
  ::close(fromRank0[1]);
  for (int r = 0; r < nranks; ++r) ::close(childEnds[static_cast<size_t>(r)]);
  loomUniqueId id;
  if (readAll(fromRank0[0], &id, sizeof(id))) {
    for (int r = 1; r < nranks; ++r) writeAll(toChild[static_cast<size_t>(r)], &id, sizeof(id));
  }
  for (int r = 0; r < nranks; ++r) ::close(toChild[static_cast<size_t>(r)]);
  ::close(fromRank0[0]);
  reapChildren(pids, options.deadlineMs);
}

}  // namespace loomtest
