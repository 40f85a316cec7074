// The bootstrap root's thread: admission, registration and its deadline (bootstrap_root.h).
#include "bootstrap/bootstrap_root.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/log.h"

namespace loom {
namespace {

constexpr size_t kRegistrationBytes = SocketAddress::kWireBytes + 8;
constexpr size_t kReplyFixedBytes = 16 + SocketAddress::kWireBytes;
constexpr uint32_t kMaxReplyMessage = 4096;

struct Registered {
  Fd fd;
  SocketAddress bootstrapAddress;
};

// Sends one reply; a rank that went away meanwhile only costs a log line.
void reply(int fd, const Status& status, uint64_t commId, const SocketAddress& next) {
  std::string message = status.message().substr(0, kMaxReplyMessage);
  std::vector<uint8_t> bytes(kReplyFixedBytes + message.size(), 0);
  int32_t code = status.code();
  uint32_t length = static_cast<uint32_t>(message.size());
  std::memcpy(bytes.data(), &code, 4);
  std::memcpy(bytes.data() + 4, &length, 4);
  std::memcpy(bytes.data() + 8, &commId, 8);
  next.toWire(bytes.data() + 16);
  std::memcpy(bytes.data() + kReplyFixedBytes, message.data(), message.size());
  Status sent = sendAll(fd, bytes.data(), bytes.size(), Deadline::afterMs(1000), -1);
  if (!sent.isOk()) LOOM_WARN("bootstrap root: reply not delivered: %s", sent.message().c_str());
}

std::string listRanks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) out += format(", ... (%zu in all)", ranks.size());
  return out;
}

}  // namespace

Status sendRegistration(int fd, const Registration& r, const Deadline& deadline, int cancelFd) {
  uint8_t bytes[kRegistrationBytes] = {};
  r.bootstrapAddress.toWire(bytes);
  std::memcpy(bytes + SocketAddress::kWireBytes, &r.initTimeoutMs, 4);
  return sendAll(fd, bytes, sizeof(bytes), deadline, cancelFd);
}

Status recvRegistrationReply(int fd, RegistrationReply* out, const Deadline& deadline, int cancelFd) {
  uint8_t fixed[kReplyFixedBytes];
  LOOM_TRY(recvAll(fd, fixed, sizeof(fixed), deadline, cancelFd));
  int32_t code = 0;
  uint32_t length = 0;
  std::memcpy(&code, fixed, 4);
  std::memcpy(&length, fixed + 4, 4);
  std::memcpy(&out->commId, fixed + 8, 8);
  if (length > kMaxReplyMessage || code < 0 || code >= loomNumResults) {
    return error(loomRemoteError, "malformed reply from the bootstrap root");
  }
  std::string message(length, '\0');
  LOOM_TRY(recvAll(fd, message.data(), length, deadline, cancelFd));
  out->status = Status(static_cast<loomResult_t>(code), message);
  if (code != loomSuccess) return Status::ok();
  return SocketAddress::fromWire(fixed + 16, &out->next);
}

Status BootstrapRoot::start(const SocketAddress& address, const Secret& secret,
                            std::unique_ptr<BootstrapRoot>* out) {
  long long timeoutMs = 0;
  LOOM_TRY(env::getInt("LOOM_INIT_TIMEOUT_MS", 1, 1LL << 40, &timeoutMs));
  Acceptor acceptor;
  LOOM_TRY(Acceptor::listen(address, secret, Purpose::kRegister, "bootstrap root", &acceptor));
  SocketAddress bound = acceptor.address();
  std::unique_ptr<BootstrapRoot> root(new BootstrapRoot(std::move(acceptor), timeoutMs));
  root->thread_ = std::thread([r = root.get()] { r->run(); });
  LOOM_INFO("bootstrap root listening on %s", bound.toString().c_str());
  *out = std::move(root);
  return Status::ok();
}

BootstrapRoot::BootstrapRoot(Acceptor acceptor, long long timeoutMs)
    : acceptor_(std::move(acceptor)), address_(acceptor_.address()), timeoutMs_(timeoutMs) {}

BootstrapRoot::~BootstrapRoot() {
  stop_.fire();
  if (thread_.joinable()) thread_.join();
}

