// ucxAbortsInWireup (ucx_version.h).
#include "common/ucx_version.h"

#if LOOM_TEST_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

namespace loomtest {

bool ucxAbortsInWireup() {
#if LOOM_TEST_HAVE_UCX
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return major < 1 || (major == 1 && minor < 14);
#else
  return false;
#endif
}

}  // namespace loomtest
