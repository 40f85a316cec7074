// LOOM_ALGO's and LOOM_PROTO's syntax (lists, ^ exclusion, per collective) and the choice
// the tuner makes among what they leave, on the cost model's built-in constants.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/select.h"

namespace loom {
namespace {

CallShape shape(CallInfo::Kind kind, size_t bytes, bool oneHost = true) {
  CallShape s;
  s.info.kind = kind;
  s.bytes = bytes;
  s.oneHost = oneHost;
  return s;
}

// 4 ranks, on one host or two hosts of two.
CommProfile profileFor(const CallShape& s) { return CommProfile::defaults(4, s.oneHost ? 1 : 2); }

Choice chooseWith(const std::string& algo, const std::string& proto, const CallShape& s) {
  AlgorithmSetting algorithms;
  Status status = parseAlgorithmSetting(algo, &algorithms);
  EXPECT_TRUE(status.isOk()) << status.message();
  ProtocolSetting protocols;
  status = parseProtocolSetting(proto, &protocols);
  EXPECT_TRUE(status.isOk()) << status.message();
  return chooseAlgorithm(s, algorithms, protocols, profileFor(s));
}

Algorithm choose(const std::string& algo, const CallShape& s) { return chooseWith(algo, "", s).algorithm; }

Choice chooseAlgorithm(const CallShape& s, const AlgorithmSetting& algorithms) {
  return loom::chooseAlgorithm(s, algorithms, ProtocolSetting(), profileFor(s));
}

std::string parseError(const std::string& algo) {
  AlgorithmSetting setting;
  Status status = parseAlgorithmSetting(algo, &setting);
  EXPECT_EQ(status.code(), loomInvalidArgument) << algo;
  return status.message();
}

constexpr auto kAllReduce = CallInfo::Kind::kAllReduce;
constexpr auto kBroadcast = CallInfo::Kind::kBroadcast;
constexpr auto kAllToAll = CallInfo::Kind::kAllToAll;

TEST(AlgoSetting, UnsetTakesThePredictedFastest) {
  EXPECT_EQ(choose("", shape(kAllReduce, 8)), Algorithm::kOneShot);
  EXPECT_EQ(choose("", shape(kAllReduce, 8, false)), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(choose("", shape(kAllReduce, 1 << 20)), Algorithm::kRing);
  // A small broadcast on one host runs on the board; across hosts down the tree.
  EXPECT_EQ(choose("", shape(kBroadcast, 8)), Algorithm::kOneShot);
  EXPECT_EQ(choose("", shape(kBroadcast, 8, false)), Algorithm::kTree);
  EXPECT_EQ(choose("", shape(kBroadcast, 1 << 20)), Algorithm::kRing);
}

TEST(AlgoSetting, OneNameForcesItWhereItExists) {
  EXPECT_EQ(choose("tree", shape(kAllReduce, 1 << 20)), Algorithm::kTree);
  EXPECT_EQ(choose("ring", shape(kBroadcast, 8)), Algorithm::kRing);
  // All-to-all has no ring: it keeps its own, the board for a small call, else pairwise.
  EXPECT_EQ(choose("ring", shape(kAllToAll, 8)), Algorithm::kOneShot);
  EXPECT_EQ(choose("ring", shape(kAllToAll, 1 << 20)), Algorithm::kPairwise);
  AlgorithmSetting setting;
  ASSERT_TRUE(parseAlgorithmSetting("rd", &setting).isOk());
  Choice c = chooseAlgorithm(shape(kAllReduce, 8), setting);
  EXPECT_STREQ(c.why, "forced by LOOM_ALGO");
}

TEST(AlgoSetting, AListAllowsOnlyThose) {
  // At 8 bytes the model ranks oneshot, rd, tree, ring.
  EXPECT_EQ(choose("ring,tree", shape(kAllReduce, 8)), Algorithm::kTree);
  EXPECT_EQ(choose("ring,tree", shape(kAllReduce, 1 << 20)), Algorithm::kRing);
}

TEST(AlgoSetting, CaretExcludes) {
  EXPECT_EQ(choose("^oneshot", shape(kAllReduce, 8)), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(choose("allreduce=^oneshot,allreduce=^rd", shape(kAllReduce, 8)), Algorithm::kTree);
  EXPECT_EQ(choose("^ring", shape(kBroadcast, 1 << 20)), Algorithm::kTree);
  EXPECT_EQ(choose("allreduce=^ring", shape(kBroadcast, 1 << 20)), Algorithm::kRing);  // only allreduce
  // Excluding for every collective the one algorithm that can carry a call sets the exclusion
  // aside (a large all-to-all has pairwise alone).
  EXPECT_EQ(choose("^pairwise", shape(kAllToAll, 8)), Algorithm::kOneShot);
  EXPECT_EQ(choose("^pairwise", shape(kAllToAll, 1 << 20)), Algorithm::kPairwise);
}

TEST(AlgoSetting, PerCollective) {
  EXPECT_EQ(choose("allreduce=tree,broadcast=ring", shape(kAllReduce, 8)), Algorithm::kTree);
  EXPECT_EQ(choose("allreduce=tree,broadcast=ring", shape(kBroadcast, 8)), Algorithm::kRing);
}

TEST(AlgoSetting, OneShotThatCannotCarryTheCallIsSetAside) {
  AlgorithmSetting setting;
  ASSERT_TRUE(parseAlgorithmSetting("oneshot", &setting).isOk());
  Choice big = chooseAlgorithm(shape(kAllReduce, 1 << 20), setting);
  EXPECT_EQ(big.algorithm, Algorithm::kRing);
  EXPECT_NE(std::string(big.why).find("set aside"), std::string::npos);
  EXPECT_EQ(chooseAlgorithm(shape(kAllReduce, 8, false), setting).algorithm, Algorithm::kRecursiveDoubling);
}

TEST(AlgoSetting, BadValuesSayWhat) {
  EXPECT_NE(parseError("bogus").find("unknown algorithm \"bogus\""), std::string::npos);
  EXPECT_NE(parseError("^bogus").find("unknown algorithm \"bogus\""), std::string::npos);
  EXPECT_NE(parseError("gather=ring").find("unknown collective \"gather\""), std::string::npos);
  EXPECT_NE(parseError("allreduce=pairwise").find("allreduce has no pairwise"), std::string::npos);
  EXPECT_NE(parseError("alltoall=^pairwise,alltoall=^oneshot").find("leaves alltoall no algorithm"), std::string::npos);
  EXPECT_NE(parseError("broadcast=^ring,broadcast=^tree,broadcast=^hierarchical,broadcast=^oneshot")
                .find("leaves broadcast no algorithm"),
            std::string::npos);
}

TEST(ProtoSetting, ParsesNamesListsAndExclusion) {
  ProtocolSetting p;
  ASSERT_TRUE(parseProtocolSetting("", &p).isOk());
  EXPECT_TRUE(p.allows(Protocol::kSimple) && p.allows(Protocol::kStreaming));
  ASSERT_TRUE(parseProtocolSetting("simple", &p).isOk());
  EXPECT_TRUE(p.allows(Protocol::kSimple) && !p.allows(Protocol::kStreaming));
  ASSERT_TRUE(parseProtocolSetting("^simple", &p).isOk());
  EXPECT_TRUE(!p.allows(Protocol::kSimple) && p.allows(Protocol::kStreaming) && p.allows(Protocol::kLowLatency));
  ASSERT_TRUE(parseProtocolSetting("ll", &p).isOk());
  EXPECT_TRUE(!p.allows(Protocol::kSimple) && !p.allows(Protocol::kStreaming) && p.allows(Protocol::kLowLatency));
  Status bad = parseProtocolSetting("ll128", &p);
  EXPECT_EQ(bad.code(), loomInvalidArgument);
  EXPECT_NE(bad.message().find("unknown protocol \"ll128\""), std::string::npos) << bad.message();
  bad = parseProtocolSetting("^simple,^streaming,^ll", &p);
  EXPECT_NE(bad.message().find("leaves no protocol"), std::string::npos) << bad.message();
}

TEST(ProtoSetting, StreamingRunsOnlyPastTheCache) {
  const size_t threshold = CommProfile::defaults(4, 1).streamingMinBytes;
  // Built in, streaming (6 GB/s) beats plain stores (4.5) once a call leaves the cache.
  EXPECT_EQ(chooseWith("", "", shape(kAllReduce, threshold)).protocol, Protocol::kStreaming);
  EXPECT_EQ(chooseWith("", "", shape(kAllReduce, threshold - 4)).protocol, Protocol::kSimple);
  EXPECT_EQ(chooseWith("", "simple", shape(kAllReduce, threshold)).protocol, Protocol::kSimple);
  // Forced where it cannot run, streaming gives way to plain stores.
  EXPECT_EQ(chooseWith("", "streaming", shape(kAllReduce, 8)).protocol, Protocol::kSimple);
  // In place, one buffer fits the cache up to twice the size.
  CallShape inPlace = shape(kAllReduce, threshold);
  inPlace.info.inPlace = true;
  EXPECT_EQ(chooseWith("", "", inPlace).protocol, Protocol::kSimple);
  inPlace.bytes = 2 * threshold;
  CallShape broadcast = shape(kBroadcast, 2 * threshold);
  broadcast.info.inPlace = true;
  EXPECT_EQ(chooseWith("", "", broadcast).protocol, Protocol::kStreaming);
  // A ring allreduce on one host takes each slice through all its steps in turn, so in place
  // it writes only lines it has just read, at any size: plain stores unless forced.
  EXPECT_EQ(chooseWith("ring", "", inPlace).protocol, Protocol::kSimple);
  // ...and, predicted at the streaming speed it keeps up with, stays the choice.
  for (size_t bytes : {2 * threshold, size_t{128} << 20}) {
    inPlace.bytes = bytes;
    const Choice choice = chooseWith("", "", inPlace);
    EXPECT_EQ(choice.algorithm, Algorithm::kRing) << bytes;
    EXPECT_EQ(choice.protocol, Protocol::kSimple) << bytes;
  }
  EXPECT_EQ(chooseWith("ring", "streaming", inPlace).protocol, Protocol::kStreaming);
}

// In place is each rank's own (CallInfo::inPlace: NCCL lets one rank pass one buffer and
// another two), and ranks that ran different algorithms would exchange bytes that fit each
// other's counts and mean something else: the algorithm may not depend on it, only the
// protocol (each rank's own stores). Every collective that has an in-place form, shape and
// size around the cache's edge, where in place changes what the model prices, built-in and
// with a calibration's constants.
TEST(Tuner, TheAlgorithmDoesNotDependOnInPlace) {
  for (int nhosts : {1, 2, 4}) {
    for (int perHost : {1, 2, 3, 4, 8}) {
      if (nhosts * perHost < 2) continue;
      for (bool calibrated : {false, true}) {
        CommProfile p = CommProfile::defaults(nhosts * perHost, nhosts);
        if (calibrated) {
          // An Intel Xeon VM's machine calibration (docs/RESULTS.md).
          p.intra = {1.06, 5.12};
          p.reduceGbps = 35.8;
          p.copyGbps = 58;
          p.streamingGbps = 4.78;
          p.directMinBytes = 128 << 10;
        }
        for (CallInfo::Kind kind : {kAllReduce, kBroadcast, CallInfo::Kind::kReduce, CallInfo::Kind::kAllGather,
                                    CallInfo::Kind::kReduceScatter}) {
          for (size_t bytes = 4 << 10; bytes <= 4 * p.streamingMinBytes; bytes += bytes / 8) {
            CallShape s = shape(kind, bytes, nhosts == 1);
            const Algorithm outOfPlace =
                loom::chooseAlgorithm(s, AlgorithmSetting(), ProtocolSetting(), p).algorithm;
            s.info.inPlace = true;
            EXPECT_EQ(loom::chooseAlgorithm(s, AlgorithmSetting(), ProtocolSetting(), p).algorithm, outOfPlace)
                << collectiveName(kind) << ", " << nhosts << " hosts of " << perHost << ", " << bytes
                << " bytes, calibrated " << calibrated;
          }
        }
      }
    }
  }
}

// Where the ranks agreed that all of them are in place (the mapped allreduce's first round),
// the algorithms are compared in place; a rank alone in place, or out of place, is compared out
// of place. With an Intel Xeon VM's machine calibration the model prices recursive doubling
// in place (the peer's whole buffer through the FIFO, reduced whole) above the ring from a
// few MiB, and out of place (read straight from the peer's buffer) below it to 16 MiB.
TEST(Tuner, EveryRankInPlaceComparesTheAlgorithmsInPlace) {
  CommProfile p = CommProfile::defaults(2, 1);
  p.intra = {1.08, 5.54};
  p.reduceGbps = 33.7;
  p.copyGbps = 50.9;
  p.streamingGbps = 5.29;
  p.streamingMinBytes = 32 << 20;
  p.directMinBytes = 32 << 10;
  size_t differ = 0;
  for (size_t bytes = 64 << 10; bytes <= size_t{256} << 20; bytes *= 2) {
    CallShape s = shape(kAllReduce, bytes, false);
    const Algorithm outOfPlace = loom::chooseAlgorithm(s, AlgorithmSetting(), ProtocolSetting(), p).algorithm;
    s.everyRankInPlace = true;
    EXPECT_EQ(loom::chooseAlgorithm(s, AlgorithmSetting(), ProtocolSetting(), p).algorithm, outOfPlace) << bytes;
    s.info.inPlace = true;
    const Choice everyRank = loom::chooseAlgorithm(s, AlgorithmSetting(), ProtocolSetting(), p);
    s.everyRankInPlace = false;
    EXPECT_EQ(loom::chooseAlgorithm(s, AlgorithmSetting(), ProtocolSetting(), p).algorithm, outOfPlace) << bytes;
    // The fastest in place by the model, whichever it is.
    for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRecursiveDoubling}) {
      EXPECT_LE(everyRank.predictedUs, predictUs(kAllReduce, a, Protocol::kSimple, bytes, p, true) * (1 + 1e-9))
          << bytes << " " << algorithmName(a);
    }
    if (everyRank.algorithm != outOfPlace) ++differ;
  }
  EXPECT_GE(differ, 1u);
  // In place, recursive doubling sends only what it rewrites: nothing is read directly.
  EXPECT_GT(predictUs(kAllReduce, Algorithm::kRecursiveDoubling, Protocol::kSimple, 4 << 20, p, true),
            predictUs(kAllReduce, Algorithm::kRecursiveDoubling, Protocol::kSimple, 4 << 20, p));
  CallShape s = shape(kAllReduce, 4 << 20, false);
  EXPECT_EQ(loom::chooseAlgorithm(s, AlgorithmSetting(), ProtocolSetting(), p).algorithm,
            Algorithm::kRecursiveDoubling);
  s.info.inPlace = s.everyRankInPlace = true;
  EXPECT_EQ(loom::chooseAlgorithm(s, AlgorithmSetting(), ProtocolSetting(), p).algorithm, Algorithm::kRing);
}

TEST(Tuner, SwitchesToRingWhereItsModelSays) {
  // Two hosts: recursive doubling's log2(n) network latencies win small calls, the ring's
  // bandwidth large ones; the choice changes exactly at the model's crossover.
  const CallShape small = shape(kAllReduce, 8, false);
  const CommProfile profile = profileFor(small);
  const size_t crossover = crossoverBytes(kAllReduce, Algorithm::kRecursiveDoubling, Algorithm::kRing, profile);
  ASSERT_GT(crossover, 8u);
  ASSERT_LT(crossover, size_t{1} << 30);
  EXPECT_EQ(choose("ring,rd", shape(kAllReduce, crossover - 4, false)), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(choose("ring,rd", shape(kAllReduce, crossover, false)), Algorithm::kRing);
  EXPECT_EQ(choose("ring,rd", small), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(choose("ring,rd", shape(kAllReduce, 64 << 20, false)), Algorithm::kRing);
}

TEST(Tuner, ChoiceCarriesItsPredictionAndReasoning) {
  AlgorithmSetting algorithms;
  ASSERT_TRUE(parseAlgorithmSetting("^oneshot", &algorithms).isOk());
  const CallShape s = shape(kAllReduce, 1 << 20);
  const Choice c = loom::chooseAlgorithm(s, algorithms, ProtocolSetting(), profileFor(s));
  EXPECT_STREQ(c.why, "predicted fastest");
  EXPECT_DOUBLE_EQ(c.predictedUs, predictUs(kAllReduce, c.algorithm, Protocol::kSimple, 1 << 20, profileFor(s)));
  const std::string text = describePredictions(s, algorithms, ProtocolSetting(), profileFor(s));
  EXPECT_EQ(text.rfind("ring/simple ", 0), 0u) << text;  // fastest first
  EXPECT_NE(text.find("tree/simple "), std::string::npos) << text;
  EXPECT_NE(text.find("rd/simple "), std::string::npos) << text;
  EXPECT_EQ(text.find("oneshot"), std::string::npos) << text;  // excluded, so not a candidate
  const std::string small = describePredictions(shape(kAllReduce, 8, false), AlgorithmSetting(), ProtocolSetting(),
                                                profileFor(shape(kAllReduce, 8, false)));
  EXPECT_NE(small.find("(oneshot cannot run here)"), std::string::npos) << small;
}

// Where the machine calibration timed a collective on the board against the FIFO (two ranks of
// one host), that timing decides for two ranks and caps the board for more; LOOM_ALGO still
// forces the board up to its slot.
TEST(Tuner, TheBoardGoesAsFarAsTheCalibrationTimedIt) {
  const ProtocolSetting anyProtocol;
  const AlgorithmSetting any;
  CommProfile pair = CommProfile::defaults(2, 1);
  const size_t broadcast = static_cast<size_t>(kBroadcast), allReduce = static_cast<size_t>(kAllReduce);
  // Untimed, the model's choice: the 16 KiB allreduce through the FIFO, the 8 B one on the board.
  ASSERT_NE(chooseAlgorithm(shape(kAllReduce, 16 << 10), any, anyProtocol, pair).algorithm, Algorithm::kOneShot);
  ASSERT_EQ(chooseAlgorithm(shape(kBroadcast, 8), any, anyProtocol, pair).algorithm, Algorithm::kOneShot);

  pair.oneShotTimedMax[allReduce] = 16 << 10;
  pair.oneShotTimedMax[broadcast] = 4 << 10;
  Choice timed = chooseAlgorithm(shape(kAllReduce, 16 << 10), any, anyProtocol, pair);
  EXPECT_EQ(timed.algorithm, Algorithm::kOneShot);
  EXPECT_NE(std::string(timed.why).find("machine calibration"), std::string::npos) << timed.why;
  EXPECT_NE(chooseAlgorithm(shape(kAllReduce, (16 << 10) + 4), any, anyProtocol, pair).algorithm,
            Algorithm::kOneShot);
  EXPECT_EQ(chooseAlgorithm(shape(kBroadcast, 8), any, anyProtocol, pair).algorithm, Algorithm::kOneShot);
  EXPECT_NE(chooseAlgorithm(shape(kBroadcast, 8 << 10), any, anyProtocol, pair).algorithm, Algorithm::kOneShot);
  // Across hosts there is no board to time.
  EXPECT_NE(chooseAlgorithm(shape(kBroadcast, 8, false), any, anyProtocol, pair).algorithm, Algorithm::kOneShot);

  // More ranks: the model decides below the limit (a 16 KiB allreduce of 4 ranks is the
  // FIFO's), and above it the board is out.
  CommProfile four = CommProfile::defaults(4, 1);
  four.oneShotTimedMax = pair.oneShotTimedMax;
  EXPECT_NE(chooseAlgorithm(shape(kAllReduce, 16 << 10), any, anyProtocol, four).algorithm, Algorithm::kOneShot);
  EXPECT_EQ(chooseAlgorithm(shape(kBroadcast, 4 << 10), any, anyProtocol, four).algorithm,
            chooseAlgorithm(shape(kBroadcast, 4 << 10), any, anyProtocol, CommProfile::defaults(4, 1)).algorithm);
  four.oneShotTimedMax[broadcast] = 16;
  EXPECT_NE(chooseAlgorithm(shape(kBroadcast, 64), any, anyProtocol, four).algorithm, Algorithm::kOneShot);

  // LOOM_ALGO's forcing goes by the slot.
  AlgorithmSetting board;
  ASSERT_TRUE(parseAlgorithmSetting("oneshot", &board).isOk());
  EXPECT_EQ(chooseAlgorithm(shape(kBroadcast, 32 << 10), board, anyProtocol, pair).algorithm, Algorithm::kOneShot);
  // LOOM_ALGO without the board keeps it out whatever was timed.
  AlgorithmSetting noBoard;
  ASSERT_TRUE(parseAlgorithmSetting("^oneshot", &noBoard).isOk());
  EXPECT_NE(chooseAlgorithm(shape(kAllReduce, 8), noBoard, anyProtocol, pair).algorithm, Algorithm::kOneShot);
}

TEST(ChoiceCacheTest, ChoosesOncePerShapeAndForgetsTheOldest) {
  ChoiceCache cache;
  int evaluations = 0;
  auto choose = [&evaluations](Algorithm a) {
    return [&evaluations, a] {
      ++evaluations;
      return Choice{a, Protocol::kSimple, 1.0, "test"};
    };
  };
  CallShape small = shape(CallInfo::Kind::kAllReduce, 8);
  EXPECT_EQ(cache.get(small.info, small.bytes, false, choose(Algorithm::kOneShot)).algorithm, Algorithm::kOneShot);
  EXPECT_EQ(cache.get(small.info, small.bytes, false, choose(Algorithm::kRing)).algorithm, Algorithm::kOneShot);
  EXPECT_EQ(evaluations, 1);
  // Another size, collective or in-place flag (this rank's, or every rank's) is another shape.
  CallShape inPlace = small;
  inPlace.info.inPlace = true;
  EXPECT_EQ(cache.get(inPlace.info, inPlace.bytes, false, choose(Algorithm::kRing)).algorithm, Algorithm::kRing);
  EXPECT_EQ(cache.get(inPlace.info, inPlace.bytes, true, choose(Algorithm::kTree)).algorithm, Algorithm::kTree);
  EXPECT_EQ(cache.get(shape(CallInfo::Kind::kBroadcast, 8).info, 8, false, choose(Algorithm::kTree)).algorithm,
            Algorithm::kTree);
  EXPECT_EQ(evaluations, 4);
  // Eight shapes fit; the ninth replaces the first one made.
  for (size_t bytes = 16; bytes < 16 * 6; bytes += 16) {
    cache.get(shape(CallInfo::Kind::kAllReduce, bytes).info, bytes, false, choose(Algorithm::kRecursiveDoubling));
  }
  EXPECT_EQ(evaluations, 9);
  EXPECT_EQ(cache.get(small.info, small.bytes, false, choose(Algorithm::kRing)).algorithm, Algorithm::kRing);
  EXPECT_EQ(evaluations, 10);
}

// Threads that hit and miss at once (more shapes than entries, so entries are rewritten
// while others read them) always get their own shape's choice, never a torn mix of two.
TEST(ChoiceCacheTest, ReadersRacingWritersGetWholeChoices) {
  ChoiceCache cache;
  static const char* const kWhy[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"};
  auto expected = [](size_t i) {
    return Choice{static_cast<Algorithm>(i % 4), static_cast<Protocol>(i % 2), static_cast<double>(i), kWhy[i]};
  };
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 20000; ++k) {
        const size_t i = static_cast<size_t>(k * 7 + t) % 12;
        Choice c =
            cache.get(shape(CallInfo::Kind::kAllReduce, 8).info, 8 * (i + 1), false, [&] { return expected(i); });
        Choice want = expected(i);
        if (c.algorithm != want.algorithm || c.protocol != want.protocol || c.predictedUs != want.predictedUs ||
            c.why != want.why) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace loom
