#include "core/p2p.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <tuple>

#include "core/communicator.h"
#include "core/log.h"

namespace loom {
namespace {

constexpr uint8_t kMagic[4] = {'L', 'M', 'P', '2'};
constexpr size_t kHeaderBytes = 16;

const char* kindName(MessageKind kind) { return kind == MessageKind::kUser ? "loomSend" : "barrier"; }

// One op in flight: header first, then payload.
struct Progress {
  P2POp* op;
  transport::Link* link = nullptr;
  uint8_t header[kHeaderBytes] = {};
  size_t moved = 0;  // header + payload bytes so far
  bool done = false;
  Deadline deadline;

  size_t total() const { return kHeaderBytes + op->bytes; }
};

void encodeHeader(const P2POp& op, uint8_t* out) {
  std::memcpy(out, kMagic, 4);
  uint16_t kind = static_cast<uint16_t>(op.kind);
  std::memcpy(out + 4, &kind, 2);
  uint64_t bytes = op.bytes;
  std::memcpy(out + 8, &bytes, 8);
}

Status checkHeader(const P2POp& op, const uint8_t* header) {
  uint16_t kind = 0;
  uint64_t bytes = 0;
  std::memcpy(&kind, header + 4, 2);
  std::memcpy(&bytes, header + 8, 8);
  if (std::memcmp(header, kMagic, 4) != 0) {
    return error(loomRemoteError, "rank %d sent bytes that are not a Loom message", op.peer);
  }
  if (kind != static_cast<uint16_t>(op.kind)) {
    return error(loomInvalidUsage, "mismatched calls: this rank posted a %s receive from rank %d, which sent a %s",
                 op.kind == MessageKind::kUser ? "loomRecv" : "barrier", op.peer,
                 kind == static_cast<uint16_t>(MessageKind::kUser) ? "loomSend" : "barrier message");
  }
  if (bytes != op.bytes) {
    return error(loomInvalidUsage,
                 "mismatched calls: rank %d sent %llu bytes but this rank's loomRecv expects %zu",
                 op.peer, static_cast<unsigned long long>(bytes), op.bytes);
  }
  return Status::ok();
}

// Moves what the link takes now; true in *progressed when any byte moved.
Status advance(Progress& p, bool* progressed) {
  P2POp& op = *p.op;
  bool send = op.direction == P2POp::Direction::kSend;
  while (!p.done) {
    size_t done = 0;
    if (p.moved < kHeaderBytes) {
      LOOM_TRY(send ? p.link->sendSome(p.header + p.moved, kHeaderBytes - p.moved, &done)
                    : p.link->recvSome(p.header + p.moved, kHeaderBytes - p.moved, &done));
      p.moved += done;
      if (!send && p.moved == kHeaderBytes) LOOM_TRY(checkHeader(op, p.header));
    } else if (p.moved < p.total()) {
      char* data = static_cast<char*>(op.buffer) + (p.moved - kHeaderBytes);
      LOOM_TRY(send ? p.link->sendSome(data, p.total() - p.moved, &done)
                    : p.link->recvSome(data, p.total() - p.moved, &done));
      p.moved += done;
    }
    if (done == 0 && p.moved < p.total()) return Status::ok();
    *progressed = true;
    p.done = p.moved == p.total();
  }
  return Status::ok();
}

std::string describe(const Progress& p) {
  const P2POp& op = *p.op;
  bool send = op.direction == P2POp::Direction::kSend;
  size_t payload = p.moved > kHeaderBytes ? p.moved - kHeaderBytes : 0;
  return format("%s %s rank %d (%zu of %zu bytes %s)",
                send ? kindName(op.kind) : (op.kind == MessageKind::kUser ? "loomRecv" : "barrier"),
                send ? "to" : "from", op.peer, payload, op.bytes, send ? "sent" : "received");
}

// Sends and receives a rank posts to itself match each other in order: plain copies.
Status matchSelfOps(std::vector<P2POp*>& selfOps) {
  std::vector<P2POp*> sends, recvs;
  for (P2POp* op : selfOps) {
    (op->direction == P2POp::Direction::kSend ? sends : recvs).push_back(op);
  }
  if (sends.size() != recvs.size()) {
    return error(loomInvalidUsage,
                 "%zu send(s) to self but %zu receive(s) from self in one group: each needs its match "
                 "in the same group",
                 sends.size(), recvs.size());
  }
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i]->bytes != recvs[i]->bytes) {
      return error(loomInvalidUsage, "mismatched calls: send to self of %zu bytes, receive of %zu",
                   sends[i]->bytes, recvs[i]->bytes);
    }
    if (sends[i]->bytes > 0 && sends[i]->buffer != recvs[i]->buffer) {
      std::memmove(recvs[i]->buffer, sends[i]->buffer, sends[i]->bytes);
    }
  }
  return Status::ok();
}

}  // namespace

