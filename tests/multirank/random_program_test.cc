// Random programs of calls, the same on every rank (drawn from one seed), each result checked
// against the reference (collective_reference.h): every collective, type and op, counts
// spread from 0 to 2 MiB with the sizes where Loom changes its way of moving bytes (the
// board, direct reads, the mapped allreduce) and one element either side, in place or not
// (on every rank, or on the even ranks alone: in place is each rank's own),
// at byte offsets that break every alignment, in heap, loomMemAlloc or registered memory, on
// the harness's communicator or on one split from it with the ranks numbered backwards;
// alone, in groups mixed with sends and receives, or queued on a host stream. The matrix
// (collectives_test) runs each case once on fresh links; this runs what one call leaves to
// the next: board rounds, mapped buffers, the choice cache, link state from calls of other
// sizes and protocols. RandomMismatch then changes one call of such a program on one rank, as
// a caller's bug would: every rank must end with an error, none at its deadline.
//
// A failure names the configuration, the program's seed, the batch and the call;
// LOOM_TEST_SEED=N runs every configuration with that seed, LOOM_TEST_BATCHES=N that many
// batches (docs/TESTING.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/sanitizer.h"
#include "multirank/collective_reference.h"
#include "multirank/harness.h"
#include "multirank/shared_records.h"

namespace {

using loomtest::Collective;
using loomtest::CollectiveCase;
using loomtest::CollectiveRun;
using loomtest::Mode;
using loomtest::RankRecord;
using loomtest::SharedRecords;
using loomtest::record;
using loomtest::ScopedEnv;

constexpr size_t kMostBufferBytes = 2 << 20;  // one call's send or receive side
constexpr size_t kGuard = 64;                 // as around CollectiveRun's buffers
constexpr size_t kMostItems = 4;              // calls in a batch
constexpr int kMostReported = 3;              // wrong batches a rank reports

enum class Memory { kHeap, kMapped, kRegistered };

const char* memoryName(Memory m) {
  return m == Memory::kHeap ? "heap" : m == Memory::kMapped ? "loomMemAlloc" : "registered heap";
}

// A send to the rank `shift` ahead and a receive from the rank `shift` behind (shift 0: this
// rank itself), of `count` elements of `type`.
struct SendRecv {
  loomDataType_t type = loomUint8;
  size_t count = 0;
  int shift = 1;
  uint64_t seed = 0;
};

struct Item {
  bool collective = true;
  bool reversed = false;  // on the second communicator, whose ranks are numbered backwards
  CollectiveCase call;  // when collective
  // call.inPlace on the even ranks only, out of place on the odd ones.
  bool inPlaceOnEvenRanks = false;
  SendRecv p2p;         // otherwise
  Memory memory = Memory::kHeap;
  size_t offset = 0;  // bytes past an aligned start
};

// How a batch is made: one blocking call, a group of calls, calls queued one by one on a host
// stream, or a group queued on a host stream.
enum class How { kAlone, kGroup, kStream, kGroupOnStream };

struct Batch {
  How how = How::kAlone;
  std::vector<Item> items;
};

std::string describe(const Item& item) {
  std::string text;
  if (item.collective) {
    text = item.call.describe();
  } else {
    text = std::string("send/recv ") + loomtest::typeName(item.p2p.type) + " count=" +
           std::to_string(item.p2p.count) + " shift=" + std::to_string(item.p2p.shift) +
           " seed=" + std::to_string(item.p2p.seed);
  }
  return text + (item.inPlaceOnEvenRanks ? " (in place on even ranks only)" : "") +
         (item.reversed ? " on the reversed communicator" : "") + " in " + memoryName(item.memory) +
         " at offset " + std::to_string(item.offset);
}

const char* howName(How how) {
  switch (how) {
    case How::kAlone: return "alone";
    case How::kGroup: return "a group";
    case How::kStream: return "queued on a host stream";
    case How::kGroupOnStream: return "a group on a host stream";
  }
  return "?";
}

// ---- Drawing a program (the same on every rank) ------------------------------------------

class Draw {
 public:
  Draw(uint64_t seed, int nranks, size_t mappedMinBytes)
      : rng_(seed), nranks_(nranks), mappedMin_(mappedMinBytes) {}

