// Checks the algorithms' schedules without running them: trees are trees, and for every
// algorithm, rank count and size, what each rank sends on a link is exactly what the peer
// expects to receive on it, step for step. Then a simulation runs every plan on in-memory
// links with the executor's ordering rules and checks the result and that nothing deadlocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/tree.h"
#include "kernels/reduce.h"

namespace loom {
namespace {

TEST(Trees, EveryRankHasOneParentAndTheRootReachesAll) {
  for (int n = 1; n <= 70; ++n) {
    for (int t = 0; t < 3; ++t) {
      for (int root = 0; root < (t == 2 ? n : 1); ++root) {
        auto node = [&](int r) { return t == 2 ? rootedTree(n, r, root) : doubleTree(n, r, t); };
        int roots = 0;
        std::vector<int> parentSeen(static_cast<size_t>(n), 0);
        for (int r = 0; r < n; ++r) {
          TreeNode x = node(r);
          if (x.parent < 0) ++roots;
          for (int c : x.children) {
            if (c < 0) continue;
            ASSERT_LT(c, n);
            EXPECT_EQ(node(c).parent, r) << "n=" << n << " tree " << t << " child " << c;
            ++parentSeen[static_cast<size_t>(c)];
          }
        }
        ASSERT_EQ(roots, 1) << "n=" << n << " tree " << t;
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(parentSeen[static_cast<size_t>(r)], node(r).parent < 0 ? 0 : 1) << "n=" << n << " rank " << r;
        }
        // Depth stays logarithmic.
        for (int r = 0; r < n; ++r) {
          int depth = 0;
          for (int x = r; node(x).parent >= 0; x = node(x).parent) ASSERT_LT(++depth, 2 * 8) << "n=" << n;
        }
      }
    }
  }
}

// Across hosts: one root per tree, parents and children agree, at most three children, and
// only H-1 edges leave a host; the two trees leave each host of two or more ranks through
// different ranks.
TEST(Trees, HostDoubleTreeCrossesHostsOncePerHost) {
  const std::vector<std::vector<int>> layouts = {{0, 3}, {0, 2, 4, 6}, {0, 1, 2}, {0, 4, 5, 9, 10}, {0, 3, 6, 8}};
  for (const std::vector<int>& starts : layouts) {
    const int n = starts.back() + 2;
    auto hostOf = [&](int p) {
      int h = 0;
      while (h + 1 < static_cast<int>(starts.size()) && starts[static_cast<size_t>(h + 1)] <= p) ++h;
      return h;
    };
    for (int t = 0; t < 2; ++t) {
      int roots = 0, crossing = 0;
      for (int p = 0; p < n; ++p) {
        TreeNode x = hostDoubleTree(starts, n, p, t);
        roots += x.parent < 0;
        if (x.parent >= 0 && hostOf(x.parent) != hostOf(p)) ++crossing;
        for (int c : x.children) {
          if (c < 0) continue;
          ASSERT_LT(c, n);
          EXPECT_EQ(hostDoubleTree(starts, n, c, t).parent, p) << "tree " << t << " child " << c;
        }
      }
      EXPECT_EQ(roots, 1);
      EXPECT_EQ(crossing, static_cast<int>(starts.size()) - 1);
    }
    for (size_t h = 0; h < starts.size(); ++h) {
      int first = starts[h], last = (h + 1 < starts.size() ? starts[h + 1] : n) - 1;
      if (first == last) continue;
      auto leavesThrough = [&](int t) {
        for (int p = first; p <= last; ++p) {
          TreeNode x = hostDoubleTree(starts, n, p, t);
          if (x.parent >= 0 && hostOf(x.parent) != static_cast<int>(h)) return p;
        }
        return -1;  // the root's host
      };
      if (leavesThrough(0) >= 0 && leavesThrough(1) >= 0) {
        EXPECT_NE(leavesThrough(0), leavesThrough(1)) << "host " << h;
      }
    }
  }
}

TEST(Trees, DoubleTreeLeavesAreInnerNodesOfTheOtherTree) {
  for (int n = 4; n <= 64; n *= 2) {
    for (int r = 0; r < n; ++r) {
      TreeNode a = doubleTree(n, r, 0), b = doubleTree(n, r, 1);
      EXPECT_FALSE(a.isLeaf() && b.isLeaf()) << "n=" << n << " rank " << r << " is a leaf of both trees";
    }
  }
}

// One rank's plan for a call, built on buffers the simulation owns.
struct RankRun {
  std::vector<int32_t> send, recv;
  Plan plan;
  std::vector<bool> done;
  std::vector<size_t> received;  // per step
  std::vector<std::vector<char>> staging;
};

using Builder = void (*)(const CollectiveArgs&, Plan&);

struct Case {
  const char* name;
  CallInfo::Kind kind;
  Builder build;
};

const Case kCases[] = {
    {"ring allreduce", CallInfo::Kind::kAllReduce, ringAllReduce},
    {"ring allreduce slice by slice", CallInfo::Kind::kAllReduce,
     [](const CollectiveArgs& a, Plan& plan) {
       CollectiveArgs bySlice = a;
       bySlice.sliceBySlice = true;
       ringAllReduce(bySlice, plan);
     }},
    {"tree allreduce", CallInfo::Kind::kAllReduce, treeAllReduce},
    {"rd allreduce", CallInfo::Kind::kAllReduce, recursiveDoublingAllReduce},
    {"ring broadcast", CallInfo::Kind::kBroadcast, ringBroadcast},
    {"tree broadcast", CallInfo::Kind::kBroadcast, treeBroadcast},
    {"ring reduce", CallInfo::Kind::kReduce, ringReduce},
    {"tree reduce", CallInfo::Kind::kReduce, treeReduce},
    {"ring allgather", CallInfo::Kind::kAllGather, ringAllGather},
    {"ring reducescatter", CallInfo::Kind::kReduceScatter, ringReduceScatter},
    {"pairwise alltoall", CallInfo::Kind::kAllToAll, pairwiseAllToAll},
    {"hierarchical allreduce", CallInfo::Kind::kAllReduce, hierarchicalAllReduce},
    {"hierarchical broadcast", CallInfo::Kind::kBroadcast, hierarchicalBroadcast},
    {"hierarchical reduce", CallInfo::Kind::kReduce, hierarchicalReduce},
};

int32_t input(int rank, size_t i) { return static_cast<int32_t>(rank * 1000 + static_cast<int>(i % 997)); }

// Runs the plans of all ranks on unbounded in-memory links, taking steps in the executor's
// order rules (per link and direction in plan order, `after`, `writeAfter`). Returns false on
// deadlock.
bool simulate(std::vector<RankRun>& ranks, int links) {
  // Bytes in flight per (from, to, link).
  std::map<std::tuple<int, int, int>, std::deque<char>> wire;
  const int n = static_cast<int>(ranks.size());
  for (;;) {
    bool progressed = false, pending = false;
    for (int r = 0; r < n; ++r) {
      RankRun& run = ranks[static_cast<size_t>(r)];
      const std::pmr::vector<Step>& steps = run.plan.steps;
      std::set<std::tuple<int, int, bool>> blocked;  // (peer, link, send) heads not done
      bool localBlocked = false;
      for (size_t i = 0; i < steps.size(); ++i) {
        if (run.done[i]) continue;
        pending = true;
        const Step& s = steps[i];
        bool local = s.peer == Step::kNone;
        auto key = std::make_tuple(s.peer, s.channel % links, s.kind == Step::Kind::kSend);
        if (local ? localBlocked : blocked.count(key) > 0) continue;
        if (local) localBlocked = true; else blocked.insert(key);
        if (s.after != Step::kNone && !run.done[static_cast<size_t>(s.after)]) continue;
        const CallInfo& call = run.plan.callOfStep(i);
        if (s.kind == Step::Kind::kCopy) {
          kernels::copy(s.dst, s.src, s.bytes);
        } else if (s.kind == Step::Kind::kSend) {
          auto& q = wire[std::make_tuple(r, s.peer, s.channel % links)];
          const char* p = static_cast<const char*>(s.src);
          q.insert(q.end(), p, p + s.bytes);
        } else {
          auto& q = wire[std::make_tuple(s.peer, r, s.channel % links)];
          if (q.size() < s.bytes) continue;
          if (s.kind == Step::Kind::kRecvReduce && s.writeAfter != Step::kNone &&
              !run.done[static_cast<size_t>(s.writeAfter)]) {
            continue;
          }
          std::vector<char> in(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(s.bytes));
          q.erase(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(s.bytes));
          if (s.kind == Step::Kind::kRecv) {
            if (s.bytes > 0) std::memcpy(s.dst, in.data(), s.bytes);
          } else {
            kernels::reduce(s.dst, s.src, in.data(), s.bytes / 4, call.type, call.op);
          }
        }
        if (s.finalize && call.op == loomAvg) kernels::scale(s.dst, s.dst, s.bytes / 4, call.type, n);
        run.done[i] = true;
        progressed = true;
        if (local) localBlocked = false; else blocked.erase(key);
      }
    }
    if (!pending) break;
    if (!progressed) return false;
  }
  for (auto& [key, q] : wire) {
    if (!q.empty()) ADD_FAILURE() << "bytes left on link " << std::get<0>(key) << "->" << std::get<1>(key);
  }
  return true;
}

void checkCase(const Case& c, int n, size_t count, int channels, size_t sliceBytes, bool inPlace, int links,
               const RingOrder* order = nullptr, int root = -1) {
  std::string orderText;
  for (int r : order ? order->ranks() : std::vector<int>{}) orderText += " " + std::to_string(r);
  SCOPED_TRACE(testing::Message() << c.name << " n=" << n << " count=" << count << " channels=" << channels
                                  << " slice=" << sliceBytes << (inPlace ? " in place" : "") << " links=" << links
                                  << (order ? " order" + orderText : "") << " root=" << root);
  if (root < 0) root = n > 1 ? n / 2 + 1 < n ? n / 2 + 1 : 0 : 0;
  const bool wide = c.kind == CallInfo::Kind::kAllGather || c.kind == CallInfo::Kind::kReduceScatter ||
                    c.kind == CallInfo::Kind::kAllToAll;
  const size_t total = wide ? count * static_cast<size_t>(n) : count;
  std::vector<RankRun> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    RankRun& run = ranks[static_cast<size_t>(r)];
    size_t sendElems = c.kind == CallInfo::Kind::kAllGather ? count : total;
    size_t recvElems = c.kind == CallInfo::Kind::kReduceScatter ? count : total;
    run.send.resize(std::max<size_t>(sendElems, 1));
    for (size_t i = 0; i < sendElems; ++i) run.send[i] = input(r, i);
    run.recv.assign(std::max<size_t>(recvElems, 1), -7);
    CollectiveArgs a;
    a.info.kind = c.kind;
    a.info.type = loomInt32;
    a.info.op = loomSum;
    a.info.root = root;
    a.info.count = count;
    a.rank = r;
    a.nranks = n;
    a.channels = channels;
    a.sliceBytes = sliceBytes;
    a.order = order;
    a.send = run.send.data();
    a.recv = run.recv.data();
    bool inPlaceOk = c.kind != CallInfo::Kind::kAllToAll;
    if (inPlace && inPlaceOk) {
      // NCCL's in-place forms: the rank's own block inside the bigger buffer.
      if (c.kind == CallInfo::Kind::kAllGather) {
        run.recv.assign(total, -7);
        for (size_t i = 0; i < count; ++i) run.recv[static_cast<size_t>(r) * count + i] = input(r, i);
        a.recv = run.recv.data();
        a.send = run.recv.data() + static_cast<size_t>(r) * count;
      } else if (c.kind == CallInfo::Kind::kReduceScatter) {
        a.recv = run.send.data() + static_cast<size_t>(r) * count;
      } else {
        run.recv = run.send;
        a.send = a.recv = run.recv.data();
      }
    }
    run.plan.beginCall(a.info);
    c.build(a, run.plan);
    run.done.assign(run.plan.steps.size(), false);
  }
  ASSERT_TRUE(simulate(ranks, links)) << "deadlock";
  for (int r = 0; r < n; ++r) {
    const RankRun& run = ranks[static_cast<size_t>(r)];
    const int32_t* out = run.recv.data();
    if (inPlace && c.kind == CallInfo::Kind::kReduceScatter) out = run.send.data() + static_cast<size_t>(r) * count;
    auto sumAt = [&](size_t i) {
      int32_t s = 0;
      for (int q = 0; q < n; ++q) s += input(q, i);
      return s;
    };
    for (size_t i = 0; i < (c.kind == CallInfo::Kind::kReduceScatter ? count : total); ++i) {
      int32_t want;
      switch (c.kind) {
        case CallInfo::Kind::kAllReduce: want = sumAt(i); break;
        case CallInfo::Kind::kBroadcast: want = input(root, i); break;
        case CallInfo::Kind::kReduce: want = r == root ? sumAt(i) : -7; break;
        case CallInfo::Kind::kAllGather: want = input(static_cast<int>(i / count), i % count); break;
        case CallInfo::Kind::kReduceScatter: want = sumAt(static_cast<size_t>(r) * count + i); break;
        default: want = input(static_cast<int>(i / count), static_cast<size_t>(r) * count + i % count); break;
      }
      if (c.kind == CallInfo::Kind::kReduce && r != root && inPlace) continue;  // sendbuff is recvbuff there
      ASSERT_EQ(out[i], want) << "rank " << r << " element " << i;
    }
  }
}

