#include "svg_plot.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace loomplot {
namespace {

constexpr double kWidth = 900, kHeight = 520;
constexpr double kLeft = 70, kRight = 200, kTop = 40, kBottom = 60;  // margins
constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A round step giving about `ticks` intervals over [0, top].
double niceStep(double top, int ticks) {
  const double raw = top / ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * magnitude) return m * magnitude;
  return 10 * magnitude;
}

}  // namespace

std::string sizeLabel(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%g %s", bytes, kUnits[unit]);
  return text;
}

bool writeSvg(const Plot& plot, const std::string& path, std::string* error) {
  double minBytes = INFINITY, maxBytes = 0, maxValue = 0;
  for (const Series& s : plot.series) {
    for (const Point& p : s.points) {
      if (p.bytes <= 0 || !std::isfinite(p.value)) continue;
      minBytes = std::min(minBytes, p.bytes);
      maxBytes = std::max(maxBytes, p.bytes);
      maxValue = std::max(maxValue, p.value);
    }
  }
  if (maxBytes == 0) {  // nothing to draw: still a valid, labelled, empty plot
    minBytes = 1;
    maxBytes = 2;
  }
  const double x0 = std::floor(std::log2(minBytes)), x1 = std::max(x0 + 1, std::ceil(std::log2(maxBytes)));
  const double step = niceStep(maxValue > 0 ? maxValue : 1, 6);
  const double top = step * std::ceil((maxValue > 0 ? maxValue : 1) / step);
  const double plotW = kWidth - kLeft - kRight, plotH = kHeight - kTop - kBottom;
  auto xOf = [&](double bytes) { return kLeft + (std::log2(bytes) - x0) / (x1 - x0) * plotW; };
  auto yOf = [&](double v) { return kTop + plotH - v / top * plotH; };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kLeft + plotW / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">"
      << escaped(plot.title) << "</text>\n";
  // Grid and ticks: every power of two on x when they fit, else every other one.
  const int xStride = (x1 - x0) > 16 ? 2 : 1;
  for (double e = x0; e <= x1; e += xStride) {
    const double x = xOf(std::exp2(e));
    svg << "<line x1=\"" << x << "\" y1=\"" << kTop << "\" x2=\"" << x << "\" y2=\"" << kTop + plotH
        << "\" stroke=\"#e0e0e0\"/>\n"
        << "<text x=\"" << x << "\" y=\"" << kTop + plotH + 16 << "\" text-anchor=\"end\" transform=\"rotate(-35 "
        << x << " " << kTop + plotH + 16 << ")\">" << sizeLabel(std::exp2(e)) << "</text>\n";
  }
  for (double v = 0; v <= top + step / 2; v += step) {
    const double y = yOf(v);
    svg << "<line x1=\"" << kLeft << "\" y1=\"" << y << "\" x2=\"" << kLeft + plotW << "\" y2=\"" << y
        << "\" stroke=\"#e0e0e0\"/>\n"
        << "<text x=\"" << kLeft - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << v << "</text>\n";
  }
  svg << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << plotW << "\" height=\"" << plotH
      << "\" fill=\"none\" stroke=\"black\"/>\n"
      << "<text x=\"" << kLeft + plotW / 2 << "\" y=\"" << kHeight - 8 << "\" text-anchor=\"middle\">message size</text>\n"
      << "<text x=\"16\" y=\"" << kTop + plotH / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 "
      << kTop + plotH / 2 << ")\">" << escaped(plot.valueLabel) << "</text>\n";

  for (size_t i = 0; i < plot.series.size(); ++i) {
    const Series& s = plot.series[i];
    const char* colour = kColours[i % (sizeof kColours / sizeof kColours[0])];
    std::vector<Point> points;
    for (const Point& p : s.points)
      if (p.bytes > 0 && std::isfinite(p.value)) points.push_back(p);
    std::sort(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.bytes < b.bytes; });
    svg << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\" points=\"";
    for (const Point& p : points) svg << xOf(p.bytes) << "," << yOf(p.value) << " ";
    svg << "\"/>\n";
    for (const Point& p : points)
      svg << "<circle cx=\"" << xOf(p.bytes) << "\" cy=\"" << yOf(p.value) << "\" r=\"3\" fill=\"" << colour
          << "\"/>\n";
    const double ly = kTop + 10 + 20 * static_cast<double>(i);
    svg << "<line x1=\"" << kLeft + plotW + 12 << "\" y1=\"" << ly << "\" x2=\"" << kLeft + plotW + 36 << "\" y2=\""
        << ly << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n"
        << "<text x=\"" << kLeft + plotW + 42 << "\" y=\"" << ly + 4 << "\">" << escaped(s.label) << "</text>\n";
  }
  svg << "</svg>\n";

  std::ofstream out(path);
  out << svg.str();
  out.close();
  if (!out) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace loomplot