  Batch batch() {
    Batch b;
    const int r = below(10);
    b.how = r < 4 ? How::kAlone : r < 7 ? How::kGroup : r < 9 ? How::kStream : How::kGroupOnStream;
    // Point-to-point calls make a whole exchange only within a group; queued one by one each
    // would wait for its peer's, which may be queued behind a send of its own.
    const bool p2p = b.how == How::kGroup || b.how == How::kGroupOnStream;
    const size_t items = b.how == How::kAlone ? 1 : 1 + static_cast<size_t>(below(kMostItems));
    for (size_t i = 0; i < items; ++i) b.items.push_back(item(p2p && below(3) == 0));
    return b;
  }

 private:
  int below(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  Item item(bool p2p) {
    Item it;
    it.collective = !p2p;
    it.reversed = below(4) == 0;
    const loomDataType_t type = loomtest::kAllTypes[below(loomtest::kTypeCount)];
    if (p2p) {
      it.p2p.type = type;
      it.p2p.shift = below(nranks_);
      it.p2p.count = count(loomtest::typeSize(type), 1);
      it.p2p.seed = ++seed_;
    } else {
      CollectiveCase& c = it.call;
      c.collective = loomtest::kAllCollectives[below(6)];
      c.type = type;
      c.op = loomtest::kAllOps[below(5)];
      c.preMulSum = loomtest::isReducing(c.collective) && c.op == loomSum && below(5) == 0;
      c.root = below(nranks_);
      const bool blocked = c.collective == Collective::kAllGather || c.collective == Collective::kReduceScatter ||
                           c.collective == Collective::kAllToAll;
      c.count = count(loomtest::typeSize(type), blocked ? static_cast<size_t>(nranks_) : 1);
      c.inPlace = loomtest::hasInPlace(c.collective) && below(2) == 0;
      it.inPlaceOnEvenRanks = c.inPlace && below(3) == 0;
      c.seed = ++seed_;
    }
    const int m = below(4);
    it.memory = m < 2 ? Memory::kHeap : m == 2 ? Memory::kMapped : Memory::kRegistered;
    it.offset = below(2) == 0 ? 0 : static_cast<size_t>(1 + below(63));
    return it;
  }

  // Elements per block: sometimes none, often one either side of a size where Loom changes
  // its way of moving bytes, otherwise spread evenly over the powers of two to the cap.
  size_t count(size_t elementBytes, size_t blocks) {
    const size_t most = kMostBufferBytes / (elementBytes * blocks);
    const int r = below(20);
    size_t n;
    if (r == 0) {
      n = 0;
    } else if (r < 6) {
      const size_t edges[] = {4 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20, mappedMin_};
      const size_t edge = edges[below(static_cast<int>(std::size(edges)))] / elementBytes;
      n = std::max<size_t>(1, edge + static_cast<size_t>(below(3))) - 1;
    } else {
      const double bytes = std::exp2(std::uniform_real_distribution<double>(0.0, 21.0)(rng_));
      n = std::max<size_t>(1, static_cast<size_t>(bytes) / elementBytes);
    }
    return std::min(n, most);
  }

  std::mt19937_64 rng_;
  int nranks_;
  size_t mappedMin_;
  uint64_t seed_ = 0;
};

// ---- Memory of the drawn kinds --------------------------------------------------------------

// This rank's loomMemAlloc memory, handed out front to back and taken back whole after each
// batch: one allocation for the whole program.
class MappedSlab {
 public:
  static constexpr size_t kBytes = 2 * kMostItems * (kMostBufferBytes + 2 * kGuard + 128);
  MappedSlab() { EXPECT_EQ(loomMemAlloc(&base_, kBytes), loomSuccess); }
  ~MappedSlab() { EXPECT_EQ(loomMemFree(base_), loomSuccess); }
  MappedSlab(const MappedSlab&) = delete;
  MappedSlab& operator=(const MappedSlab&) = delete;
  unsigned char* take(size_t bytes) {
    unsigned char* at = static_cast<unsigned char*>(base_) + used_;
    used_ += (bytes + 127) / 128 * 128;
    EXPECT_LE(used_, kBytes);
    return at;
  }
  void reset() { used_ = 0; }