TEST(Schedules, EveryAlgorithmDeliversAndNeverDeadlocks) {
  for (const Case& c : kCases) {
    for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{100}, size_t{1031}}) {
        for (bool inPlace : {false, true}) {
          // slices of 16 bytes make even small counts many-slice pipelines
          checkCase(c, n, count, 1, 16, inPlace, 1);
          checkCase(c, n, count, 2, 64, inPlace, 2);
          checkCase(c, n, count, 2, 16, inPlace, 1);  // two channels sharing one link
        }
      }
    }
  }
}

// Rings and trees follow the topology's order (RingOrder); every order must give every
// rank the same results as rank order, roots anywhere on the ring.
TEST(Schedules, AnyRingOrderDeliversTheSameResults) {
  std::mt19937 random(5);
  for (int n : {3, 4, 5, 6, 8, 9}) {
    std::vector<std::vector<int>> orders;
    std::vector<int> ranks(static_cast<size_t>(n));
    std::iota(ranks.begin(), ranks.end(), 0);
    orders.emplace_back(ranks.rbegin(), ranks.rend());
    std::vector<int> evensThenOdds;
    for (int parity : {0, 1}) {
      for (int r = parity; r < n; r += 2) evensThenOdds.push_back(r);
    }
    orders.push_back(evensThenOdds);
    std::shuffle(ranks.begin(), ranks.end(), random);
    orders.push_back(ranks);
    // One host, two halves, and hosts of 2, 3 and the rest: the tree allreduce takes its
    // across-hosts form whenever there are several.
    const std::vector<std::vector<int>> hostLayouts = {{}, {0, n / 2}, {0, 2, 5}};
    for (const std::vector<int>& o : orders) {
      for (const std::vector<int>& hosts : hostLayouts) {
        if (!hosts.empty() && hosts.back() >= n) continue;
        RingOrder order(o, hosts);
        for (const Case& c : kCases) {
          for (size_t count : {size_t{1}, size_t{7}, size_t{1031}}) {
            for (bool inPlace : {false, true}) {
              checkCase(c, n, count, 1, 16, inPlace, 1, &order);
              checkCase(c, n, count, 2, 64, inPlace, 2, &order);
            }
          }
        }
      }
    }
  }
}

