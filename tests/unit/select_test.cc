// LOOM_ALGO's syntax (lists, ^ exclusion, per collective) and the choice it leaves.
#include <gtest/gtest.h>

#include "algorithms/select.h"

namespace loom {
namespace {

CallShape shape(CallInfo::Kind kind, size_t bytes, bool oneHost = true) {
  CallShape s;
  s.info.kind = kind;
  s.bytes = bytes;
  s.nranks = 4;
  s.oneHost = oneHost;
  return s;
}

Algorithm choose(const std::string& algo, const CallShape& s) {
  AlgorithmSetting setting;
  Status status = parseAlgorithmSetting(algo, &setting);
  EXPECT_TRUE(status.isOk()) << status.message();
  return chooseAlgorithm(s, setting).algorithm;
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

TEST(AlgoSetting, UnsetFollowsTheSizeRule) {
  EXPECT_EQ(choose("", shape(kAllReduce, 8)), Algorithm::kOneShot);
  EXPECT_EQ(choose("", shape(kAllReduce, 8, false)), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(choose("", shape(kAllReduce, 1 << 20)), Algorithm::kRing);
  EXPECT_EQ(choose("", shape(kBroadcast, 8)), Algorithm::kTree);
}

TEST(AlgoSetting, OneNameForcesItWhereItExists) {
  EXPECT_EQ(choose("tree", shape(kAllReduce, 1 << 20)), Algorithm::kTree);
  EXPECT_EQ(choose("ring", shape(kBroadcast, 8)), Algorithm::kRing);
  EXPECT_EQ(choose("ring", shape(kAllToAll, 8)), Algorithm::kPairwise);  // alltoall has no ring
  AlgorithmSetting setting;
  ASSERT_TRUE(parseAlgorithmSetting("rd", &setting).isOk());
  Choice c = chooseAlgorithm(shape(kAllReduce, 8), setting);
  EXPECT_STREQ(c.why, "forced by LOOM_ALGO");
}

TEST(AlgoSetting, AListAllowsOnlyThoseInTheRulesOrder) {
  // At 8 bytes the rule prefers oneshot, then rd, then tree.
  EXPECT_EQ(choose("ring,tree", shape(kAllReduce, 8)), Algorithm::kTree);
  EXPECT_EQ(choose("ring,tree", shape(kAllReduce, 1 << 20)), Algorithm::kRing);
}

TEST(AlgoSetting, CaretExcludes) {
  EXPECT_EQ(choose("^oneshot", shape(kAllReduce, 8)), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(choose("allreduce=^oneshot,allreduce=^rd", shape(kAllReduce, 8)), Algorithm::kTree);
  EXPECT_EQ(choose("^ring", shape(kBroadcast, 1 << 20)), Algorithm::kTree);
  EXPECT_EQ(choose("allreduce=^ring", shape(kBroadcast, 1 << 20)), Algorithm::kRing);  // only allreduce
  // Excluding for every collective leaves one whose only algorithm it is alone.
  EXPECT_EQ(choose("^pairwise", shape(kAllToAll, 8)), Algorithm::kPairwise);
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
  EXPECT_NE(parseError("alltoall=^pairwise").find("leaves alltoall no algorithm"), std::string::npos);
  EXPECT_NE(parseError("broadcast=^ring,broadcast=^tree").find("leaves broadcast no algorithm"), std::string::npos);
}

}  // namespace
}  // namespace loom