 private:
  void* base_ = nullptr;
  size_t used_ = 0;
};

// A call's buffer in the drawn memory at the drawn offset, holding a copy of the image the
// reference made (guards included); copied back after the call for the reference's check.
class Placed {
 public:
  Placed(std::vector<unsigned char>* image, const Item& item, MappedSlab& slab, loomComm_t comm)
      : image_(image), comm_(comm) {
    if (image->empty()) return;
    const size_t bytes = item.offset + image->size();
    unsigned char* base;
    if (item.memory == Memory::kMapped) {
      base = slab.take(bytes);
    } else {
      heap_.resize(bytes + 64);
      base = heap_.data() + (64 - reinterpret_cast<uintptr_t>(heap_.data()) % 64) % 64;  // a line's start
    }
    at_ = base + item.offset;
    std::memcpy(at_, image->data(), image->size());
    // A communicator that failed refuses it: the batch's outcome (runBatch).
    if (item.memory == Memory::kRegistered) registered_ = loomCommRegister(comm, at_, image->size(), &handle_);
  }
  ~Placed() {
    if (handle_ != nullptr) {
      EXPECT_EQ(loomCommDeregister(comm_, handle_), loomSuccess);
    }
  }
  Placed(const Placed&) = delete;
  Placed& operator=(const Placed&) = delete;
  void* at() const { return at_; }
  loomResult_t registered() const { return registered_; }
  void copyBack() const {
    if (at_ != nullptr) std::memcpy(image_->data(), at_, image_->size());
  }

 private:
  std::vector<unsigned char>* image_;
  loomComm_t comm_;
  std::vector<unsigned char> heap_;
  unsigned char* at_ = nullptr;
  void* handle_ = nullptr;
  loomResult_t registered_ = loomSuccess;
};

// ---- Running a program ---------------------------------------------------------------------

// One send/recv item on this rank: the bytes it sends (the sender's rank in the data) and
// the buffer it receives into (guards either side), and their check.
class SendRecvRun {
 public:
  SendRecvRun(const SendRecv& p, int rank, int nranks)
      : p_(p), bytes_(p.count * loomtest::typeSize(p.type)), from_((rank - p.shift + nranks) % nranks),
        to_((rank + p.shift) % nranks) {
    send_ = pattern(rank, bytes_ + 2 * kGuard);
    recv_ = pattern(-1 - rank, bytes_ + 2 * kGuard);
  }
  std::vector<unsigned char>& sendBuffer() { return send_; }
  std::vector<unsigned char>& recvBuffer() { return recv_; }
  loomResult_t launch(loomComm_t comm, loomStream_t stream, void* send, void* recv) const {
    loomResult_t r = loomSend(static_cast<unsigned char*>(send) + kGuard, p_.count, p_.type, to_, comm, stream);
    if (r != loomSuccess) return r;
    return loomRecv(static_cast<unsigned char*>(recv) + kGuard, p_.count, p_.type, from_, comm, stream);
  }
  std::string check(int rank) const {
    std::vector<unsigned char> sent = pattern(from_, bytes_ + 2 * kGuard);
    std::vector<unsigned char> before = pattern(-1 - rank, bytes_ + 2 * kGuard);
    if (std::memcmp(recv_.data() + kGuard, sent.data() + kGuard, bytes_) != 0) {
      return "the bytes received differ from rank " + std::to_string(from_) + "'s";
    }
    if (std::memcmp(recv_.data(), before.data(), kGuard) != 0 ||
        std::memcmp(recv_.data() + kGuard + bytes_, before.data() + kGuard + bytes_, kGuard) != 0) {
      return "bytes just outside the receive buffer were overwritten";
    }
    if (send_ != pattern(rank, bytes_ + 2 * kGuard)) return "the send buffer was written";
    return "";
  }