// Rank `rank` of `n`'s plan of 1024 int32 (sum, root 0) on 2 channels of 256-byte slices.
Plan planOf(const Case& c, int rank, int n, int32_t* send, int32_t* recv, const RingOrder* order = nullptr) {
  CollectiveArgs a;
  a.info.kind = c.kind;
  a.info.type = loomInt32;
  a.info.op = loomSum;
  a.info.count = 1024;
  a.info.root = 0;
  a.rank = rank;
  a.nranks = n;
  a.channels = 2;
  a.sliceBytes = 256;
  a.order = order;
  a.send = send;
  a.recv = recv;
  Plan plan;
  plan.beginCall(a.info);
  c.build(a, plan);
  return plan;
}

// A receive of a range its sender reduces into again (the result of an allreduce) comes
// through the FIFO; every other plain receive may read the sender's buffer.
TEST(Schedules, OnlyAllReduceResultsAreReceivedThroughTheFifo) {
  for (const Case& c : kCases) {
    if (c.build == recursiveDoublingAllReduce) continue;  // its plan is one-shot steps
    for (int n : {2, 3, 4, 8}) {
      std::vector<int32_t> send(4096, 1), recv(4096 * static_cast<size_t>(n));
      const Plan plan = planOf(c, n - 1, n, send.data(), recv.data());
      const bool allReduce = c.kind == CallInfo::Kind::kAllReduce;
      int receives = 0;
      for (const Step& s : plan.steps) {
        if (s.kind == Step::Kind::kSend) continue;  // the next test
        if (s.kind != Step::Kind::kRecv) {
          EXPECT_FALSE(s.viaFifo) << c.name << " n=" << n;
          continue;
        }
        ++receives;
        EXPECT_EQ(s.viaFifo, allReduce) << c.name << " n=" << n;
      }
      if (c.kind != CallInfo::Kind::kReduce && c.kind != CallInfo::Kind::kReduceScatter) {
        EXPECT_GT(receives, 0) << c.name << " n=" << n;
      }
    }
  }
}

