#include "report.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdlib>
#include <fstream>
#include <map>

#include "collectives.h"
#include "fatal.h"
#include "plot/svg_plot.h"

namespace loomperf {
namespace {

// nccl-tests' number format: the most decimals that fit the column.
std::string fit(double value, int width) {
  char text[64];
  for (const char* format : {"%*.2f", "%*.1f", "%*.0f"}) {
    if (std::snprintf(text, sizeof text, format, width, value) <= width) return text;
  }
  std::snprintf(text, sizeof text, width >= 7 ? "%*.1e" : "%*.0e", width, value);
  return text;
}

std::string modeColumns(const ModeResult& m) {
  char text[96];
  if (!m.measured) {
    std::snprintf(text, sizeof text, "  %7s  %6s  %6s  %6s", "-", "-", "-", "-");
  } else if (!m.checked) {
    std::snprintf(text, sizeof text, "  %7s  %6s  %6s    N/A", fit(m.timeUs, 7).c_str(),
                  fit(m.algBw, 6).c_str(), fit(m.busBw, 6).c_str());
  } else {
    std::snprintf(text, sizeof text, "  %7s  %6s  %6s  %6g", fit(m.timeUs, 7).c_str(),
                  fit(m.algBw, 6).c_str(), fit(m.busBw, 6).c_str(), static_cast<double>(m.wrong));
  }
  return text;
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string number(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

std::string jsonMode(const ModeResult& m) {
  if (!m.measured) return "null";
  return "{\"time\": " + number(m.timeUs) + ", \"alg_bw\": " + number(m.algBw) + ", \"bus_bw\": " +
         number(m.busBw) + ", \"wrong\": " + (m.checked ? std::to_string(m.wrong) : "null") + "}";
}

std::string csvMode(const ModeResult& m) {
  if (!m.measured) return ",,,";
  return number(m.timeUs) + "," + number(m.algBw) + "," + number(m.busBw) + "," +
         (m.checked ? std::to_string(m.wrong) : "");
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) fatal("cannot write %s", path.c_str());
}

}  // namespace

Report::Report(const Options& options, int nranks)
    : options_(options), nranks_(nranks), terminal_(isatty(STDERR_FILENO) == 1) {
  size_t perAlgorithm = sweepSizes(options).size() * options.types.size();
  if (takesOp(options.collective)) perAlgorithm *= options.ops.size();
  if (takesRoot(options.collective) && options.root == -1) perAlgorithm *= static_cast<size_t>(nranks);
  rowsExpected_ = perAlgorithm * std::max<size_t>(1, options.algorithms.size()) *
                  static_cast<size_t>(options.runCycles);
}

void Report::printHeader(const std::vector<std::string>& rankLines) {
  const Options& o = options_;
  const char* transports = std::getenv("LOOM_TRANSPORTS");
  std::printf("# loom-perf, Loom %d.%d.%d, nccl-tests' output format\n", LOOM_MAJOR, LOOM_MINOR, LOOM_PATCH);
  std::printf("# Collective test starting: %s\n", o.program.c_str());
  std::printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
              "agg iters: %d validation: %d graph: %d\n",
              o.threads, o.ranksPerThread, o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : o.stepBytes,
              o.stepFactor > 1 ? "factor" : "bytes", o.warmupIters, o.iters, o.aggIters, o.check, o.graphLaunches);
  const char* memory = o.cuda ? "device memory, a non-blocking CUDA stream per rank"
                       : o.nullStream ? "host memory, NULL stream"
                                      : "host memory, a host stream per rank";
  std::printf("# Loom: %d ranks, %s, LOOM_TRANSPORTS=%s", nranks_, memory, transports ? transports : "(default)");
  if (o.minTime > 0) std::printf(", timed loops of at least %g s", o.minTime);
  std::printf("\n");
  if (o.blocking) std::printf("# Blocking Enabled: wait for completion after each call\n");
  if (!hasInPlace(o.collective))
    std::printf("# in-place: none (Loom defines no in-place %s), printed as -\n", collectiveName(o.collective));
  std::printf("#\n# Using devices\n");
  for (const std::string& line : rankLines) std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void Report::beginTable(const std::string& algorithm) {
  std::printf("#\n");
  if (algorithm == kTunedAlgorithm) {
    std::printf("# Algorithm: tuned (Loom's choice per call)\n");
  } else if (!algorithm.empty()) {
    std::printf("# Algorithm: %s (LOOM_ALGO=%s=%s)\n", algorithm.c_str(), collectiveName(options_.collective),
                algorithm.c_str());
  }
  std::printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "",
              "", "", "", "");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "size", "count", "type",
              "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "(B)", "(elements)", "",
              "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

void Report::progress(const std::string& what, size_t bytes) {
  if (!terminal_) return;
  char line[160];
  if (options_.runCycles == 0) {
    std::snprintf(line, sizeof line, "\r[%zu] %s %s %zu B", rows_.size() + 1,
                  collectiveName(options_.collective), what.c_str(), bytes);
  } else {
    std::snprintf(line, sizeof line, "\r[%zu/%zu] %s %s %zu B", rows_.size() + 1, rowsExpected_,
                  collectiveName(options_.collective), what.c_str(), bytes);
  }
  std::fprintf(stderr, "%-70s", line);
  std::fflush(stderr);
  progressShown_ = true;
}

void Report::addRow(const Row& row) {
  if (progressShown_) {  // the table line replaces the progress line on a shared terminal
    std::fprintf(stderr, "\r%70s\r", "");
    std::fflush(stderr);
  }
  rows_.push_back(row);
  std::printf("%12zu  %12zu  %8s  %6s  %6i%s%s\n", row.bytes, row.count, row.type.c_str(), row.op.c_str(),
              row.root, modeColumns(row.outOfPlace).c_str(), modeColumns(row.inPlace).c_str());
  std::fflush(stdout);
}

long long Report::finish() {
  long long wrong = 0;
  double busBwSum = 0;
  int measured = 0;
  for (const Row& r : rows_) {
    for (const ModeResult* m : {&r.outOfPlace, &r.inPlace}) {
      if (!m->measured) continue;
      wrong += m->wrong;
      busBwSum += m->busBw;
      ++measured;
    }
  }
  const double avgBusBw = measured ? busBwSum / measured : 0;
  std::printf("# %-20s : %lld %s\n", "Out of bounds values", wrong, wrong ? "FAILED" : "OK");
  std::printf("# %-20s : %g \n", "Avg bus bandwidth", avgBusBw);
  std::printf("#\n# Collective test concluded: %s\n", options_.program.c_str());
  std::fflush(stdout);

  if (!options_.jsonPath.empty()) {
    std::string json = "{\n  \"program\": " + jsonString(options_.program) + ",\n  \"collective\": " +
                       jsonString(collectiveName(options_.collective)) + ",\n  \"nranks\": " +
                       std::to_string(nranks_) + ",\n  \"results\": [";
    for (size_t i = 0; i < rows_.size(); ++i) {
      const Row& r = rows_[i];
      json += std::string(i ? "," : "") + "\n    {\"algorithm\": " + jsonString(r.algorithm) +
              ", \"size\": " + std::to_string(r.bytes) + ", \"count\": " + std::to_string(r.count) +
              ", \"type\": " + jsonString(r.type) + ", \"redop\": " + jsonString(r.op) +
              ", \"root\": " + std::to_string(r.root) + ", \"iterations\": " + std::to_string(r.iters) +
              ", \"out_of_place\": " + jsonMode(r.outOfPlace) + ", \"in_place\": " + jsonMode(r.inPlace) + "}";
    }
    json += "\n  ],\n  \"out_of_bounds\": {\"count\": " + std::to_string(wrong) + ", \"okay\": " +
            (wrong ? "false" : "true") + "},\n  \"average_bus_bandwidth\": " + number(avgBusBw) + "\n}\n";
    writeFile(options_.jsonPath, json);
  }
  if (!options_.csvPath.empty()) {
    std::string csv =
        "algorithm,size,count,type,redop,root,iterations,oop_time_us,oop_algbw,oop_busbw,oop_wrong,"
        "ip_time_us,ip_algbw,ip_busbw,ip_wrong\n";
    for (const Row& r : rows_) {
      csv += r.algorithm + "," + std::to_string(r.bytes) + "," + std::to_string(r.count) + "," + r.type + "," +
             r.op + "," + std::to_string(r.root) + "," + std::to_string(r.iters) + "," + csvMode(r.outOfPlace) +
             "," + csvMode(r.inPlace) + "\n";
    }
    writeFile(options_.csvPath, csv);
  }
  if (!options_.plotPath.empty()) {
    loomplot::Plot plot;
    plot.title = options_.program + ", " + std::to_string(nranks_) + " ranks, out of place";
    std::map<std::string, size_t> seriesOf;
    for (const Row& r : rows_) {
      std::string label = r.algorithm.empty() ? "loom" : r.algorithm;
      label += " " + r.type;
      if (r.op != "none") label += " " + r.op;
      if (r.root >= 0 && options_.root == -1) label += " root " + std::to_string(r.root);
      auto [it, added] = seriesOf.emplace(label, plot.series.size());
      if (added) plot.series.push_back({label, {}});
      plot.series[it->second].points.push_back({static_cast<double>(r.bytes), r.outOfPlace.busBw});
    }
    std::string error;
    if (!loomplot::writeSvg(plot, options_.plotPath, &error)) fatal("--plot: %s", error.c_str());
  }
  return wrong;
}

}  // namespace loomperf