 private:
  std::vector<unsigned char> pattern(int who, size_t bytes) const {
    std::vector<unsigned char> out(bytes);
    std::mt19937_64 bits(p_.seed * 1000003 + static_cast<uint64_t>(who + 100));
    for (size_t i = 0; i < bytes; i += 8) {
      const uint64_t h = bits();
      std::memcpy(out.data() + i, &h, std::min<size_t>(8, bytes - i));
    }
    return out;
  }

  SendRecv p_;
  size_t bytes_;
  int from_, to_;
  std::vector<unsigned char> send_, recv_;
};

// One item's reference run and its placed buffers.
struct Running {
  std::unique_ptr<CollectiveRun> collective;
  std::unique_ptr<SendRecvRun> p2p;
  std::unique_ptr<Placed> send, recv;
  loomComm_t comm = nullptr;
  int rank = 0;  // in comm

  loomResult_t launch(loomStream_t stream) const {
    return collective ? collective->launchMirrored(comm, stream, send->at(), recv->at())
                      : p2p->launch(comm, stream, send->at(), recv->at());
  }
};

// This rank's two communicators over the harness's ranks, split from its communicator: one
// numbered as it is, one with the ranks numbered backwards.
struct Comms {
  loomComm_t straight = nullptr;
  loomComm_t reversed = nullptr;
  int rank = 0;  // in straight
  int nranks = 0;

