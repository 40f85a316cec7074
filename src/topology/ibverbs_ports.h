// RDMA port speeds from ibverbs (InfiniBand and RoCE alike), which reports what the port
// negotiated: its lanes and their signalling rate. /sys's `rate` file (pci.h) says the same
// where the kernel exposes it; ibverbs is asked first when Loom is built with it.
#pragma once

#include <string>

namespace loom::topo {

// Gbit/s of a port running `width` lanes (ibv_port_attr::active_width: 1 = 1x, 16 = 2x,
// 2 = 4x, 4 = 8x, 8 = 12x) at `speed` per lane (active_speed: 1 SDR 2.5, 2 DDR 5, 4 QDR 10,
// 8 FDR10 10, 16 FDR 14, 32 EDR 25, 64 HDR 50, 128 NDR 100), as `ibstat` prints it:
// 4x EDR -> 100. 0 for a code it does not know.
double ibverbsRateGbps(unsigned speed, unsigned width);

// Gbit/s of port 1 of the RDMA device `rdmaName` ("mlx5_0") as ibverbs reports it; 0 when
// Loom is built without ibverbs, there is no such device, or its port is not active.
double ibverbsPortGbps(const std::string& rdmaName);

}  // namespace loom::topo
