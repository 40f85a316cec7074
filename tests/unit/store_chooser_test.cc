// StoreChooser: which stores a FIFO writer (LOOM_SHM_FIFO_STORES) and a call's reductions
// (LOOM_REDUCTION_STORES) use, and how auto follows the speeds it records under each one's rules.
#include "transport/store_chooser.h"

#include <gtest/gtest.h>

namespace {

using loom::transport::StoreChooser;
using loom::transport::Stores;

constexpr size_t kLarge = 32768;

// Feeds writes of kLarge until `samples` of them were timed, recording for each the speed of
// its kind of stores: `plainGbps` or `streamingGbps`.
void feed(StoreChooser& chooser, double plainGbps, double streamingGbps, int samples) {
  for (int taken = 0; taken < samples;) {
    const StoreChooser::Choice c = chooser.next(kLarge);
    if (!c.timed) continue;
    const bool before = chooser.streaming();
    const double gbps = c.streaming ? streamingGbps : plainGbps;
    const bool changed = chooser.record(c, kLarge, static_cast<uint64_t>(static_cast<double>(kLarge) / gbps));
    EXPECT_EQ(changed, chooser.streaming() != before);
    ++taken;
  }
}

TEST(FifoStores, FixedSettingsAreNeverTimedAndSmallWritesStayPlain) {
  StoreChooser cached(StoreChooser::fifoRules(Stores::kCached)), streaming(StoreChooser::fifoRules(Stores::kStreaming));
  StoreChooser reductionCached(StoreChooser::reductionRules(Stores::kCached));
  for (size_t bytes : {size_t{64}, size_t{4095}, size_t{4096}, kLarge, size_t{1} << 20}) {
    for (int i = 0; i < 100; ++i) {
      EXPECT_FALSE(cached.next(bytes).streaming) << bytes;
      EXPECT_FALSE(cached.next(bytes).timed) << bytes;
      EXPECT_EQ(streaming.next(bytes).streaming, bytes >= StoreChooser::kStreamingMinBytes) << bytes;
      EXPECT_FALSE(streaming.next(bytes).timed) << bytes;
      EXPECT_FALSE(reductionCached.next(bytes).streaming) << bytes;
      EXPECT_FALSE(reductionCached.next(bytes).timed) << bytes;
    }
  }
}

TEST(FifoStores, AutoSamplesOneLargeWriteInSoManyMostlyTheStoresInUse) {
  StoreChooser chooser(StoreChooser::fifoRules(Stores::kAuto));
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(chooser.next(StoreChooser::kSampledMinBytes - 1).timed);
  int timed = 0, streamingSamples = 0;
  const int writes = 64 * static_cast<int>(StoreChooser::kSampleEvery);
  for (int i = 0; i < writes; ++i) {
    const StoreChooser::Choice c = chooser.next(kLarge);
    if (!c.timed) {
      EXPECT_FALSE(c.streaming) << "write " << i << ": nothing recorded yet, plain stores";
      continue;
    }
    ++timed;
    streamingSamples += c.streaming;
  }
  EXPECT_EQ(timed, 64);
  EXPECT_EQ(streamingSamples, 64 / static_cast<int>(StoreChooser::kOtherEvery));
}

TEST(FifoStores, AutoTakesNonTemporalStoresWherePlainOnesCopySlowlyAndComesBack) {
  const int other = static_cast<int>(StoreChooser::kOtherEvery);
  StoreChooser chooser(StoreChooser::fifoRules(Stores::kAuto));
  EXPECT_FALSE(chooser.streaming());
  EXPECT_EQ(chooser.recentGbps(false), 0);
  // Cores sharing a cache (measured in Loom's allreduce: plain 40-43 GB/s, non-temporal 46): plain stays.
  feed(chooser, 41, 46, 3 * other);
  EXPECT_FALSE(chooser.streaming());
  EXPECT_NEAR(chooser.recentGbps(false), 41, 0.05);
  EXPECT_NEAR(chooser.recentGbps(true), 46, 0.05);
  // Two plain copies cut by interrupts do not move the median of five.
  feed(chooser, 2, 46, 2);
  EXPECT_FALSE(chooser.streaming());
  // The slow phase (plain 2.6, non-temporal 52): once most recent plain samples are slow, it turns.
  feed(chooser, 2.6, 52, 3);
  EXPECT_TRUE(chooser.streaming());
  EXPECT_TRUE(chooser.next(StoreChooser::kStreamingMinBytes).streaming);
  EXPECT_FALSE(chooser.next(StoreChooser::kStreamingMinBytes - 1).streaming) << "small writes stay plain";
  // Now plain stores are sampled one time in kOtherEvery only: they cost 20x here.
  feed(chooser, 2.6, 52, 5 * other);
  EXPECT_TRUE(chooser.streaming());
  // Two non-temporal copies cut by interrupts do not turn it back...
  feed(chooser, 2.6, 2, 2);
  EXPECT_TRUE(chooser.streaming());
  // ...the shared cache's speeds, once most recent plain samples show them, do.
  feed(chooser, 41, 46, 3 * other);
  EXPECT_FALSE(chooser.streaming());
}

TEST(ReductionStores, AutoStartsNonTemporalAndFollowsWhicheverKindWritesFaster) {
  const int other = static_cast<int>(StoreChooser::kOtherEvery);
  StoreChooser chooser(StoreChooser::reductionRules(Stores::kAuto));
  EXPECT_TRUE(chooser.streaming()) << "the streaming protocol's own stores until both kinds were timed";
  EXPECT_TRUE(chooser.next(StoreChooser::kStreamingMinBytes).streaming);
  EXPECT_FALSE(chooser.next(StoreChooser::kStreamingMinBytes - 1).streaming) << "small writes stay plain";
  // Non-temporal reductions faster (a lone core's pattern): they stay.
  feed(chooser, 13.6, 17.4, 3 * other);
  EXPECT_TRUE(chooser.streaming());
  EXPECT_NEAR(chooser.recentGbps(true), 17.4, 0.05);
  // Inside a 2-rank allreduce on the AMD EPYC VM, plain 7.1-7.5 GB/s against 5.5-5.9: unlike
  // a FIFO's rules, any lead of plain stores turns it, once most recent samples show it.
  feed(chooser, 7.3, 5.7, 3 * other);
  EXPECT_FALSE(chooser.streaming());
  // Within a tenth of each other, the kind in use stays (plain now)...
  feed(chooser, 7.3, 7.9, 5 * other);
  EXPECT_FALSE(chooser.streaming());
  // ...and once non-temporal ones, still sampled, write a tenth faster, back.
  feed(chooser, 7.3, 8.2, 5 * other);
  EXPECT_TRUE(chooser.streaming());
  feed(chooser, 7.9, 7.3, 5 * other);
  EXPECT_TRUE(chooser.streaming()) << "plain 8 % faster does not turn it";
}

// ended() times a sampled write from its next(): the kind it was gets a speed.
TEST(StoreChooser, EndedTimesTheWriteSinceItsChoice) {
  StoreChooser chooser(StoreChooser::reductionRules(Stores::kAuto));
  StoreChooser::Choice c;
  while (!(c = chooser.next(kLarge)).timed) {
  }
  EXPECT_FALSE(chooser.ended(c, kLarge)) << "one kind timed only: no change";
  EXPECT_GT(chooser.recentGbps(c.streaming), 0);
  EXPECT_EQ(chooser.recentGbps(!c.streaming), 0);
}

}  // namespace
