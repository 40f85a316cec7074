// Which RDMA transports UCX can use on this host (InfiniBand or RoCE through verbs): what
// decides whether Loom crosses hosts over UCX by default (LOOM_TRANSPORTS's `auto`).
#pragma once

#include <string>
#include <vector>

namespace loom::transport {

// "rc_mlx5/mlx5_0:1"-style names of UCX's verbs transports on network devices here; empty
// where there are none or UCX cannot list them. Builds with UCX only.
std::vector<std::string> ucxRdmaTransports();

}  // namespace loom::transport
