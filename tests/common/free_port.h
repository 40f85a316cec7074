// A TCP port for a test's bootstrap root. A port derived from the pid can be taken by any
// connection's ephemeral port (CI saw rank 0 fail to listen and rank 1 wait out its init
// timeout), so tests ask the kernel for one that is free right now.
#pragma once

namespace loomtest {

// A port on 127.0.0.1 that nothing was bound to a moment ago (bound to 0 and released);
// 0 if the kernel would not give one.
int freePort();

}  // namespace loomtest
