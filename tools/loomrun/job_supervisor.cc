// Running this node's ranks to the end, and stopping them on a failure (job_supervisor.h).
#include "job_supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "output_tagger.h"
#include "rank_process.h"
#include "unique_fd.h"

extern char** environ;

namespace loom::loomrun {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::seconds kStopGrace{3};
constexpr int kExitInternalError = 1;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotRun = 127;
constexpr size_t kReadChunk = 64 * 1024;
// A pipe holds at most 1 MiB; reading 16 MiB once the ranks are gone bounds the final drain
// even if a leftover grandchild keeps writing.
constexpr int kMaxDrainReads = 256;

// One captured output stream of one rank (--tag-output).
struct CapturedStream {
  UniqueFd fd;
  LineTagger tagger;
};

// The event loop. Everything it waits for arrives through one poll(): child exits and
// loomrun's own signals through a signalfd, output through the ranks' pipes, and the
// deadlines (--timeout, the SIGKILL grace) as poll's timeout.
//
//   running --(rank fails | timeout)--> stopping: SIGTERM all --(3 s)--> SIGKILL all
//
// A signal sent to loomrun is passed on and does not by itself start the stop: the ranks
// decide how to react to it. A second one kills them.
class JobSupervisor {
 public:
  JobSupervisor(const LaunchOptions& options, const JobEnvironment& job)
      : options_(options), job_(job) {}