// Hosts of equal and unequal sizes (first positions of each host), not in rank order, so
// positions and ranks differ.
struct HostsLayout {
  std::vector<int> starts;
  int n;
  RingOrder order;

  explicit HostsLayout(std::vector<int> hostStarts, int lastHostSize)
      : starts(hostStarts), n(hostStarts.back() + lastHostSize), order(reversed(n), hostStarts) {}
  static std::vector<int> reversed(int n) {
    std::vector<int> ranks(static_cast<size_t>(n));
    std::iota(ranks.rbegin(), ranks.rend(), 0);
    return ranks;
  }
  int hosts() const { return static_cast<int>(starts.size()); }
  int hostOf(int rank) const {
    const int p = order.positionOf(rank);
    int h = 0;
    while (h + 1 < hosts() && starts[static_cast<size_t>(h + 1)] <= p) ++h;
    return h;
  }
  // K: the fewest ranks on a host.
  size_t shards() const {
    int fewest = n;
    for (int h = 0; h < hosts(); ++h) fewest = std::min(fewest, (h + 1 < hosts() ? starts[static_cast<size_t>(h + 1)] : n) - starts[static_cast<size_t>(h)]);
    return static_cast<size_t>(fewest);
  }
};

const std::vector<HostsLayout>& hostsLayouts() {
  static const std::vector<HostsLayout> layouts = {HostsLayout({0, 2, 4, 6}, 2), HostsLayout({0, 3, 6}, 3),
                                                   HostsLayout({0, 1, 4}, 3), HostsLayout({0, 4, 5}, 3),
                                                   HostsLayout({0, 2, 5, 9}, 3)};
  return layouts;
}

