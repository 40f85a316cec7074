// FifoStoreChooser: which stores a FIFO writer uses, and how LOOM_SHM_FIFO_STORES=auto follows
// the speeds it records.
#include "transport/fifo_stores.h"

#include <gtest/gtest.h>

namespace {

using loom::transport::FifoStoreChooser;
using loom::transport::FifoStores;

constexpr size_t kLarge = 32768;

// Feeds writes of kLarge until one is sampled with the given stores, and records `gbps` for it.
void sample(FifoStoreChooser& chooser, bool streaming, double gbps) {
  for (int i = 0; i < 4 * static_cast<int>(FifoStoreChooser::kSampleEvery); ++i) {
    const FifoStoreChooser::Choice c = chooser.next(kLarge);
    if (c.timed && c.streaming == streaming) {
      const bool before = chooser.streaming();
      const bool changed = chooser.record(c, kLarge, static_cast<uint64_t>(static_cast<double>(kLarge) / gbps));
      EXPECT_EQ(changed, chooser.streaming() != before);
      return;
    }
    if (c.timed) chooser.record(c, kLarge, static_cast<uint64_t>(static_cast<double>(kLarge) / 10.0));
  }
  FAIL() << "no " << (streaming ? "non-temporal" : "plain") << " sample came";
}

TEST(FifoStores, FixedSettingsAreNeverTimedAndSmallWritesStayPlain) {
  FifoStoreChooser cached(FifoStores::kCached), streaming(FifoStores::kStreaming);
  for (size_t bytes : {size_t{64}, size_t{4095}, size_t{4096}, kLarge, size_t{1} << 20}) {
    for (int i = 0; i < 100; ++i) {
      EXPECT_FALSE(cached.next(bytes).streaming) << bytes;
      EXPECT_FALSE(cached.next(bytes).timed) << bytes;
      EXPECT_EQ(streaming.next(bytes).streaming, bytes >= FifoStoreChooser::kStreamingMinBytes) << bytes;
      EXPECT_FALSE(streaming.next(bytes).timed) << bytes;
    }
  }
}

TEST(FifoStores, AutoSamplesOneLargeWriteInSoManyAlternatingTheStores) {
  FifoStoreChooser chooser(FifoStores::kAuto);
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(chooser.next(FifoStoreChooser::kSampledMinBytes - 1).timed);
  int timed = 0, streamingSamples = 0;
  const int writes = 64 * static_cast<int>(FifoStoreChooser::kSampleEvery);
  for (int i = 0; i < writes; ++i) {
    const FifoStoreChooser::Choice c = chooser.next(kLarge);
    if (!c.timed) {
      EXPECT_FALSE(c.streaming) << "write " << i << ": nothing recorded yet, plain stores";
      continue;
    }
    ++timed;
    streamingSamples += c.streaming;
  }
  EXPECT_EQ(timed, 64);
  EXPECT_EQ(streamingSamples, 32);
}

TEST(FifoStores, AutoTakesNonTemporalStoresWherePlainOnesCopySlowlyAndComesBack) {
  FifoStoreChooser chooser(FifoStores::kAuto);
  EXPECT_FALSE(chooser.streaming());
  EXPECT_EQ(chooser.recentGbps(false), 0);
  // Cores sharing a cache (measured: plain 17-19 GB/s, non-temporal 24-30): plain stays.
  for (int i = 0; i < 4; ++i) {
    sample(chooser, false, 18);
    sample(chooser, true, 27);
  }
  EXPECT_FALSE(chooser.streaming());
  EXPECT_NEAR(chooser.recentGbps(false), 18, 0.05);
  EXPECT_NEAR(chooser.recentGbps(true), 27, 0.05);
  sample(chooser, false, 2);  // nor does one plain copy slowed by an interrupt
  EXPECT_FALSE(chooser.streaming());
  // The slow phase (plain 4 GB/s, non-temporal 20-23): a few samples move the average past the line.
  for (int i = 0; i < 6; ++i) {
    sample(chooser, false, 4);
    sample(chooser, true, 22);
  }
  EXPECT_TRUE(chooser.streaming());
  EXPECT_TRUE(chooser.next(FifoStoreChooser::kStreamingMinBytes).streaming);
  EXPECT_FALSE(chooser.next(FifoStoreChooser::kStreamingMinBytes - 1).streaming) << "small writes stay plain";
  // One non-temporal copy slowed by an interrupt does not flip it back...
  sample(chooser, true, 2);
  EXPECT_TRUE(chooser.streaming());
  // ...but the fast phase's speeds, sample after sample, do.
  for (int i = 0; i < 6; ++i) {
    sample(chooser, false, 18);
    sample(chooser, true, 27);
  }
  EXPECT_FALSE(chooser.streaming());
}

}  // namespace