void BootstrapRoot::run() {
  Status s = serve();
  if (!s.isOk()) LOOM_WARN("bootstrap root %s: %s", address_.toString().c_str(), s.message().c_str());
  finished_.store(true);
}

Status BootstrapRoot::serve() {
  Deadline deadline = Deadline::afterMs(timeoutMs_);
  int nranks = 0;
  std::vector<std::optional<Registered>> ranks;
  int arrived = 0;
  while (nranks == 0 || arrived < nranks) {
    Acceptor::Connection conn;
    Status s = acceptor_.next(deadline, stop_.fd(), &conn);
    if (s.code() == loomTimeout) {
      std::vector<int> missing;
      for (int r = 0; r < nranks; ++r) {
        if (!ranks[static_cast<size_t>(r)]) missing.push_back(r);
      }
      Status timeout = error(loomTimeout,
                             "init timed out: %d of %d ranks registered with the root at %s; "
                             "rank(s) %s never arrived",
                             arrived, nranks, address_.toString().c_str(), listRanks(missing).c_str());
      finished_.store(true);  // from here on the thread only writes replies: joining is quick
      for (auto& entry : ranks) {
        if (entry) reply(entry->fd.get(), timeout, 0, SocketAddress());
      }
      return timeout;
    }
    if (!s.isOk()) return s;  // stopped

    uint8_t bytes[kRegistrationBytes];
    Status got = recvAll(conn.fd.get(), bytes, sizeof(bytes), Deadline::afterMs(1000), stop_.fd());
    Registration reg;
    if (got.isOk()) got = SocketAddress::fromWire(bytes, &reg.bootstrapAddress);
    if (!got.isOk()) {
      LOOM_WARN("bootstrap root: dropped a registration from %s: %s", conn.peer.toString().c_str(),
                got.message().c_str());
      continue;
    }
    std::memcpy(&reg.initTimeoutMs, bytes + SocketAddress::kWireBytes, 4);

    const Hello& h = conn.hello;
    Status invalid;
    if (h.nranks <= 0) {
      invalid = error(loomInvalidArgument, "nranks %d is not positive", h.nranks);
    } else if (nranks != 0 && h.nranks != nranks) {
      invalid = error(loomInvalidUsage,
                      "rank %d called init with nranks=%d but the ranks before it used nranks=%d",
                      h.rank, h.nranks, nranks);
    } else if (h.rank < 0 || h.rank >= h.nranks) {
      invalid = error(loomInvalidArgument, "rank %d is out of range [0, %d)", h.rank, h.nranks);
    } else if (nranks != 0 && ranks[static_cast<size_t>(h.rank)]) {
      invalid = error(loomInvalidUsage, "rank %d registered twice with the root at %s", h.rank,
                      address_.toString().c_str());
    }
    if (!invalid.isOk()) {
      LOOM_WARN("bootstrap root: %s", invalid.message().c_str());
      reply(conn.fd.get(), invalid, 0, SocketAddress());
      continue;
    }
    if (nranks == 0) {
      nranks = h.nranks;
      ranks.resize(static_cast<size_t>(nranks));
      if (reg.initTimeoutMs > 0) deadline = deadline.earlier(Deadline::afterMs(reg.initTimeoutMs));
    }
    LOOM_TRACE("bootstrap root: rank %d of %d registered from %s", h.rank, nranks,
               conn.peer.toString().c_str());
    ranks[static_cast<size_t>(h.rank)] = Registered{std::move(conn.fd), reg.bootstrapAddress};
    ++arrived;
  }

  uint64_t commId = 0;
  LOOM_TRY(randomBytes(&commId, sizeof(commId)));
  finished_.store(true);  // from here on the thread only writes replies: joining is quick
  for (int r = 0; r < nranks; ++r) {
    const SocketAddress& next = ranks[static_cast<size_t>((r + 1) % nranks)]->bootstrapAddress;
    reply(ranks[static_cast<size_t>(r)]->fd.get(), Status::ok(), commId, next);
  }
  LOOM_INFO("bootstrap root %s: all %d ranks registered", address_.toString().c_str(), nranks);
  return Status::ok();
}

}  // namespace loom
