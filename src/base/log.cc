// The log's sink, its settings from LOOM_DEBUG / LOOM_DEBUG_FILE, and the line prefix (log.h).
#include "base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <string>

#include "base/env.h"

namespace loom::log {
namespace {

// The rank shown in this thread's prefix; -1 when the thread works for no communicator.
thread_local int tCurrentRank = -1;

std::string expandPath(std::string path) {
  char host[256] = "";
  ::gethostname(host, sizeof(host) - 1);
  for (size_t pos; (pos = path.find("%h")) != std::string::npos;) path.replace(pos, 2, host);
  for (size_t pos; (pos = path.find("%p")) != std::string::npos;) {
    path.replace(pos, 2, std::to_string(::getpid()));
  }
  return path;
}

// The process's sink, made at the first log call. Statics made after it are destroyed
// before it, so the Registry asks for it first (core/registry.cc).
Logger& sink() {
  static Logger logger;
  return logger;
}

}  // namespace

Logger::Logger() {
  std::string level = env::getOrDefault("LOOM_DEBUG");
  for (char& c : level) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (level == "NONE") level_ = Level::kNone;
  else if (level == "INFO") level_ = Level::kInfo;
  else if (level == "TRACE") level_ = Level::kTrace;
  else level_ = Level::kWarn;

  if (std::optional<std::string> path = env::get("LOOM_DEBUG_FILE")) {
    file_ = std::fopen(expandPath(*path).c_str(), "a");
  }
  if (file_ == nullptr) file_ = stderr;
  char host[64] = "";
  ::gethostname(host, sizeof(host) - 1);
  host_ = host;
}

Logger::~Logger() {
  if (file_ != stderr) std::fclose(file_);
}

void Logger::vwrite(Level level, const char* fmt, va_list args) {
  static const char* const kNames[] = {"", "WARN", "INFO", "TRACE"};
  char body[2048];
  std::vsnprintf(body, sizeof(body), fmt, args);
  char rank[16] = "-";
  if (tCurrentRank >= 0) std::snprintf(rank, sizeof(rank), "%d", tCurrentRank);
  long tid = ::syscall(SYS_gettid);
  std::lock_guard<std::mutex> lock(mutex_);
  std::fprintf(file_, "%s:%d:%ld [%s] LOOM %s %s\n", host_.c_str(), ::getpid(), tid, rank,
               kNames[static_cast<int>(level)], body);
  std::fflush(file_);
}

bool enabled(Level level) {
  return level != Level::kNone && level <= sink().level();
}

void write(Level level, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  sink().vwrite(level, fmt, args);
  va_end(args);
}

RankScope::RankScope(int rank) : previous_(tCurrentRank) { tCurrentRank = rank; }
RankScope::~RankScope() { tCurrentRank = previous_; }

}  // namespace loom::log
