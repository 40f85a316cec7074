// The first bytes of every Loom connection: the job's secret and who is calling. Listening
// sides use an Acceptor, which lets only callers that know the secret through.
//
// Hello wire form (48 bytes, host byte order; Loom runs on little-endian hosts):
//   magic "LMHS" | version u16 | intent u16 | secret[16] | purpose u32 | rank i32 | nranks i32 |
//   link i32 | commId u64
#pragma once

#include <poll.h>

#include <cstdint>
#include <vector>

#include "base/socket.h"
#include "base/status.h"
#include "bootstrap/unique_id.h"

namespace loom {

enum class Purpose : uint32_t {
  kRegister = 1,   // a rank registering with the bootstrap root
  kBootstrap = 2,  // bootstrap channel between ranks
  kTransport = 3,  // socket transport link
};

// What a socket-transport connection is for. Only a link carries data; the others let a rank
// learn about a peer it has no link with yet, or why a linked peer gave up.
enum class Intent : uint16_t {
  kLink = 0,    // a data link; Hello::link is its index
  kWatch = 1,   // held open by a rank waiting for the listener's first link: it ends when
                // the listener's process does, after a 4-byte cause when the listener gives up
  kNotice = 2,  // the caller is giving up because rank Hello::link failed; then it closes
};

struct Hello {
  Purpose purpose = Purpose::kRegister;
  int32_t rank = -1;
  int32_t nranks = 0;
  uint64_t commId = 0;
  int32_t link = 0;  // kLink: which of several connections between the same pair; kNotice: the failed rank
  Intent intent = Intent::kLink;  // kTransport only
};

constexpr size_t kHelloBytes = 48;

// Reads a received hello: nullptr and *out filled when it is well formed, carries the
// secret and is for `purpose`; otherwise why it is not (for the log). Pure: the fuzz
// target calls it on arbitrary bytes.
const char* parseHello(const uint8_t in[kHelloBytes], const Secret& secret, Purpose purpose, Hello* out);

// Connects to `address` (retrying until the deadline, refused connections as `refused` says)
// and presents the secret and hello.
Status connectAndGreet(const SocketAddress& address, const Secret& secret, const Hello& hello,
                       const Deadline& deadline, int cancelFd, Fd* out, Refused refused = Refused::kRetry);

// Accepts connections on a listening socket and hands out only those that present the
// secret and a well-formed hello of the expected purpose within the handshake timeout
// (LOOM_HANDSHAKE_TIMEOUT_MS). Anything else (wrong secret, garbage, a stalled stranger)
// is closed and logged at WARN. Hellos are read without blocking, several at once, so a
// stranger cannot hold up the real peers. Not thread-safe.
class Acceptor {
 public:
  struct Connection {
    Fd fd;
    Hello hello;
    SocketAddress peer;
  };

  // Listens on `address` (port 0: any) for connections of `purpose`, with the handshake
  // timeout from LOOM_HANDSHAKE_TIMEOUT_MS. `what` names the port in errors.
  static Status listen(const SocketAddress& address, const Secret& secret, Purpose purpose,
                       const char* what, Acceptor* out);

  Acceptor() = default;  // listens nowhere until assigned
  Acceptor(Fd listenFd, const SocketAddress& address, const Secret& secret, Purpose purpose,
           int handshakeTimeoutMs);

  // Waits for the next authenticated connection.
  Status next(const Deadline& deadline, int cancelFd, Connection* out);
  // Without waiting: takes new connections and what their hellos sent; true with *out when one
  // is authenticated.
  bool takeReady(Connection* out);
  // What a caller's own poll watches to learn that takeReady may have work: the listener and
  // the connections still presenting their secret.
  void addWaitFds(PollFds* fds) const;

  const SocketAddress& address() const { return address_; }
  bool listening() const { return listen_.valid(); }
  // Connections dropped so far (tests read it).
  int rejected() const { return rejected_; }

 private:
  struct Pending {
    Fd fd;
    SocketAddress peer;
    uint8_t bytes[kHelloBytes];
    size_t received;
    Deadline deadline;
  };

  // Reads what a pending connection has sent; true when it is finished (accepted into
  // `out` or dropped).
  bool advance(Pending& pending, Connection* out, bool* accepted);
  void drop(Pending& pending, const char* why);

  Fd listen_;
  SocketAddress address_;
  Secret secret_;
  Purpose purpose_ = Purpose::kRegister;
  int handshakeTimeoutMs_ = 0;
  std::vector<Pending> pending_;
  int rejected_ = 0;
};

}  // namespace loom
