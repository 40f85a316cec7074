// A TCP port for a test's bootstrap root. A port derived from the pid can be taken by any
// connection's ephemeral port (CI saw rank 0 fail to listen and rank 1 wait out its init
// timeout), and so can the port after one the kernel handed out (CI saw torchrun's layout,
// whose root listens on MASTER_PORT + 1, fail so): tests take ports below the ephemeral
// range, which no outgoing connection is given, and check that each is free right now.
#pragma once

namespace loomtest {

// The first of `count` consecutive ports on 127.0.0.1 that nothing was bound to a moment
// ago; 0 if none was found.
int freePort(int count = 1);

}  // namespace loomtest
