// How much of the test matrices a run covers (docs/TESTING.md). The default is a slice that
// still reaches every collective x type x op; LOOM_TEST_FULL=1 asks for every combination;
// LOOM_TEST_QUICK=1 (set by tests/sanitize.sh) for a thinner slice, since under a sanitizer
// every call costs 5 to 20 times more and the point there is every code path, not every
// type: each collective, algorithm, wire and rank count still runs.
#pragma once

#include <cstdlib>
#include <cstring>

namespace loomtest {

enum class MatrixScale { kQuick, kSlice, kFull };

inline MatrixScale matrixScale() {
  auto set = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && std::strcmp(value, "1") == 0;
  };
  if (set("LOOM_TEST_FULL")) return MatrixScale::kFull;
  return set("LOOM_TEST_QUICK") ? MatrixScale::kQuick : MatrixScale::kSlice;
}

}  // namespace loomtest
