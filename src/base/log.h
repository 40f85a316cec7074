// Env-driven logs (LOOM_DEBUG, LOOM_DEBUG_FILE), one line per call with a
// "host:pid:tid [rank]" prefix. INFO explains decisions; TRACE shows every message.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

namespace loom::log {

enum class Level { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// The process's log sink (one, kept in log.cc); built from LOOM_DEBUG / LOOM_DEBUG_FILE
// at the first log call. Thread-safe.
class Logger {
 public:
  Logger();
  ~Logger();
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  Level level() const { return level_; }
  void vwrite(Level level, const char* fmt, va_list args);

 private:
  Level level_ = Level::kWarn;
  FILE* file_ = nullptr;
  std::string host_;
  std::mutex mutex_;
};

// Whether lines of this level are written (settings are read at the first log call).
bool enabled(Level level);

void write(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Shows `rank` in this thread's log prefix while alive (restores the previous on exit).
class RankScope {
 public:
  explicit RankScope(int rank);
  ~RankScope();
  RankScope(const RankScope&) = delete;
  RankScope& operator=(const RankScope&) = delete;

 private:
  int previous_;
};

}  // namespace loom::log

#define LOOM_LOG_AT(level, ...)                                            \
  do {                                                                     \
    if (::loom::log::enabled(level)) ::loom::log::write(level, __VA_ARGS__); \
  } while (0)
#define LOOM_WARN(...) LOOM_LOG_AT(::loom::log::Level::kWarn, __VA_ARGS__)
#define LOOM_INFO(...) LOOM_LOG_AT(::loom::log::Level::kInfo, __VA_ARGS__)
#define LOOM_TRACE(...) LOOM_LOG_AT(::loom::log::Level::kTrace, __VA_ARGS__)
