// loom-plot: draws busbw (or algbw, or time) against size from tables in nccl-tests' format,
// one line per file: several loom-perf runs, algorithms or peers on one plot.
//
//   loom-plot -o out.svg [--title T] [--mode oop|ip] [--metric busbw|algbw|time] LABEL=FILE...
//
// A FILE of loom-perf, nccl-tests or perf/peers output (header lines are skipped). --mode
// picks the out-of-place (default) or in-place columns; rows whose mode is "-" are left out.
#include <getopt.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "svg_plot.h"
#include "table_reader.h"

namespace {

int usage(FILE* to) {
  std::fputs("usage: loom-plot -o OUT.svg [--title T] [--mode oop|ip] [--metric busbw|algbw|time] LABEL=FILE...\n", to);
  return to == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, title = "loom-plot", mode = "oop", metric = "busbw";
  static const option kLong[] = {{"output", required_argument, nullptr, 'o'},
                                 {"title", required_argument, nullptr, 't'},
                                 {"mode", required_argument, nullptr, 'm'},
                                 {"metric", required_argument, nullptr, 'k'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "o:h", kLong, nullptr)) != -1) {
    switch (opt) {
      case 'o': out = optarg; break;
      case 't': title = optarg; break;
      case 'm': mode = optarg; break;
      case 'k': metric = optarg; break;
      case 'h': return usage(stdout);
      default: return usage(stderr);
    }
  }
  if (out.empty() || optind == argc || (mode != "oop" && mode != "ip") ||
      (metric != "busbw" && metric != "algbw" && metric != "time")) {
    return usage(stderr);
  }
  loomplot::Plot plot;
  plot.title = title;
  plot.valueLabel = metric == "time" ? "time (us)" : metric + " (GB/s)";
  for (int i = optind; i < argc; ++i) {
    const char* eq = std::strchr(argv[i], '=');
    if (eq == nullptr) {
      std::fprintf(stderr, "loom-plot: '%s' is not LABEL=FILE\n", argv[i]);
      return 2;
    }
    const std::string label(argv[i], static_cast<size_t>(eq - argv[i])), path(eq + 1);
    std::ifstream in(path);
    if (!in) {
      std::fprintf(stderr, "loom-plot: cannot read %s\n", path.c_str());
      return 1;
    }
    std::vector<loomplot::TableRow> rows;
    std::string error;
    if (!loomplot::readTable(in, &rows, &error)) {
      std::fprintf(stderr, "loom-plot: %s: %s\n", path.c_str(), error.c_str());
      return 1;
    }
    loomplot::Series series{label, {}};
    for (const loomplot::TableRow& r : rows) {
      const loomplot::TableMode& m = mode == "oop" ? r.outOfPlace : r.inPlace;
      if (!m.measured) continue;
      const double value = metric == "busbw" ? m.busBw : metric == "algbw" ? m.algBw : m.timeUs;
      series.points.push_back({static_cast<double>(r.bytes), value});
    }
    if (series.points.empty()) std::fprintf(stderr, "loom-plot: %s: no %s rows\n", path.c_str(), mode.c_str());
    plot.series.push_back(series);
  }
  std::string error;
  if (!loomplot::writeSvg(plot, out, &error)) {
    std::fprintf(stderr, "loom-plot: %s\n", error.c_str());
    return 1;
  }
  return 0;
}
