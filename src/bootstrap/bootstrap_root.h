// The root of a bootstrap: a background thread that listens at the unique id's address,
// lets through ranks that present the secret, and once all `nranks` have registered tells
// each one the address of the next rank (the ring the bootstrap allgather runs on).
//
//   rank r --Hello(kRegister) + Registration--> root      (any order, any time before the deadline)
//   root   --Reply{ok, commId, address of r+1}--> rank r  (when all have arrived)
//
// On its deadline the root answers every registered rank with loomTimeout naming the ranks
// that never arrived. Strangers and garbage are dropped without disturbing the others.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "base/socket.h"
#include "base/status.h"
#include "bootstrap/handshake.h"
#include "bootstrap/unique_id.h"

namespace loom {

// What a rank sends the root after its hello.
struct Registration {
  SocketAddress bootstrapAddress;  // where this rank's bootstrap channel listens
  int32_t initTimeoutMs = 0;       // the root waits no longer than the first rank will
};

// The root's answer.
struct RegistrationReply {
  Status status;
  uint64_t commId = 0;
  SocketAddress next;  // bootstrap address of rank (r + 1) % nranks
};

Status sendRegistration(int fd, const Registration& r, const Deadline& deadline, int cancelFd);
Status recvRegistrationReply(int fd, RegistrationReply* out, const Deadline& deadline, int cancelFd);

class BootstrapRoot {
 public:
  // Listens on `address` (port 0: any free port) and starts the thread. The root gives up
  // after LOOM_INIT_TIMEOUT_MS, or the first registrant's init timeout if shorter.
  static Status start(const SocketAddress& address, const Secret& secret,
                      std::unique_ptr<BootstrapRoot>* out);
  ~BootstrapRoot();  // stops the thread if still running and joins it

  const SocketAddress& address() const { return address_; }
  // True once the root waits for nobody: it has at most its last replies to write, so
  // destroying it (which joins the thread) does not block on ranks.
  bool finished() const { return finished_.load(); }

 private:
  BootstrapRoot(Acceptor acceptor, long long timeoutMs);
  void run();
  Status serve();

  Acceptor acceptor_;
  SocketAddress address_;
  long long timeoutMs_;
  CancelSignal stop_;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace loom
