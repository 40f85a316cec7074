// ShmSegment: private random files that two mappings share, and that go away when asked
// (or when their creator is destroyed).
#include "transport/shm_segment.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace {

using loom::transport::ShmSegment;

// A fresh directory in /dev/shm, removed (with whatever a test left) at the end.
class ShmDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/dev/shm/loom-segment-test-XXXXXX";
    ASSERT_NE(::mkdtemp(path), nullptr) << std::strerror(errno);
    dir_ = path;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  bool exists(const std::string& name) const {
    struct stat st;
    return ::stat(name.c_str(), &st) == 0;
  }

  std::string dir_;
};

TEST_F(ShmDir, CreatedSegmentIsPrivateRandomAndShared) {
  ShmSegment a, b;
  loom::Status s = ShmSegment::create(dir_, 8192, "test segment", &a);
  ASSERT_TRUE(s.isOk()) << s.message();
  ASSERT_TRUE(ShmSegment::create(dir_, 8192, "test segment", &b).isOk());
  EXPECT_EQ(a.size(), 8192u);
  EXPECT_EQ(a.name().rfind(dir_ + "/loom-", 0), 0u) << a.name();
  EXPECT_EQ(a.name().size(), dir_.size() + 6 + 32) << a.name();
  EXPECT_NE(a.name(), b.name());

  struct stat st;
  ASSERT_EQ(::stat(a.name().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_TRUE(S_ISREG(st.st_mode));

  ShmSegment opened;
  s = ShmSegment::open(a.name(), 8192, &opened);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_NE(opened.data(), a.data());  // a second mapping of the same memory
  for (size_t i = 0; i < 8192; ++i) ASSERT_EQ(static_cast<uint8_t*>(opened.data())[i], 0) << i;
  std::memcpy(a.data(), "through the file", 17);
  EXPECT_STREQ(static_cast<const char*>(opened.data()), "through the file");
}

TEST_F(ShmDir, OpenChecksTheSize) {
  ShmSegment a, opened;
  ASSERT_TRUE(ShmSegment::create(dir_, 4096, "test segment", &a).isOk());
  loom::Status s = ShmSegment::open(a.name(), 8192, &opened);
  EXPECT_EQ(s.code(), loomInternalError);
  EXPECT_NE(s.message().find("4096"), std::string::npos) << s.message();
  EXPECT_EQ(opened.data(), nullptr);

  s = ShmSegment::open(dir_ + "/loom-missing", 4096, &opened);
  EXPECT_EQ(s.code(), loomSystemError);
  EXPECT_NE(s.message().find("loom-missing"), std::string::npos) << s.message();
}

TEST_F(ShmDir, UnlinkIsIdempotentAndMappingsSurviveIt) {
  ShmSegment a, opened;
  ASSERT_TRUE(ShmSegment::create(dir_, 4096, "test segment", &a).isOk());
  ASSERT_TRUE(ShmSegment::open(a.name(), 4096, &opened).isOk());
  opened.unlink();
  EXPECT_FALSE(exists(a.name()));
  opened.unlink();
  a.unlink();
  static_cast<char*>(a.data())[100] = 42;
  EXPECT_EQ(static_cast<char*>(opened.data())[100], 42);
}

TEST_F(ShmDir, CreatorRemovesTheNameOpenerDoesNot) {
  std::string name;
  {
    ShmSegment a;
    ASSERT_TRUE(ShmSegment::create(dir_, 4096, "test segment", &a).isOk());
    name = a.name();
    {
      ShmSegment opened;
      ASSERT_TRUE(ShmSegment::open(name, 4096, &opened).isOk());
    }
    EXPECT_TRUE(exists(name));
    ShmSegment moved(std::move(a));
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_TRUE(a.name().empty());
    EXPECT_TRUE(exists(name));  // the moved-from object owns nothing
    ShmSegment assigned;
    assigned = std::move(moved);
    EXPECT_TRUE(exists(name));
  }
  EXPECT_FALSE(exists(name));
}

TEST(ShmSegment, MissingDirectoryNamesThePath) {
  ShmSegment a;
  loom::Status s = ShmSegment::create("/nonexistent-loom-dir", 4096, "test segment", &a);
  EXPECT_EQ(s.code(), loomSystemError);
  EXPECT_NE(s.message().find("/nonexistent-loom-dir/loom-"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("test segment"), std::string::npos) << s.message();
}

}  // namespace
