#include "table_reader.h"

#include <cstdlib>
#include <sstream>

namespace loomplot {
namespace {

bool toNumber(const std::string& text, double* out) {
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0';
}

// Four columns: time, algbw, busbw, #wrong ("N/A" when unchecked); all "-" when unmeasured.
bool readMode(const std::vector<std::string>& f, size_t at, TableMode* m) {
  if (f[at] == "-") return f[at + 1] == "-" && f[at + 2] == "-" && f[at + 3] == "-";
  m->measured = true;
  double wrong = 0;
  return toNumber(f[at], &m->timeUs) && toNumber(f[at + 1], &m->algBw) && toNumber(f[at + 2], &m->busBw) &&
         (f[at + 3] == "N/A" || toNumber(f[at + 3], &wrong));
}

}  // namespace

bool readTable(std::istream& in, std::vector<TableRow>* rows, std::string* error) {
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    std::vector<std::string> f;
    for (std::string w; words >> w;) f.push_back(w);
    if (f.empty() || f[0][0] == '#') continue;
    TableRow r;
    double bytes = 0, count = 0, root = 0;
    const bool ok = f.size() == 13 && toNumber(f[0], &bytes) && toNumber(f[1], &count) &&
                    toNumber(f[4], &root) && readMode(f, 5, &r.outOfPlace) && readMode(f, 9, &r.inPlace);
    if (!ok) {
      *error = "line " + std::to_string(number) + " is not a table row: " + line;
      return false;
    }
    r.bytes = static_cast<size_t>(bytes);
    r.count = static_cast<size_t>(count);
    r.type = f[2];
    r.op = f[3];
    r.root = static_cast<int>(root);
    rows->push_back(r);
  }
  return true;
}

}  // namespace loomplot