// Whether a reduction of the plan waits for plan.steps[index] (writeAfter) to write the range
// that step sends.
bool rewrittenOnceSent(const Plan& plan, size_t index) {
  const Step& sent = plan.steps[index];
  const char* begin = static_cast<const char*>(sent.src);
  for (const Step& s : plan.steps) {
    const char* dst = static_cast<const char*>(s.dst);
    if (s.writeAfter == static_cast<int>(index) && dst < begin + sent.bytes && begin < dst + s.bytes) return true;
  }
  return false;
}

// A send is marked viaFifo exactly where the step that takes it on the peer reads through the
// FIFO, or where its own rank rewrites the range as soon as it is sent (recursive doubling in
// place, and from its second round): a mark the receiver does not honour would skip a direct
// read it takes (which such a range should skip: read directly, its lines are still shared
// with the peer's cache when the rewrite comes), and a missing one makes the sender post the
// bytes and wait for the receiver's decline. Returns the sends and how many were marked.
std::pair<int, int> expectSendsMarkedAsTaken(const Case& c, int n, const RingOrder* order, bool inPlace = false) {
  std::vector<std::vector<int32_t>> sends(static_cast<size_t>(n), std::vector<int32_t>(4096, 1));
  std::vector<std::vector<int32_t>> recvs(static_cast<size_t>(n),
                                          std::vector<int32_t>(4096 * static_cast<size_t>(n)));
  Plans plans;
  for (int r = 0; r < n; ++r) {
    const size_t i = static_cast<size_t>(r);
    plans.push_back(planOf(c, r, n, inPlace ? recvs[i].data() : sends[i].data(), recvs[i].data(), order));
  }
  // The k-th receive of `to` from `from` on `channel`, as the links deliver in order.
  auto receive = [&](int to, int from, int channel, int k) -> const Step* {
    for (const Step& s : plans[static_cast<size_t>(to)].steps) {
      const bool receives = s.kind == Step::Kind::kRecv || s.kind == Step::Kind::kRecvReduce;
      if (receives && s.peer == from && s.channel == channel && k-- == 0) return &s;
    }
    return nullptr;
  };
  int total = 0, marked = 0;
  const std::string where = std::string(c.name) + " n=" + std::to_string(n) + (order ? " across hosts" : "") +
                            (inPlace ? " in place" : "");
  for (int r = 0; r < n; ++r) {
    std::map<std::pair<int, int>, int> sentOn;  // (peer, channel): sends so far
    const Plan& plan = plans[static_cast<size_t>(r)];
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const Step& s = plan.steps[i];
      if (s.kind != Step::Kind::kSend) continue;
      const Step* there = receive(s.peer, r, s.channel, sentOn[{s.peer, s.channel}]++);
      EXPECT_NE(there, nullptr) << where << ": rank " << r << "'s send to " << s.peer;
      if (there == nullptr) continue;
      ++total;
      marked += s.viaFifo;
      EXPECT_EQ(s.viaFifo, takesThroughFifo(*there) || rewrittenOnceSent(plan, i))
          << where << ": rank " << r << " to " << s.peer << ", step " << i;
    }
  }
  EXPECT_GT(total, 0) << where;
  return {total, marked};
}

