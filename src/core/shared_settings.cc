// Taking rank 0's data-path settings on every rank, with a warning where they differ (shared_settings.h).
#include "core/shared_settings.h"

#include <array>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/communicator.h"

namespace loom {
namespace {

// The shared fields of CommConfig as one flat record for the allgather.
struct Record {
  std::array<uint32_t, 16> algorithms;  // AlgorithmSetting::allowed
  uint32_t protocols;
  int32_t channels;
  int32_t socketLinks;
  int32_t ucxLinks;
  uint8_t shm, socket, ucx, networkAuto, topologyRing, check, deviceEmulation;
  int32_t deviceChannels;
  uint64_t sliceBytes;
  int64_t streamingMinBytes;  // -1: unset
  int64_t mappedMinBytes;  // -1: unset
  uint64_t deviceFifoBytes;
  uint64_t deviceSliceBytes;
};
static_assert(std::is_trivial_v<Record>);

Record recordOf(const CommConfig& c) {
  Record r;
  std::memset(&r, 0, sizeof(r));  // padding too: the bytes go on the wire
  r.algorithms = c.algorithms.allowed;
  r.protocols = c.protocols.allowed;
  r.channels = c.channels;
  r.socketLinks = c.socketLinks;
  r.ucxLinks = c.ucxLinks;
  r.shm = c.shm;
  r.socket = c.socket;
  r.ucx = c.ucx;
  r.networkAuto = c.networkAuto;
  r.topologyRing = c.topologyRing;
  r.check = c.check;
  r.deviceEmulation = c.deviceEmulation;
  r.deviceChannels = c.deviceChannels;
  r.sliceBytes = c.sliceBytes;
  r.streamingMinBytes = c.streamingMinBytes;
  r.mappedMinBytes = c.mappedMinBytes;
  r.deviceFifoBytes = c.deviceFifoBytes;
  r.deviceSliceBytes = c.deviceSliceBytes;
  return r;
}

void apply(const Record& r, CommConfig* c) {
  c->algorithms.allowed = r.algorithms;
  c->protocols.allowed = r.protocols;
  c->channels = r.channels;
  c->socketLinks = r.socketLinks;
  c->ucxLinks = r.ucxLinks;
  c->shm = r.shm != 0;
  c->socket = r.socket != 0;
  c->ucx = r.ucx != 0;
  c->networkAuto = r.networkAuto != 0;
  c->topologyRing = r.topologyRing != 0;
  c->check = r.check != 0;
  c->deviceEmulation = r.deviceEmulation != 0;
  c->deviceChannels = r.deviceChannels;
  c->sliceBytes = static_cast<size_t>(r.sliceBytes);
  c->streamingMinBytes = r.streamingMinBytes;
  c->mappedMinBytes = r.mappedMinBytes;
  c->deviceFifoBytes = static_cast<size_t>(r.deviceFifoBytes);
  c->deviceSliceBytes = static_cast<size_t>(r.deviceSliceBytes);
}

// The variables behind the fields that differ, comma-separated (as call_check's differingFields).
std::string namesOfDifferences(const Record& a, const Record& b) {
  std::string names;
  auto note = [&](bool differs, const char* name) {
    if (differs) names += std::string(names.empty() ? "" : ", ") + name;
  };
  note(a.shm != b.shm || a.socket != b.socket || a.ucx != b.ucx || a.networkAuto != b.networkAuto, "LOOM_TRANSPORTS");
  note(a.algorithms != b.algorithms, "LOOM_ALGO");
  note(a.protocols != b.protocols, "LOOM_PROTO");
  note(a.channels != b.channels, "LOOM_CHANNELS");
  note(a.topologyRing != b.topologyRing, "LOOM_RING_ORDER");
  note(a.sliceBytes != b.sliceBytes, "LOOM_CHUNK_SIZE");
  note(a.streamingMinBytes != b.streamingMinBytes, "LOOM_STREAMING_MIN_BYTES");
  note(a.mappedMinBytes != b.mappedMinBytes, "LOOM_MAPPED_MIN_BYTES");
  note(a.socketLinks != b.socketLinks, "LOOM_SOCKET_NSOCKS");
  note(a.ucxLinks != b.ucxLinks, "LOOM_UCX_LINKS");
  note(a.check != b.check, "LOOM_CHECK");
  note(a.deviceEmulation != b.deviceEmulation, "LOOM_DEVICE_EMULATION");
  note(a.deviceFifoBytes != b.deviceFifoBytes, "LOOM_DEVICE_FIFO_BYTES");
  note(a.deviceSliceBytes != b.deviceSliceBytes, "LOOM_DEVICE_SLICE_BYTES");
  return names;
}

}  // namespace

Status adoptRankZeroSettings(Bootstrap& bootstrap, CommConfig* config, std::string* differing) {
  std::vector<Record> all(static_cast<size_t>(bootstrap.nranks()));
  const Record mine = recordOf(*config);
  all[static_cast<size_t>(bootstrap.rank())] = mine;
  LOOM_TRY(bootstrap.allGather(all.data(), sizeof(Record)).withContext("data-path settings exchange"));
  *differing = namesOfDifferences(mine, all[0]);
  apply(all[0], config);
  return Status::ok();
}

}  // namespace loom