  // What an application does when a call fails: the peers waiting on either communicator
  // learn it then, rather than waiting for calls that will not come.
  void abort() {
    for (loomComm_t* c : {&straight, &reversed}) {
      EXPECT_EQ(loomCommAbort(*c), loomSuccess);
      *c = nullptr;
    }
  }
};

// What one batch came to on this rank: a call's error (the communicators are then unusable),
// or what came out wrong ("" when every call came out right).
struct Outcome {
  loomResult_t result = loomSuccess;
  std::string text;
};

Outcome runBatch(const Batch& batch, const Comms& comms, loomStream_t stream, MappedSlab& slab) {
  std::vector<Running> runs(batch.items.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    const Item& item = batch.items[i];
    Running& run = runs[i];
    run.comm = item.reversed ? comms.reversed : comms.straight;
    run.rank = item.reversed ? comms.nranks - 1 - comms.rank : comms.rank;
    std::vector<unsigned char>*send, *recv;
    if (item.collective) {
      CollectiveCase call = item.call;
      if (item.inPlaceOnEvenRanks) call.inPlace = run.rank % 2 == 0;
      run.collective = std::make_unique<CollectiveRun>(call, run.rank, comms.nranks);
      send = &run.collective->sendBuffer();
      recv = &run.collective->recvBuffer();
    } else {
      run.p2p = std::make_unique<SendRecvRun>(item.p2p, run.rank, comms.nranks);
      send = &run.p2p->sendBuffer();
      recv = &run.p2p->recvBuffer();
    }
    run.send = std::make_unique<Placed>(send, item, slab, run.comm);
    run.recv = std::make_unique<Placed>(recv, item, slab, run.comm);
    for (const Placed* placed : {run.send.get(), run.recv.get()}) {
      if (placed->registered() != loomSuccess) {
        slab.reset();
        return {placed->registered(), "loomCommRegister returned " +
                                          std::string(loomGetErrorString(placed->registered())) + ": " +
                                          loomGetLastError(run.comm)};
      }
    }
  }
  const bool onStream = batch.how == How::kStream || batch.how == How::kGroupOnStream;
  const bool grouped = batch.how == How::kGroup || batch.how == How::kGroupOnStream;
  loomStream_t s = onStream ? stream : nullptr;
  std::string what = grouped ? "loomGroupStart" : "";
  loomComm_t blamed = comms.straight;  // whose last error says why
  loomResult_t r = grouped ? loomGroupStart() : loomSuccess;
  for (size_t i = 0; i < runs.size() && r == loomSuccess; ++i) {
    what = "call " + std::to_string(i + 1) + " (" + describe(batch.items[i]) + ")";
    blamed = runs[i].comm;
    r = runs[i].launch(s);
  }
  if (grouped) {
    const loomResult_t ended = loomGroupEnd();
    if (r == loomSuccess && ended != loomSuccess) {
      r = ended;
      what = "loomGroupEnd";
    }
  }
  if (r == loomSuccess && onStream) {
    r = loomStreamSynchronize(stream);
    what = "loomStreamSynchronize";
  }
  // A device communicator's kernel that failed on a stream leaves the stream's work done, as
  // CUDA's does: its error is the communicator's asynchronous one.
  for (size_t i = 0; i < runs.size() && r == loomSuccess && onStream; ++i) {
    loomResult_t async = loomSuccess;
    r = loomCommGetAsyncError(runs[i].comm, &async);
    if (r == loomSuccess) r = async;
    what = "loomCommGetAsyncError";
    blamed = runs[i].comm;
  }
  slab.reset();
  if (r != loomSuccess) {
    const bool threadError = onStream && what == "loomStreamSynchronize";  // the stream's error is the thread's
    return {r, what + " returned " + loomGetErrorString(r) + ": " + loomGetLastError(threadError ? nullptr : blamed)};
  }
  Outcome outcome;
  for (size_t i = 0; i < runs.size() && outcome.text.empty(); ++i) {
    runs[i].send->copyBack();
    runs[i].recv->copyBack();
    const std::string w = runs[i].collective ? runs[i].collective->check() : runs[i].p2p->check(runs[i].rank);
    if (!w.empty()) outcome.text = "call " + std::to_string(i + 1) + " (" + describe(batch.items[i]) + "): " + w;
  }
  return outcome;
}

// ---- Configurations --------------------------------------------------------------------------

struct Setting {
  const char* variable;
  const char* value;
};

struct Config {
  std::string name;
  Mode mode;
  int nranks;
  std::vector<Setting> env;  // what the configuration sets
  uint64_t seed;
  int ranksPerHost = 0;  // processes only: a LOOM_HOSTID for each this many ranks (0: one host)
  int device = -1;       // the communicators' device (0 with LOOM_DEVICE_EMULATION=1)
};

// The default choices, each wire alone, the mismatch checker, small pipeline slices, forced
// algorithms, two hosts (hierarchical algorithms, sockets between the hosts) and device
// communicators in the CPU emulation; UCX links where meson built Loom with UCX (it sets
// LOOM_TEST_UCX).
std::vector<Config> configs() {
  std::vector<Config> configs = {
      {"threads_3", Mode::kThreads, 3, {}, 101},
      {"processes_2", Mode::kProcesses, 2, {}, 202},
      {"processes_4", Mode::kProcesses, 4, {}, 303},
      {"processes_3_sockets", Mode::kProcesses, 3, {{"LOOM_TRANSPORTS", "socket"}}, 404},
      {"processes_2_checked", Mode::kProcesses, 2, {{"LOOM_CHECK", "1"}}, 505},
      {"threads_5_small_slices", Mode::kThreads, 5, {{"LOOM_CHUNK_SIZE", "4096"}}, 606},
      {"processes_3_forced_algorithms", Mode::kProcesses, 3,
       {{"LOOM_ALGO", "allreduce=rd,broadcast=tree,reduce=ring"}}, 707},
      {"processes_4_two_hosts", Mode::kProcesses, 4, {}, 909, 2},
      {"emulated_device_threads_3", Mode::kThreads, 3, {{"LOOM_DEVICE_EMULATION", "1"}}, 1010, 0, 0},
      {"emulated_device_processes_2", Mode::kProcesses, 2, {{"LOOM_DEVICE_EMULATION", "1"}}, 1111, 0, 0},
  };
  if (std::getenv("LOOM_TEST_UCX") != nullptr) {
    configs.push_back({"processes_3_ucx", Mode::kProcesses, 3, {{"LOOM_TRANSPORTS", "ucx"}, {"UCX_TLS", "tcp"}}, 808});
  }
  return configs;
}

uint64_t envNumber(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 10) : fallback;
}

// A rank's means to run a program: its two communicators, its loomMemAlloc memory, a host
// stream and the program's draw.
struct RankProgram {
  Comms comms;
  loomStream_t stream;
  Draw draw;
  MappedSlab slab;
};

// Makes what a rank runs a program with, runs body, and takes it down.
void withProgram(loomComm_t comm, int rank, int nranks, uint64_t seed,
                 const std::function<void(RankProgram&)>& body) {
  Comms comms{nullptr, nullptr, rank, nranks};
  LOOM_ASSERT_OK(loomCommSplit(comm, 0, rank, &comms.straight, nullptr), comm);
  LOOM_ASSERT_OK(loomCommSplit(comm, 0, nranks - 1 - rank, &comms.reversed, nullptr), comm);
  size_t mappedMin = 0;
  ASSERT_EQ(loomCommMappedMinBytes(comm, &mappedMin), loomSuccess);
  loomStream_t stream = nullptr;
  ASSERT_EQ(loomStreamCreate(&stream), loomSuccess);
  RankProgram program{comms, stream, Draw(seed, nranks, mappedMin), {}};
  body(program);
  EXPECT_EQ(loomStreamDestroy(stream), loomSuccess);
  for (loomComm_t c : {program.comms.straight, program.comms.reversed}) {
    if (c != nullptr) {
      EXPECT_EQ(loomCommDestroy(c), loomSuccess);
    }
  }
}

loomtest::RankOptions rankOptions(const Config& config) {
  loomtest::RankOptions options;
  options.deadlineMs = 600000;
  options.device = config.device;
  if (config.ranksPerHost > 0) {
    options.beforeInit = [perHost = config.ranksPerHost](int rank) {
      ::setenv("LOOM_HOSTID", ("host-" + std::to_string(rank / perHost)).c_str(), 1);
    };
  }
  return options;
}

class RandomProgram : public testing::TestWithParam<Config> {};

TEST_P(RandomProgram, EveryCallMatchesTheReference) {
  const Config& config = GetParam();
  // The emulated device's FIFOs between processes (the host's have TSan annotations).
  SKIP_PROCESSES_UNDER_TSAN(config.device >= 0 && config.mode == Mode::kProcesses);
  const uint64_t seed = envNumber("LOOM_TEST_SEED", config.seed);
  const size_t batches =
      envNumber("LOOM_TEST_BATCHES", loomtest::matrixScale() == loomtest::MatrixScale::kQuick ? 40 : 200);
  ScopedEnv env;
  for (const Setting& setting : config.env) env.set(setting.variable, setting.value);
  const auto start = std::chrono::steady_clock::now();
  loomtest::runRanks(config.nranks, config.mode, [&](loomComm_t comm, int rank) {
    withProgram(comm, rank, config.nranks, seed, [&](RankProgram& program) {
      int reported = 0;
      for (size_t b = 0; b < batches; ++b) {
        const Batch batch = program.draw.batch();
        const Outcome outcome = runBatch(batch, program.comms, program.stream, program.slab);
        if (!outcome.text.empty() && ++reported <= kMostReported) {
          ADD_FAILURE() << config.name << " seed " << seed << ", rank " << rank << ", batch " << b << " ("
                        << howName(batch.how) << "): " << outcome.text;
        }
        if (outcome.result != loomSuccess) {
          program.comms.abort();
          break;
        }
      }
    });
  }, rankOptions(config));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu batches of seed %llu in %.1f s\n", config.name.c_str(), batches,
              static_cast<unsigned long long>(seed), seconds);
}