// The ring's reducing collectives mark every send, those whose receivers copy (and may read
// directly) none; every algorithm's marks match its receivers, on one host and across hosts.
TEST(Schedules, SendsGoThroughTheFifoWhereTheirReceiversTakeThem) {
  const std::set<std::string> allMarked = {"ring allreduce", "ring allreduce slice by slice", "ring reduce",
                                           "ring reducescatter"};
  const std::set<std::string> noneMarked = {"ring broadcast", "tree broadcast", "ring allgather",
                                            "pairwise alltoall"};
  for (const Case& c : kCases) {
    for (int n : {2, 3, 4, 5, 8}) {
      if (c.kind == CallInfo::Kind::kAllReduce) expectSendsMarkedAsTaken(c, n, nullptr, true);
      const auto [total, marked] = expectSendsMarkedAsTaken(c, n, nullptr);
      if (allMarked.count(c.name) > 0) {
        EXPECT_EQ(marked, total) << c.name << " n=" << n;
      }
      if (noneMarked.count(c.name) > 0) {
        EXPECT_EQ(marked, 0) << c.name << " n=" << n;
      }
    }
    for (const HostsLayout& layout : hostsLayouts()) expectSendsMarkedAsTaken(c, layout.n, &layout.order);
  }
}

// What the plans of a call of 4096 int32 send between hosts: the most any host sends, and the
// most any one connection (a rank to a peer on another host) carries.
struct NetworkLoad {
  size_t perHost = 0;
  size_t perConnection = 0;
};

NetworkLoad networkLoad(const Case& c, const HostsLayout& layout, int root) {
  std::vector<size_t> perHost(static_cast<size_t>(layout.hosts()), 0);
  std::map<std::pair<int, int>, size_t> perConnection;
  std::vector<int32_t> buffer(4096);
  for (int r = 0; r < layout.n; ++r) {
    CollectiveArgs a;
    a.info.kind = c.kind;
    a.info.type = loomInt32;
    a.info.op = loomSum;
    a.info.root = root;
    a.info.count = buffer.size();
    a.rank = r;
    a.nranks = layout.n;
    a.order = &layout.order;
    a.send = a.recv = buffer.data();
    Plan plan;
    plan.beginCall(a.info);
    c.build(a, plan);
    for (const Step& s : plan.steps) {
      if (s.kind != Step::Kind::kSend || layout.hostOf(s.peer) == layout.hostOf(r)) continue;
      perHost[static_cast<size_t>(layout.hostOf(r))] += s.bytes;
      perConnection[{r, s.peer}] += s.bytes;
    }
  }
  NetworkLoad load;
  load.perHost = *std::max_element(perHost.begin(), perHost.end());
  for (const auto& [pair, bytes] : perConnection) load.perConnection = std::max(load.perConnection, bytes);
  return load;
}

