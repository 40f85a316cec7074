// Collective calls as plans: validation, the algorithm's choice, host and device channels (collective.h).
#include "core/collective.h"

#include <algorithm>

#include "algorithms/algorithm.h"
#include "algorithms/select.h"
#include "base/log.h"
#include "core/communicator.h"
#include "core/device_comm.h"
#include "core/mapped_allreduce.h"
#include "core/one_shot.h"

namespace loom {
namespace {

// Bytes one rank contributes or receives, the measure the size rules use.
size_t callBytes(const CallInfo& info, int nranks) {
  size_t bytes = info.count * typeSize(info.type);
  bool perRank = info.kind == CallInfo::Kind::kAllGather || info.kind == CallInfo::Kind::kReduceScatter ||
                 info.kind == CallInfo::Kind::kAllToAll;
  return perRank ? bytes * static_cast<size_t>(nranks) : bytes;
}

void build(Algorithm algorithm, const CollectiveArgs& args, Plan& plan) {
  switch (args.info.kind) {
    case CallInfo::Kind::kAllReduce:
      if (algorithm == Algorithm::kTree) return treeAllReduce(args, plan);
      if (algorithm == Algorithm::kHierarchical) return hierarchicalAllReduce(args, plan);
      // kOneShot lands here only where there is no board (see appendCollective).
      if (algorithm == Algorithm::kRecursiveDoubling || algorithm == Algorithm::kOneShot) {
        return recursiveDoublingAllReduce(args, plan);
      }
      return ringAllReduce(args, plan);
    case CallInfo::Kind::kBroadcast:
      if (algorithm == Algorithm::kTree) return treeBroadcast(args, plan);
      if (algorithm == Algorithm::kHierarchical) return hierarchicalBroadcast(args, plan);
      return ringBroadcast(args, plan);  // kOneShot too, where there is no board
    case CallInfo::Kind::kReduce:
      if (algorithm == Algorithm::kTree) return treeReduce(args, plan);
      if (algorithm == Algorithm::kHierarchical) return hierarchicalReduce(args, plan);
      return ringReduce(args, plan);
    case CallInfo::Kind::kAllGather: return ringAllGather(args, plan);
    case CallInfo::Kind::kReduceScatter: return ringReduceScatter(args, plan);
    case CallInfo::Kind::kAllToAll: return pairwiseAllToAll(args, plan);
    default: return;
  }
}

// Connections (peer and direction) per channel that one rank's plan of `algorithm` may use:
// a ring sends to one neighbour and receives from the other; a rank of a double binary tree
// has up to three neighbours in each tree, both ways; the others may touch every peer.
int connectionsPerChannel(Algorithm algorithm, int nranks) {
  if (nranks <= 1) return 1;
  if (algorithm == Algorithm::kRing) return 2;
  if (algorithm == Algorithm::kTree) return 2 * std::min(6, nranks - 1);
  return 2 * (nranks - 1);
}

// A device plan runs one worker (a thread block) per connection and channel, plus one for
// local copies, and every rank's workers must be resident at once on the device they share:
// the channels are as many as fit the communicator's block budget (device_comm.h).
int deviceChannels(Communicator& comm, Algorithm algorithm) {
  return channelsWithin(comm.deviceComm().blockBudget(), connectionsPerChannel(algorithm, comm.nranks()),
                        comm.config().deviceChannels);
}

// Whether a host allreduce goes to the mapped allreduce first (core/mapped_allreduce.h): the
// same answer on every rank, from the call and the shared settings only.
bool triesMapped(Communicator& comm, bool deviceMemory, const CollectiveCall& call, size_t bytes) {
  if (call.info.kind != CallInfo::Kind::kAllReduce || deviceMemory) return false;
  const size_t minBytes = mappedMinBytes(comm);
  return minBytes > 0 && bytes >= minBytes;
}

Step mappedStep(const void* send, void* recv, size_t bytes) {
  Step step{Step::Kind::kMapped};
  step.src = send;
  step.dst = recv;
  step.bytes = bytes;
  return step;
}

// A premultiplied sum's first step: this rank's input times its scalar, into scratch that the
// call's other steps read in its place (*send). Its index; kNone for other calls, or where
// this rank sends nothing.
int addPreMultiply(Plan& plan, const CollectiveCall& call, const void** send) {
  if (!call.info.preMul.on) return Step::kNone;
  size_t sendBytes = 0, recvBytes = 0;
  bufferBytes(call.info, call.comm->rank(), call.comm->nranks(), &sendBytes, &recvBytes);
  if (sendBytes == 0) return Step::kNone;
  char* scaled = plan.scratch(sendBytes);
  Step step = copyStep(call.send, scaled, sendBytes, false);
  step.preMultiply = true;
  *send = scaled;
  return plan.add(step);
}

}  // namespace

void bufferElems(CallInfo::Kind kind, size_t count, int rank, int root, int nranks, size_t* sendElems,
                 size_t* recvElems) {
  const size_t n = static_cast<size_t>(nranks);
  *sendElems = *recvElems = count;
  switch (kind) {
    case CallInfo::Kind::kBroadcast:
      if (rank != root) *sendElems = 0;
      break;
    case CallInfo::Kind::kReduce:
      if (rank != root) *recvElems = 0;
      break;
    case CallInfo::Kind::kAllGather: *recvElems = count * n; break;
    case CallInfo::Kind::kReduceScatter: *sendElems = count * n; break;
    case CallInfo::Kind::kAllToAll: *sendElems = *recvElems = count * n; break;
    default: break;
  }
}

void bufferBytes(const CallInfo& info, int rank, int nranks, size_t* sendBytes, size_t* recvBytes) {
  bufferElems(info.kind, info.count, rank, info.root, nranks, sendBytes, recvBytes);
  *sendBytes *= typeSize(info.type);
  *recvBytes *= typeSize(info.type);
}

// The board is not offered to an allreduce that LOOM_MAPPED_MIN_BYTES sends to the mapped
// allreduce first, as that setting says (its defaults are above the board's slot).
CallShape shapeOf(const CollectiveCall& call, bool everyRankInPlace = false) {
  Communicator& comm = *call.comm;
  const size_t bytes = callBytes(call.info, comm.nranks());
  const bool deviceMemory = comm.device() >= 0;
  return {call.info, bytes, comm.board() != nullptr && !triesMapped(comm, deviceMemory, call, bytes),
          everyRankInPlace};
}

// everyRankInPlace: as the ranks agreed on it (CallShape).
Choice chooseFor(const CollectiveCall& call, bool everyRankInPlace = false) {
  const Communicator& comm = *call.comm;
  // The cache's key (collective, size, in place, every rank in place) decides the rest of the
  // shape on one communicator, which is made on a miss only: a hit costs no look at the mapped
  // allreduce (and no copy of the call, whose fields the caller has just stored: api.cc).
  return comm.choices().get(call.info, callBytes(call.info, comm.nranks()), everyRankInPlace, [&] {
    return chooseAlgorithm(shapeOf(call, everyRankInPlace), comm.config().algorithms, comm.config().protocols,
                           comm.profile());
  });
}

// "predicted fastest; predicted ring/simple 12.0 us, tree/simple 15.1 us"
std::string reasoning(const CollectiveCall& call, const Choice& choice, bool everyRankInPlace = false) {
  const Communicator& comm = *call.comm;
  return std::string(choice.why) + "; predicted " +
         describePredictions(shapeOf(call, everyRankInPlace), comm.config().algorithms, comm.config().protocols,
                             comm.profile());
}

double predictedUs(const CollectiveCall& call) { return chooseFor(call).predictedUs; }

bool runsAlone(const CollectiveCall& call) {
  // LOOM_CHECK's exchange runs before a plan, so a checked call always makes one.
  return call.comm->board() != nullptr && !call.comm->config().check &&
         chooseFor(call).algorithm == Algorithm::kOneShot;
}

Status runAlone(const CollectiveCall& call) {
  Communicator& comm = *call.comm;
  if (comm.firstUseOf(call.info.kind, Algorithm::kOneShot)) {
    LOOM_INFO("comm %016llx: %s uses oneshot (%s), straight on the board", static_cast<unsigned long long>(comm.commId()),
              call.info.describe().c_str(), reasoning(call, chooseFor(call)).c_str());
  }
  return runOneShot(comm, call.info.seq, call.info, call.send, call.recv);
}

namespace {

// The steps of `choice`'s plan of the call, storing as its protocol says; `onlyIf`: which
// of the call's plans they are (Step::OnlyIf).
void appendPlanOf(Plan& plan, const Choice& choice, const CollectiveArgs& args, int links, Step::OnlyIf onlyIf) {
  const size_t first = plan.steps.size();
  build(choice.algorithm, args, plan);
  markHeaders(plan, first, links, false);
  for (size_t k = first; k < plan.steps.size(); ++k) {
    plan.steps[k].streaming = choice.protocol == Protocol::kStreaming;
    plan.steps[k].onlyIf = onlyIf;
  }
}

void logChoice(const CollectiveCall& call, const Choice& choice, const CollectiveArgs& args, bool everyRankInPlace) {
  Communicator& comm = *call.comm;
  const char* where = everyRankInPlace ? " where every rank is in place" : "";
  if (comm.firstUseOf(call.info.kind, choice.algorithm)) {
    LOOM_INFO("comm %016llx: %s uses %s/%s%s (%s), %d channel(s), slices of %zu bytes; later calls log at TRACE",
              static_cast<unsigned long long>(comm.commId()), call.info.describe().c_str(),
              algorithmName(choice.algorithm), protocolName(choice.protocol), where,
              reasoning(call, choice, everyRankInPlace).c_str(), args.channels, args.sliceBytes);
  } else {
    LOOM_TRACE("%s: %s/%s%s (%s, predicted %.1f us), %d channel(s)", call.info.describe().c_str(),
               algorithmName(choice.algorithm), protocolName(choice.protocol), where, choice.why, choice.predictedUs,
               args.channels);
  }
}

}  // namespace

void appendCollective(Plan& plan, const CollectiveCall& call) {
  Communicator& comm = *call.comm;
  if (plan.announceSeq == 0) {
    plan.announceSeq = call.info.seq;
    plan.announceCall = plan.calls.size();
  }
  const CommConfig& config = comm.config();
  Choice choice = chooseFor(call);
  size_t bytes = callBytes(call.info, comm.nranks());

  CollectiveArgs args;
  args.info = call.info;
  args.send = call.send;
  args.recv = call.recv;
  args.rank = comm.rank();
  args.nranks = comm.nranks();
  args.order = comm.ringOrder();
  args.sliceBytes = plan.deviceMemory ? config.deviceSliceBytes : config.sliceBytes;
  // Several channels pay once each gets enough bytes (cost_model.h says how many). A device
  // communicator's links are its FIFO connections, one set per channel.
  int links = plan.deviceMemory ? deviceChannels(comm, choice.algorithm) : comm.transport().linksPerPeer();
  args.channels = config.channels > 0 ? config.channels : channelsFor(bytes, args.sliceBytes, links, plan.deviceMemory);
  args.sliceBySlice = ringsSliceBySlice(comm.profile());
  args.info.lowLatency = choice.protocol == Protocol::kLowLatency;
  args.info.algorithm = static_cast<uint8_t>(static_cast<uint8_t>(choice.algorithm) + 1);
  logChoice(call, choice, args, false);
  plan.beginCall(args.info);
  if (choice.algorithm == Algorithm::kOneShot && comm.board() != nullptr && !plan.deviceMemory) {
    // Posting multiplies a premultiplied sum's part straight into the board (postOneShot).
    Step step{Step::Kind::kOneShot};
    step.src = args.send;
    step.dst = call.recv;
    step.bytes = call.info.count * typeSize(call.info.type);  // as the board's calls count (OneShot::bytes)
    step.finalize = call.info.op == loomAvg;
    plan.add(step);
    return;
  }
  const int preMultiplied = addPreMultiply(plan, call, &args.send);
  size_t first = plan.steps.size();
  int mapped = Step::kNone;
  if (triesMapped(comm, plan.deviceMemory, call, bytes)) {
    Step step = mappedStep(args.send, call.recv, bytes);
    step.after = preMultiplied;
    mapped = plan.add(step);
  }
  // The mapped step's first round tells every rank whether all are in place: a rank in place
  // also holds the plan for that, where the tuner would choose another one then.
  const Choice inPlaceChoice = mapped != Step::kNone && call.info.inPlace ? chooseFor(call, true) : choice;
  const bool twoPlans = inPlaceChoice.algorithm != choice.algorithm;
  appendPlanOf(plan, choice, args, links, twoPlans ? Step::OnlyIf::kNotEveryRankInPlace : Step::OnlyIf::kAlways);
  if (twoPlans) {
    logChoice(call, inPlaceChoice, args, true);
    appendPlanOf(plan, inPlaceChoice, args, links, Step::OnlyIf::kEveryRankInPlace);
  }
  // The plan's steps wait for the mapped step, which marks them done where it moved the bytes,
  // or for the premultiplication: every step of a queue follows one that waited for it.
  const int before = mapped != Step::kNone ? mapped : preMultiplied;
  for (size_t k = first; before != Step::kNone && k < plan.steps.size(); ++k) {
    if (static_cast<int>(k) != mapped && plan.steps[k].after == Step::kNone) plan.steps[k].after = before;
  }
}

}  // namespace loom