Status runP2P(std::vector<P2POp>& ops) {
  std::vector<Progress> work;
  std::map<Communicator*, std::vector<P2POp*>> selfOps;
  std::map<Communicator*, std::vector<int>> peersOf;
  for (P2POp& op : ops) {
    if (op.peer == op.comm->rank()) {
      selfOps[op.comm].push_back(&op);
      continue;
    }
    Progress p{&op, nullptr, {}, 0, false, Deadline::afterMs(op.comm->config().timeoutMs)};
    if (op.direction == P2POp::Direction::kSend) encodeHeader(op, p.header);
    work.push_back(p);
    peersOf[op.comm].push_back(op.peer);
  }

  // On failure, every communicator that still had work is out of step with its peers.
  auto failAll = [&](const Status& s, Communicator* origin) {
    for (const Progress& p : work) {
      if (p.done) continue;
      p.op->comm->fail(p.op->comm == origin ? s : s.withContext("another communicator of this group failed"));
    }
    if (origin != nullptr) origin->fail(s);
    return s;
  };

  for (auto& [comm, self] : selfOps) {
    Status s = matchSelfOps(self);
    if (!s.isOk()) return s;  // nothing was sent yet: the communicators stay usable
  }
  // Links first: all connects, then all accepts (see Transport).
  for (auto& [comm, peers] : peersOf) {
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    Deadline d = Deadline::afterMs(comm->config().timeoutMs);
    Status s = comm->transport().connectOut(peers, d);
    if (!s.isOk()) return failAll(s, comm);
  }
  for (auto& [comm, peers] : peersOf) {
    Deadline d = Deadline::afterMs(comm->config().timeoutMs);
    Status s = comm->transport().acceptIn(peers, d);
    if (!s.isOk()) return failAll(s, comm);
  }
  for (Progress& p : work) p.link = p.op->comm->transport().link(p.op->peer, 0);

  for (;;) {
    // Only the oldest unfinished op of each (communicator, peer, direction) may move:
    // that is what keeps messages between a pair in issue order.
    std::map<std::tuple<Communicator*, int, P2POp::Direction>, bool> busy;
    std::vector<Progress*> active;
    for (Progress& p : work) {
      if (p.done) continue;
      auto key = std::make_tuple(p.op->comm, p.op->peer, p.op->direction);
      if (busy[key]) continue;
      busy[key] = true;
      active.push_back(&p);
    }
    if (active.empty()) return Status::ok();

    bool progressed = false;
    for (Progress* p : active) {
      Status s = advance(*p, &progressed);
      if (!s.isOk()) {
        return failAll(s.withContext(describe(*p)), p->op->comm);
      }
    }
    if (progressed) continue;

    // Nothing moved: sleep until a link is ready, a communicator is aborted or the
    // earliest deadline passes.
    std::vector<pollfd> fds;
    std::vector<Communicator*> cancelOwners;
    Deadline wake = active.front()->deadline;
    for (Progress* p : active) {
      if (p->done) continue;
      short events = p->op->direction == P2POp::Direction::kSend ? POLLOUT : POLLIN;
      fds.push_back({p->link->waitFd(), events, 0});
      wake = wake.earlier(p->deadline);
    }
    size_t firstCancel = fds.size();
    for (auto& [comm, peers] : peersOf) {
      fds.push_back({comm->cancelFd(), POLLIN, 0});
      cancelOwners.push_back(comm);
    }
    int rc = ::poll(fds.data(), fds.size(), wake.remainingMs());
    if (rc < 0 && errno != EINTR) return failAll(systemError("poll", errno), nullptr);
    for (size_t i = firstCancel; i < fds.size(); ++i) {
      if (fds[i].revents & POLLIN) {
        return failAll(error(loomInvalidUsage, "the communicator was aborted (loomCommAbort)"),
                       cancelOwners[i - firstCancel]);
      }
    }
    for (Progress* p : active) {
      if (!p->done && p->deadline.expired()) {
        Status timeout = error(loomTimeout, "%s timed out after %lld ms", describe(*p).c_str(),
                               p->op->comm->config().timeoutMs);
        return failAll(timeout, p->op->comm);
      }
    }
  }
}

Status runBarrier(Communicator& comm) {
  int n = comm.nranks(), r = comm.rank();
  // Dissemination: after round k each rank has heard, through others, from 2^(k+1) ranks.
  for (int step = 1; step < n; step <<= 1) {
    std::vector<P2POp> round = {
        {P2POp::Direction::kSend, &comm, (r + step) % n, nullptr, 0, MessageKind::kBarrier},
        {P2POp::Direction::kRecv, &comm, (r - step + n) % n, nullptr, 0, MessageKind::kBarrier},
    };
    LOOM_TRY(runP2P(round).withContext("loomBarrier"));
  }
  return Status::ok();
}

}  // namespace loom