INSTANTIATE_TEST_SUITE_P(Programs, RandomProgram, testing::ValuesIn(configs()),
                         [](const auto& info) { return info.param.name; });

// ---- One call of a program changed on one rank ----------------------------------------------

// Whether a call can be changed on one rank alone so that the ranks can tell: a send to itself
// and the receive of it are one item, which would change together, and a collective of no
// elements moves nothing on the ranks that keep it.
bool changeable(const Item& item) { return item.collective ? item.call.count > 0 : item.p2p.shift != 0; }

// Changes a call as a caller's bug would: its count, its collective, its op, its root or its
// type (a send and receive pair: their count). `choice` picks among the changes that apply.
std::string change(Item& item, int nranks, uint64_t choice) {
  if (!item.collective) {
    ++item.p2p.count;
    return "the send's and receive's count";
  }
  CollectiveCase& c = item.call;
  std::vector<int> kinds = {0, 1, 4};  // count, collective, type
  if (loomtest::isReducing(c.collective)) kinds.push_back(2);
  if ((c.collective == Collective::kBroadcast || c.collective == Collective::kReduce) && nranks > 1) {
    kinds.push_back(3);
  }
  switch (kinds[choice % kinds.size()]) {
    case 0:
      ++c.count;
      return "the count";
    case 1: {
      const Collective* all = loomtest::kAllCollectives;
      c.collective = all[(std::find(all, all + 6, c.collective) - all + 1) % 6];
      return "the collective";
    }
    case 2:
      c.op = c.op == loomMax ? loomMin : loomMax;
      c.preMulSum = false;
      return "the op";
    case 3:
      c.root = (c.root + 1) % nranks;
      return "the root";
    default: {
      const loomDataType_t* all = loomtest::kAllTypes;
      c.type = all[(std::find(all, all + loomtest::kTypeCount, c.type) - all + 1) % loomtest::kTypeCount];
      return "the type";
    }
  }
}

