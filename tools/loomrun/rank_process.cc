// Starting one rank's process and describing how it ended (rank_process.h).
#include "rank_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace loom::loomrun {
namespace {

constexpr int kExitCannotRun = 127;

std::vector<char*> cStrings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const std::string& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

// Runs in the forked child. Everything it needs was prepared before the fork; it only makes
// system calls, and reports an exec failure as an errno through `errorPipe`.
[[noreturn]] void execRank(char* const* argv, char* const* envp, const sigset_t& signalMask,
                           pid_t launcher, int stdinFd, int stdoutFd, int stderrFd,
                           int errorPipe) {
  ::setpgid(0, 0);
  // If loomrun is SIGKILLed it cannot stop the ranks; the kernel does it instead.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != launcher) ::_exit(kExitCannotRun);  // loomrun died before the prctl

  // loomrun blocks the signals it waits for and ignores SIGPIPE; both would be inherited.
  ::signal(SIGPIPE, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &signalMask, nullptr);

  ::dup2(stdinFd, STDIN_FILENO);
  if (stdoutFd >= 0) ::dup2(stdoutFd, STDOUT_FILENO);
  if (stderrFd >= 0) ::dup2(stderrFd, STDERR_FILENO);

  ::execvpe(argv[0], argv, envp);
  int error = errno;
  ssize_t ignored = ::write(errorPipe, &error, sizeof error);
  (void)ignored;
  ::_exit(kExitCannotRun);
}

}  // namespace

Status RankProcess::start(const RankSpec& spec, const sigset_t& signalMask,
                          RankProcess* process, RankOutput* output) {
  std::vector<char*> argv = cStrings(spec.argv);
  std::vector<char*> envp = cStrings(spec.env);

  UniqueFd devNull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devNull.valid()) {
    return Status::error(std::string("cannot open /dev/null: ") + std::strerror(errno));
  }
  // Close-on-exec: a successful exec closes it, which the parent reads as end-of-file.
  UniqueFd errorRead, errorWrite;
  LOOMRUN_TRY(makePipe(&errorRead, &errorWrite));
  UniqueFd outWrite, errWrite;
  if (spec.captureOutput) {
    LOOMRUN_TRY(makePipe(&output->out, &outWrite));
    LOOMRUN_TRY(makePipe(&output->err, &errWrite));
    // The supervisor drains these after the rank is gone, when a leftover grandchild may
    // still hold the write end open; a blocking read would then wait for it.
    ::fcntl(output->out.get(), F_SETFL, O_NONBLOCK);
    ::fcntl(output->err.get(), F_SETFL, O_NONBLOCK);
  }

  pid_t launcher = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    return Status::error("cannot start rank " + std::to_string(spec.rank) + ": fork: " +
                         std::strerror(errno));
  }
  if (pid == 0) {
    execRank(argv.data(), envp.data(), signalMask, launcher, devNull.get(), outWrite.get(),
             errWrite.get(), errorWrite.get());
  }

  // Only the child may hold the write ends, or the pipes would never report end-of-file.
  errorWrite.reset();
  outWrite.reset();
  errWrite.reset();

  int execError = 0;
  ssize_t n;
  do {
    n = ::read(errorRead.get(), &execError, sizeof execError);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof execError)) {
    int ignored;
    while (::waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
    }
    return Status::error("cannot run '" + spec.argv[0] + "': " + std::strerror(execError));
  }

  process->rank_ = spec.rank;
  process->pid_ = pid;
  process->running_ = true;
  return Status::ok();
}

void RankProcess::signal(int sig) const {
  if (running_) ::kill(-pid_, sig);
}

std::string signalName(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGVTALRM: return "SIGVTALRM";
    case SIGPROF: return "SIGPROF";
    case SIGSYS: return "SIGSYS";
    default: return std::to_string(sig);  // real-time signals have no fixed name
  }
}

std::string describeWaitStatus(int waitStatus) {
  if (WIFSIGNALED(waitStatus)) {
    std::string text = "was killed by signal " + signalName(WTERMSIG(waitStatus));
    if (WCOREDUMP(waitStatus)) text += " (core dumped)";
    return text;
  }
  return "exited with status " + std::to_string(WEXITSTATUS(waitStatus));
}

int exitCodeOf(int waitStatus) {
  return WIFSIGNALED(waitStatus) ? 128 + WTERMSIG(waitStatus) : WEXITSTATUS(waitStatus);
}

}  // namespace loom::loomrun
