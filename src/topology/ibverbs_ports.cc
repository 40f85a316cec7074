// RDMA port speeds read through ibverbs (ibverbs_ports.h).
#include "topology/ibverbs_ports.h"

#include "loom_build_config.h"

#if LOOM_HAVE_IBVERBS
#include <infiniband/verbs.h>

#include <cstring>
#include <memory>
#endif

namespace loom::topo {

double ibverbsRateGbps(unsigned speed, unsigned width) {
  double laneGbps = 0;
  switch (speed) {
    case 1: laneGbps = 2.5; break;
    case 2: laneGbps = 5; break;
    case 4: laneGbps = 10; break;
    case 8: laneGbps = 10; break;
    case 16: laneGbps = 14; break;
    case 32: laneGbps = 25; break;
    case 64: laneGbps = 50; break;
    case 128: laneGbps = 100; break;
    default: return 0;
  }
  switch (width) {
    case 1: return laneGbps;
    case 16: return 2 * laneGbps;
    case 2: return 4 * laneGbps;
    case 4: return 8 * laneGbps;
    case 8: return 12 * laneGbps;
    default: return 0;
  }
}

#if LOOM_HAVE_IBVERBS

namespace {

struct DeviceListFree {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};
struct ContextClose {
  void operator()(ibv_context* context) const { ibv_close_device(context); }
};

}  // namespace

double ibverbsPortGbps(const std::string& rdmaName) {
  int count = 0;
  std::unique_ptr<ibv_device*, DeviceListFree> devices(ibv_get_device_list(&count));
  if (!devices) return 0;
  for (int i = 0; i < count; ++i) {
    if (rdmaName != ibv_get_device_name(devices.get()[i])) continue;
    std::unique_ptr<ibv_context, ContextClose> context(ibv_open_device(devices.get()[i]));
    ibv_port_attr port;
    std::memset(&port, 0, sizeof(port));
    if (!context || ibv_query_port(context.get(), 1, &port) != 0 || port.state != IBV_PORT_ACTIVE) return 0;
    return ibverbsRateGbps(port.active_speed, port.active_width);
  }
  return 0;
}

#else

double ibverbsPortGbps(const std::string&) { return 0; }

#endif

}  // namespace loom::topo