// The first batch from `from` on that holds a changeable call (the same on every rank).
size_t firstChangeable(const std::vector<Batch>& program, size_t from) {
  while (from < program.size() &&
         std::none_of(program[from].items.begin(), program[from].items.end(), changeable)) {
    ++from;
  }
  return from;
}

class RandomMismatch : public testing::TestWithParam<Config> {};

// A program's calls are right until one rank changes one call; from then on every rank must
// end with an error, loomInvalidUsage or loomRemoteError, well within its timeout (no rank
// waits one out), and at least one rank must name the mismatch (loomInvalidUsage). A rank
// that the program lets run past the changed call without an error makes an all-to-all on
// both communicators at its end, which reads every link.
TEST_P(RandomMismatch, EveryRankEndsWithAnErrorAndNoneWaitsItsTimeout) {
  const Config& config = GetParam();
  SKIP_PROCESSES_UNDER_TSAN(config.device >= 0 && config.mode == Mode::kProcesses);
  constexpr size_t kBatches = 40;
  const int trials = loomtest::matrixScale() == loomtest::MatrixScale::kQuick ? 2 : 6;
  ScopedEnv env;
  for (const Setting& setting : config.env) env.set(setting.variable, setting.value);
  loomtest::RankOptions options = rankOptions(config);
  options.timeoutMs = 5000;
  for (int trial = 0; trial < trials; ++trial) {
    const uint64_t seed = envNumber("LOOM_TEST_SEED", config.seed) * 100 + static_cast<uint64_t>(trial);
    std::mt19937_64 where(seed);
    const size_t drawnBatch = 1 + where() % (kBatches - 10);
    const int changer = static_cast<int>(where() % static_cast<uint64_t>(config.nranks));
    const uint64_t choice = where();
    SharedRecords ended(config.nranks);
    ASSERT_TRUE(ended.ok()) << "mmap failed";
    loomtest::runRanks(config.nranks, config.mode, [&](loomComm_t comm, int rank) {
      withProgram(comm, rank, config.nranks, seed, [&](RankProgram& p) {
        // On one communicator: a rank whose changed call ends (a root that only sends) and that
        // then waits in another communicator for a peer still in the changed call would wait for
        // a rank that no announcement of the second communicator names (only the deadline ends
        // that, as in NCCL and MPI).
        std::vector<Batch> program;
        for (size_t b = 0; b < kBatches; ++b) {
          program.push_back(p.draw.batch());
          for (Item& item : program.back().items) item.reversed = false;
        }
        const size_t changed = firstChangeable(program, drawnBatch);
        RankRecord& rec = ended[rank];
        auto since = std::chrono::steady_clock::now();
        for (size_t b = 0; b < program.size(); ++b) {
          if (b == changed) {
            since = std::chrono::steady_clock::now();
            if (rank == changer) {
              std::vector<Item>& items = program[b].items;
              Item& item = *std::find_if(items.begin(), items.end(), changeable);
              const std::string what = change(item, config.nranks, choice);
              std::printf("%s seed %llu: rank %d changes %s of %s in batch %zu\n", config.name.c_str(),
                          static_cast<unsigned long long>(seed), rank, what.c_str(), describe(item).c_str(), b);
            }
          }
          const Outcome outcome = runBatch(program[b], p.comms, p.stream, p.slab);
          if (b < changed && !outcome.text.empty()) {
            ADD_FAILURE() << config.name << " seed " << seed << ", rank " << rank << ", batch " << b
                          << " (before the change): " << outcome.text;
          }
          if (outcome.result != loomSuccess) {
            rec.at = static_cast<int>(b);
            std::snprintf(rec.message, sizeof rec.message, "%s", outcome.text.c_str());
            rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
            rec.result = outcome.result;
            p.comms.abort();
            return;
          }
        }
        std::vector<unsigned char> send(static_cast<size_t>(config.nranks) * 64), recv(send.size());
        record(rec, p.comms.straight, [&] {
          const loomResult_t r = loomAllToAll(send.data(), recv.data(), 64, loomUint8, p.comms.straight, nullptr);
          if (r != loomSuccess) return r;
          return loomAllToAll(send.data(), recv.data(), 64, loomUint8, p.comms.reversed, nullptr);
        });
        rec.at = static_cast<int>(program.size());
        if (rec.result != loomSuccess) p.comms.abort();
      });
    }, options);
    const std::string summary = config.name + " seed " + std::to_string(seed) + ", a call changed on rank " +
                                std::to_string(changer) + " (its line above):" + ended.summary();
    int named = 0;
    for (int r = 0; r < config.nranks; ++r) {
      const RankRecord& rec = ended[r];
      ASSERT_GE(rec.result, 0) << "rank " << r << " never returned: " << summary;
      const auto result = static_cast<loomResult_t>(rec.result);
      EXPECT_TRUE(result == loomInvalidUsage || result == loomRemoteError) << "rank " << r << ": " << summary;
      EXPECT_LT(rec.seconds, options.timeoutMs / 1000.0) << "rank " << r << ": " << summary;
      named += result == loomInvalidUsage ? 1 : 0;
    }
    EXPECT_GE(named, 1) << "no rank named the mismatch: " << summary;
  }
}

