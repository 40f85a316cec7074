// Parsing and checking loomrun's command line (options.h).
#include "options.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>

namespace loom::loomrun {
namespace {

constexpr char kDefaultMasterAddr[] = "127.0.0.1";

// Whole-string integer parse: "4x", "" and out-of-range values are all rejected.
bool parseInt(const std::string& text, long min, long max, int* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) return false;
  *out = static_cast<int>(value);
  return true;
}

bool parseSeconds(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(value) || value <= 0) return false;
  *out = value;
  return true;
}

// Stores the value of one option that takes a value; returns the error message, or "".
std::string applyValue(const std::string& name, const std::string& value, LaunchOptions* o) {
  if (name == "-n" || name == "--nproc") {
    if (!parseInt(value, 1, INT_MAX, &o->nproc)) {
      return name + " needs a positive number of ranks, got '" + value + "'";
    }
  } else if (name == "--nnodes") {
    if (!parseInt(value, 1, INT_MAX, &o->nnodes)) {
      return "--nnodes needs a positive number of nodes, got '" + value + "'";
    }
  } else if (name == "--node-rank") {
    if (!parseInt(value, 0, INT_MAX, &o->nodeRank)) {
      return "--node-rank needs a node index >= 0, got '" + value + "'";
    }
  } else if (name == "--master-addr") {
    if (value.empty()) return "--master-addr needs an address, got ''";
    o->masterAddr = value;
  } else if (name == "--master-port") {
    if (!parseInt(value, 1, 65535, &o->masterPort)) {
      return "--master-port needs a port in 1..65535, got '" + value + "'";
    }
  } else if (name == "--timeout") {
    if (!parseSeconds(value, &o->timeoutSeconds)) {
      return "--timeout needs a positive number of seconds, got '" + value + "'";
    }
  }
  return "";
}

bool takesValue(const std::string& name) {
  return name == "-n" || name == "--nproc" || name == "--nnodes" || name == "--node-rank" ||
         name == "--master-addr" || name == "--master-port" || name == "--timeout";
}

// The checks that involve more than one option.
std::string validate(LaunchOptions* o) {
  if (o->nproc == 0) return "-n/--nproc is required: the total number of ranks of the job";
  if (o->nodeRank >= o->nnodes) {
    return "--node-rank " + std::to_string(o->nodeRank) + " is out of range for --nnodes " +
           std::to_string(o->nnodes) + " (0.." + std::to_string(o->nnodes - 1) + ")";
  }
  if (o->nproc % o->nnodes != 0) {
    return "-n " + std::to_string(o->nproc) + " is not divisible by --nnodes " +
           std::to_string(o->nnodes) + ": every node runs the same number of ranks";
  }
  if (o->nnodes > 1) {
    // Every node must name the same rendezvous point, so there is nothing to default to.
    if (o->masterAddr.empty()) {
      return "--master-addr is required with --nnodes > 1: the address of node 0, where "
             "rank 0 listens";
    }
    if (o->masterPort == 0) {
      return "--master-port is required with --nnodes > 1: the same port on every node";
    }
  }
  if (o->masterAddr.empty()) o->masterAddr = kDefaultMasterAddr;
  return "";
}

ParseResult usageError(std::string message) {
  ParseResult result;
  result.outcome = ParseOutcome::kUsageError;
  result.error = std::move(message);
  return result;
}

}  // namespace

ParseResult parseOptions(const std::vector<std::string>& args) {
  ParseResult result;
  LaunchOptions& options = result.options;
  size_t i = 0;
  while (i < args.size()) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program starts here
    if (arg == "-h" || arg == "--help") {
      result.outcome = ParseOutcome::kHelp;
      return result;
    }
    if (arg == "--tag-output") {
      options.tagOutput = true;
      ++i;
      continue;
    }

    // Accepted spellings: "--name value", "--name=value", "-n value", "-n4".
    std::string name = arg;
    std::string value;
    bool hasInlineValue = false;
    if (arg.compare(0, 2, "--") == 0) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        hasInlineValue = true;
      }
    } else if (arg.size() > 2) {
      name = arg.substr(0, 2);
      value = arg.substr(2);
      hasInlineValue = true;
    }
    if (!takesValue(name)) return usageError("unknown option '" + arg + "'");
    if (!hasInlineValue) {
      if (i + 1 >= args.size()) return usageError("option " + name + " needs a value");
      value = args[++i];
    }
    std::string error = applyValue(name, value, &options);
    if (!error.empty()) return usageError(error);
    ++i;
  }

  options.command.assign(args.begin() + static_cast<long>(i), args.end());
  if (options.command.empty()) return usageError("no program to run was given");
  std::string error = validate(&options);
  if (!error.empty()) return usageError(error);
  result.outcome = ParseOutcome::kRun;
  return result;
}

const char* usageLine() { return "usage: loomrun -n N [options] [--] program [args...]"; }

const char* helpText() {
  return R"(usage: loomrun -n N [options] [--] program [args...]

Starts this node's ranks of a Loom job, gives each its LOOM_* environment, and
waits for them. If one rank fails, the others are stopped.

options:
  -n, --nproc N        ranks of the whole job, across all nodes (required)
      --nnodes M       number of nodes (default 1); N must be divisible by M
      --node-rank K    index of this node, 0..M-1 (default 0); it runs the
                       global ranks K*N/M .. (K+1)*N/M-1
      --master-addr A  address of node 0, where rank 0 listens
                       (default 127.0.0.1; required when M > 1)
      --master-port P  port rank 0 listens on
                       (default: a free port; required when M > 1)
      --timeout S      stop the job and exit 124 if it runs longer than S seconds
      --tag-output     prefix every line the ranks print with "[RANK] "
  -h, --help           print this help

Each rank gets LOOM_RANK, LOOM_WORLD_SIZE, LOOM_LOCAL_RANK, LOOM_LOCAL_WORLD_SIZE,
LOOM_NODE_RANK, LOOM_NNODES, LOOM_MASTER_ADDR, LOOM_MASTER_PORT and LOOM_SECRET
(kept if already set; generated on one node; on several nodes export the same
random LOOM_SECRET on every node).

exit status: 0 when every rank exits 0; else the first failing rank's status
(128+N for signal N); 124 on --timeout; 127 if the program cannot be started;
2 for a usage error.
)";
}

}  // namespace loom::loomrun
