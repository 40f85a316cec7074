// NCCL_* -> LOOM_* translation, at the first NCCL call of the process.
#include "compat/nccl/nccl_environment.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/log.h"

extern char** environ;

namespace loom::nccl {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// NCCL's level names are Loom's, plus VERSION (Loom prints its version at INFO) and ABORT.
bool debugLevel(const std::string& value, std::string* out) {
  const std::string v = lower(value);
  if (v == "warn" || v == "info" || v == "trace" || v == "none") {
    *out = v == "none" ? "NONE" : v == "warn" ? "WARN" : v == "info" ? "INFO" : "TRACE";
    return true;
  }
  if (v == "version" || v == "abort") {
    *out = "WARN";
    return true;
  }
  return false;
}

// A list of names, each translated by `name`; "^a,b" keeps its leading '^'. NCCL's
// per-collective form ("allreduce:tree;broadcast:ring") is not translated.
template <typename Translate>
bool nameList(const std::string& value, Translate name, std::string* out) {
  if (value.find(':') != std::string::npos || value.find(';') != std::string::npos) return false;
  std::string rest = value;
  std::string result;
  if (!rest.empty() && rest[0] == '^') {
    result = "^";
    rest.erase(0, 1);
  }
  bool first = true;
  for (const std::string& item : env::splitList(rest)) {
    std::string translated;
    if (!name(lower(item), &translated)) return false;
    if (result.find(translated) != std::string::npos) continue;  // LL and LL128 are both ll
    result += (first ? "" : ",") + translated;
    first = false;
  }
  *out = result;
  return !first;
}

bool algorithm(const std::string& value, std::string* out) {
  return nameList(value, [](const std::string& n, std::string* t) {
    if (n != "ring" && n != "tree") return false;
    *t = n;
    return true;
  }, out);
}

bool protocol(const std::string& value, std::string* out) {
  return nameList(value, [](const std::string& n, std::string* t) {
    if (n == "simple") *t = "simple";
    else if (n == "ll" || n == "ll128") *t = "ll";
    else return false;
    return true;
  }, out);
}

bool sameValue(const std::string& value, std::string* out) {
  *out = value;
  return true;
}

bool shmDisable(const std::string& value, std::string* out) {
  if (value != "1") return false;
  *out = "socket";
  return true;
}

struct Translation {
  const char* nccl;
  const char* loom;
  bool (*translate)(const std::string&, std::string*);
};

const Translation kTranslations[] = {
    {"NCCL_DEBUG", "LOOM_DEBUG", debugLevel},
    {"NCCL_DEBUG_FILE", "LOOM_DEBUG_FILE", sameValue},  // %h and %p as in NCCL
    {"NCCL_SOCKET_IFNAME", "LOOM_SOCKET_IFNAME", sameValue},  // NCCL's syntax
    {"NCCL_ALGO", "LOOM_ALGO", algorithm},
    {"NCCL_PROTO", "LOOM_PROTO", protocol},
    {"NCCL_SHM_DISABLE", "LOOM_TRANSPORTS", shmDisable},
};

void apply() {
  std::vector<std::string> taken;  // logged once the log level is the translated one
  for (const Translation& t : kTranslations) {
    const char* value = std::getenv(t.nccl);
    if (value == nullptr || *value == '\0') continue;
    if (const char* own = std::getenv(t.loom); own != nullptr && *own != '\0') {
      taken.push_back(format("%s=%s ignored: %s=%s is set", t.nccl, value, t.loom, own));
      continue;
    }
    std::string translated;
    if (!t.translate(value, &translated)) {
      taken.push_back(format("%s=%s has no Loom equivalent; ignored", t.nccl, value));
      continue;
    }
    // Before any communicator exists: Loom reads its variables at creation and at the
    // first log line, so the values set here are the ones it reads.
    setenv(t.loom, translated.c_str(), 0);
    taken.push_back(format("%s=%s taken as %s=%s", t.nccl, value, t.loom, translated.c_str()));
  }
  std::string ignored;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "NCCL_", 5) != 0) continue;
    const std::string name(*e, std::strcspn(*e, "="));
    bool known = false;
    for (const Translation& t : kTranslations) known = known || name == t.nccl;
    if (!known) ignored += (ignored.empty() ? "" : ", ") + name;
  }
  for (const std::string& line : taken) LOOM_INFO("NCCL shim: %s", line.c_str());
  if (!ignored.empty()) LOOM_INFO("NCCL shim: ignored (no Loom equivalent): %s", ignored.c_str());
}

}  // namespace

void applyNcclEnvironment() {
  static std::once_flag once;
  std::call_once(once, apply);
}

}  // namespace loom::nccl
