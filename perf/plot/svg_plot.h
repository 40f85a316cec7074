// A line plot of a measured quantity against message size, written as SVG: what loom-perf
// --plot and loom-plot draw. Sizes on a log2 axis (B, KiB, MiB, GiB), values on a linear
// axis from 0, one coloured line with markers per series, a legend.
#pragma once

#include <string>
#include <vector>

namespace loomplot {

struct Point {
  double bytes;
  double value;
};

struct Series {
  std::string label;
  std::vector<Point> points;  // any order; drawn sorted by size
};

struct Plot {
  std::string title;
  std::string valueLabel = "busbw (GB/s)";
  std::vector<Series> series;
};

// Writes `plot` to `path`; false with the reason in *error when the file cannot be written.
bool writeSvg(const Plot& plot, const std::string& path, std::string* error);

// "512 KiB", "2 MiB", "1.5 GiB": bytes in the largest binary unit that keeps the number >= 1.
std::string sizeLabel(double bytes);

}  // namespace loomplot