// Channels on links of their own and sharing one: every rank gets the sum, and each host
// sends the network only what the hierarchy needs, less than the flat ring's.
TEST(Schedules, HierarchicalAllReduceOverHostsOfAnySize) {
  const Case hierarchical{"hierarchical allreduce", CallInfo::Kind::kAllReduce, hierarchicalAllReduce};
  const Case ring{"ring allreduce", CallInfo::Kind::kAllReduce, ringAllReduce};
  for (const HostsLayout& layout : hostsLayouts()) {
    for (size_t count : {size_t{1}, size_t{13}, size_t{1031}}) {
      for (bool inPlace : {false, true}) {
        checkCase(hierarchical, layout.n, count, 1, 16, inPlace, 1, &layout.order);
        checkCase(hierarchical, layout.n, count, 3, 32, inPlace, 3, &layout.order);
        checkCase(hierarchical, layout.n, count, 2, 16, inPlace, 1, &layout.order);
      }
    }
    const size_t hosts = static_cast<size_t>(layout.hosts()), buffer = 4096 * 4, shards = layout.shards();
    SCOPED_TRACE(testing::Message() << layout.n << " ranks on " << hosts << " hosts");
    // Each of the K shard rings sends 2 (H-1)/H of its shard from every host (give or take an
    // element per chunk where the sizes do not divide).
    EXPECT_LE(networkLoad(hierarchical, layout, 0).perHost, 2 * (hosts - 1) * buffer / hosts + 2 * hosts * shards * 4);
    EXPECT_LT(networkLoad(hierarchical, layout, 0).perHost, networkLoad(ring, layout, 0).perHost);
  }
}

// From every root: every rank gets the root's buffer (broadcast), the root the sum (reduce,
// the other ranks' receive buffers untouched); a host sends the network no more than the
// flat chain does (the buffer once), spread over K connections of a shard each where the
// chain puts it all on one.
TEST(Schedules, HierarchicalBroadcastAndReduceOverHostsOfAnySize) {
  const Case cases[][2] = {
      {{"hierarchical broadcast", CallInfo::Kind::kBroadcast, hierarchicalBroadcast},
       {"ring broadcast", CallInfo::Kind::kBroadcast, ringBroadcast}},
      {{"hierarchical reduce", CallInfo::Kind::kReduce, hierarchicalReduce},
       {"ring reduce", CallInfo::Kind::kReduce, ringReduce}},
  };
  for (const auto& [hierarchical, chain] : cases) {
    for (const HostsLayout& layout : hostsLayouts()) {
      for (int root = 0; root < layout.n; ++root) {
        for (size_t count : {size_t{1}, size_t{13}, size_t{1031}}) {
          for (bool inPlace : {false, true}) {
            checkCase(hierarchical, layout.n, count, 1, 16, inPlace, 1, &layout.order, root);
            checkCase(hierarchical, layout.n, count, 3, 32, inPlace, 3, &layout.order, root);
            checkCase(hierarchical, layout.n, count, 2, 16, inPlace, 1, &layout.order, root);
          }
        }
        const size_t buffer = 4096 * 4, shards = layout.shards();
        SCOPED_TRACE(testing::Message() << hierarchical.name << ", " << layout.n << " ranks on " << layout.hosts()
                                        << " hosts, root " << root);
        const NetworkLoad mine = networkLoad(hierarchical, layout, root), flat = networkLoad(chain, layout, root);
        EXPECT_EQ(flat.perConnection, buffer);
        EXPECT_LE(mine.perHost, buffer);
        EXPECT_LE(mine.perConnection, (buffer / 4 + shards - 1) / shards * 4);
      }
    }
  }
}

TEST(Schedules, RingOrderMapsBothWays) {
  RingOrder order({2, 0, 3, 1});
  EXPECT_EQ(order.rankAt(0), 2);
  EXPECT_EQ(order.positionOf(2), 0);
  EXPECT_EQ(order.positionOf(1), 3);
  EXPECT_FALSE(order.isIdentity());
  EXPECT_TRUE(RingOrder({0, 1, 2}).isIdentity());
  CollectiveArgs a;
  a.nranks = 4;
  a.rank = 3;
  a.order = &order;
  EXPECT_EQ(a.position(), 2);
  EXPECT_EQ(a.rankAt(a.position() + 1), 1);
  EXPECT_EQ(a.rankAt(-1), 1);
}

}  // namespace
}  // namespace loom
