// The environment table: typed reads, undeclared names, and docs/ENVIRONMENT.md kept equal
// to the table it is generated from.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "base/env.h"

namespace {

TEST(Env, IntegersAreParsedAndCheckedWithTheVariableNamed) {
  long long v = 0;
  ::unsetenv("LOOM_TIMEOUT_MS");
  ASSERT_TRUE(loom::env::getInt("LOOM_TIMEOUT_MS", 1, 1LL << 40, &v).isOk());
  EXPECT_EQ(v, 600000);  // the documented default
  ::setenv("LOOM_TIMEOUT_MS", "12x", 1);
  loom::Status s = loom::env::getInt("LOOM_TIMEOUT_MS", 1, 1LL << 40, &v);
  EXPECT_EQ(s.code(), loomInvalidArgument);
  EXPECT_NE(s.message().find("LOOM_TIMEOUT_MS=\"12x\""), std::string::npos) << s.message();
  ::setenv("LOOM_TIMEOUT_MS", "0", 1);
  EXPECT_EQ(loom::env::getInt("LOOM_TIMEOUT_MS", 1, 10, &v).code(), loomInvalidArgument);
  ::unsetenv("LOOM_TIMEOUT_MS");
}

TEST(Env, UndeclaredVariablesAreAProgrammingError) {
  EXPECT_THROW(loom::env::get("LOOM_NOT_IN_THE_TABLE"), std::logic_error);
}

TEST(Env, DocsMatchTheTable) {
  std::ifstream in(std::string(LOOM_SOURCE_ROOT) + "/docs/ENVIRONMENT.md");
  ASSERT_TRUE(in.good()) << "docs/ENVIRONMENT.md is missing";
  std::stringstream doc;
  doc << in.rdbuf();
  EXPECT_EQ(doc.str(), loom::env::markdown())
      << "regenerate it: build/tools/loom-info --env-markdown > docs/ENVIRONMENT.md";
}

TEST(Env, LoomInfoPrintsTheSameTable) {
  const char* exe = std::getenv("LOOM_INFO_EXE");
  ASSERT_NE(exe, nullptr) << "LOOM_INFO_EXE is set by meson";
  FILE* pipe = ::popen((std::string(exe) + " --env-markdown").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  EXPECT_EQ(::pclose(pipe), 0);
  EXPECT_EQ(out, loom::env::markdown());
}

}  // namespace