// Both wires, the mismatch checker, two hosts and device communicators in the CPU emulation
// (on one host: their watchdogs compare calls on the board, core/group_agreement.h).
std::vector<Config> mismatchConfigs() {
  return {
      {"threads_3", Mode::kThreads, 3, {}, 21},
      {"processes_3", Mode::kProcesses, 3, {}, 22},
      {"processes_2_sockets", Mode::kProcesses, 2, {{"LOOM_TRANSPORTS", "socket"}}, 23},
      {"processes_3_checked", Mode::kProcesses, 3, {{"LOOM_CHECK", "1"}}, 24},
      {"processes_4_two_hosts", Mode::kProcesses, 4, {}, 25, 2},
      {"emulated_device_threads_3", Mode::kThreads, 3, {{"LOOM_DEVICE_EMULATION", "1"}}, 26, 0, 0},
      {"emulated_device_processes_3", Mode::kProcesses, 3, {{"LOOM_DEVICE_EMULATION", "1"}}, 27, 0, 0},
      {"emulated_device_processes_4_two_hosts", Mode::kProcesses, 4, {{"LOOM_DEVICE_EMULATION", "1"}}, 28, 2, 0},
  };
}

INSTANTIATE_TEST_SUITE_P(Programs, RandomMismatch, testing::ValuesIn(mismatchConfigs()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