  int run() {
    Status ready = watchSignals();
    if (!ready.isOk()) {
      std::fprintf(stderr, "loomrun: %s\n", ready.message().c_str());
      return kExitInternalError;
    }
    if (options_.timeoutSeconds > 0) {
      timeoutAt_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.timeoutSeconds));
    }
    startRanks();
    waitForRanks();
    drainOutput();
    if (exitCode_) return *exitCode_;
    return interruptSignal_ != 0 ? 128 + interruptSignal_ : 0;
  }

 private:
  Status watchSignals() {
    sigset_t watched;
    sigemptyset(&watched);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&watched, sig);
    // Blocked for good: unblocking later would deliver a pending SIGTERM the default way
    // and kill loomrun before it reports the exit status.
    if (::sigprocmask(SIG_BLOCK, &watched, &originalMask_) != 0) {
      return Status::error(std::string("sigprocmask: ") + std::strerror(errno));
    }
    signalFd_.reset(::signalfd(-1, &watched, SFD_NONBLOCK | SFD_CLOEXEC));
    if (!signalFd_.valid()) return Status::error(std::string("signalfd: ") + std::strerror(errno));
    // Output to a closed pipe (loomrun ... | head) must not kill the launcher.
    ::signal(SIGPIPE, SIG_IGN);
    return Status::ok();
  }

  void startRanks() {
    for (int local = 0; local < options_.localRanks(); ++local) {
      RankSpec spec;
      spec.rank = options_.firstRank() + local;
      spec.argv = options_.command;
      spec.env = rankEnvironment(job_, options_, local, environ);
      spec.captureOutput = options_.tagOutput;
      RankProcess process;
      RankOutput output;
      Status started = RankProcess::start(spec, originalMask_, &process, &output);
      if (!started.isOk()) {
        // Every rank runs the same program, so the others would fail the same way.
        std::fprintf(stderr, "loomrun: %s\n", started.message().c_str());
        exitCode_ = kExitCannotRun;
        beginStop();
        return;
      }
      ranks_.push_back(process);
      if (options_.tagOutput) {
        streams_.push_back({std::move(output.out), LineTagger(spec.rank, STDOUT_FILENO)});
        streams_.push_back({std::move(output.err), LineTagger(spec.rank, STDERR_FILENO)});
      }
    }
  }

  void waitForRanks() {
    while (anyRunning()) {
      std::vector<pollfd> fds{{signalFd_.get(), POLLIN, 0}};
      std::vector<CapturedStream*> polled;
      for (CapturedStream& stream : streams_) {
        if (!stream.fd.valid()) continue;
        fds.push_back({stream.fd.get(), POLLIN, 0});
        polled.push_back(&stream);
      }
      if (::poll(fds.data(), fds.size(), pollTimeoutMs()) < 0 && errno != EINTR) {
        std::fprintf(stderr, "loomrun: poll: %s; killing the ranks\n", std::strerror(errno));
        killAndReapAll();
        return;
      }
      if (fds[0].revents != 0) handleSignals();
      for (size_t i = 0; i < polled.size(); ++i) {
        if (fds[i + 1].revents != 0) readOutput(*polled[i]);
      }
      checkDeadlines();
    }
  }

  int pollTimeoutMs() const {
    std::optional<Clock::time_point> next = killAt_;
    if (!stopping_ && timeoutAt_ && (!next || *timeoutAt_ < *next)) next = timeoutAt_;
    if (!next) return -1;
    auto left = std::chrono::duration<double, std::milli>(*next - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(std::ceil(left));
  }

  void handleSignals() {
    signalfd_siginfo info;
    while (::read(signalFd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo != SIGCHLD) onInterrupt(static_cast<int>(info.ssi_signo));
    }
    // SIGCHLDs coalesce, so one may stand for several exits: reap until none is left.
    int status;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (RankProcess& rank : ranks_) {
        if (rank.pid() == pid && rank.running()) {
          rank.markReaped();
          onRankExit(rank, status);
        }
      }
    }
  }

  void onRankExit(const RankProcess& rank, int status) {
    // Only the first failure is reported; the exits that follow are mostly our own SIGTERM.
    if (exitCodeOf(status) == 0 || exitCode_) return;
    std::fprintf(stderr, "loomrun: rank %d %s\n", rank.rank(), describeWaitStatus(status).c_str());
    exitCode_ = exitCodeOf(status);
    beginStop();
  }

  void onInterrupt(int sig) {
    if (interruptSignal_ == 0) {
      interruptSignal_ = sig;
      std::fprintf(stderr, "loomrun: received %s; passing it on to the ranks\n",
                   signalName(sig).c_str());
      signalRanks(sig);
    } else {
      std::fprintf(stderr, "loomrun: received %s again; killing the ranks\n",
                   signalName(sig).c_str());
      signalRanks(SIGKILL);
    }
  }

  void checkDeadlines() {
    Clock::time_point now = Clock::now();
    if (!stopping_ && timeoutAt_ && now >= *timeoutAt_) {
      std::fprintf(stderr, "loomrun: timeout after %g s; ranks still running: %s\n",
                   options_.timeoutSeconds, runningRanks().c_str());
      exitCode_ = kExitTimeout;
      beginStop();
    }
    if (killAt_ && now >= *killAt_) {
      killAt_.reset();
      signalRanks(SIGKILL);
    }
  }

  void beginStop() {
    if (stopping_) return;
    stopping_ = true;
    signalRanks(SIGTERM);
    killAt_ = Clock::now() + kStopGrace;
  }

  void signalRanks(int sig) {
    for (const RankProcess& rank : ranks_) rank.signal(sig);
  }

  // Last resort when the event loop itself fails: nothing may outlive loomrun.
  void killAndReapAll() {
    signalRanks(SIGKILL);
    for (RankProcess& rank : ranks_) {
      int status;
      while (rank.running() && ::waitpid(rank.pid(), &status, 0) < 0 && errno == EINTR) {
      }
      rank.markReaped();
    }
    if (!exitCode_) exitCode_ = kExitInternalError;
  }

  bool anyRunning() const {
    for (const RankProcess& rank : ranks_) {
      if (rank.running()) return true;
    }
    return false;
  }

  std::string runningRanks() const {
    std::string list;
    for (const RankProcess& rank : ranks_) {
      if (!rank.running()) continue;
      if (!list.empty()) list += ',';
      list += std::to_string(rank.rank());
    }
    return list;
  }

  // Returns whether it got data; at end of file or on an error it closes the stream.
  bool readOutput(CapturedStream& stream) {
    char buffer[kReadChunk];
    ssize_t n = ::read(stream.fd.get(), buffer, sizeof buffer);
    if (n > 0) {
      stream.tagger.append(buffer, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    stream.tagger.finish();
    stream.fd.reset();
    return false;
  }

  // Once the ranks are gone, takes what is left in the pipes without waiting for end of
  // file: a grandchild the rank left behind may hold a write end open indefinitely.
  void drainOutput() {
    for (CapturedStream& stream : streams_) {
      if (!stream.fd.valid()) continue;
      for (int reads = 0; reads < kMaxDrainReads && readOutput(stream); ++reads) {
      }
      stream.tagger.finish();
      stream.fd.reset();
    }
  }

  const LaunchOptions& options_;
  const JobEnvironment& job_;
  sigset_t originalMask_;
  UniqueFd signalFd_;
  std::vector<RankProcess> ranks_;
  std::vector<CapturedStream> streams_;
  std::optional<Clock::time_point> timeoutAt_;
  std::optional<Clock::time_point> killAt_;
  bool stopping_ = false;
  int interruptSignal_ = 0;
  std::optional<int> exitCode_;
};

}  // namespace

int runJob(const LaunchOptions& options, const JobEnvironment& job) {
  return JobSupervisor(options, job).run();
}

}  // namespace loom::loomrun
