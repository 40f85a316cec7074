// makeCommunicator (rendezvous.h).
#include "compat/torch/rendezvous.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "compat/torch/loom_error.h"

namespace loom::torch_backend {

loomComm_t makeCommunicator(c10d::Store& store, const std::string& key, int rank, int size, int timeoutMs,
                            int device) {
  loomUniqueId id;
  if (rank == 0) {
    if (loomGetUniqueId(&id) != loomSuccess) {
      throw loomError(nullptr, "loomGetUniqueId");
    }
    std::vector<uint8_t> bytes(sizeof id);
    std::memcpy(bytes.data(), &id, sizeof id);
    store.set(key, bytes);
  } else {
    const std::vector<uint8_t> bytes = store.get(key);
    if (bytes.size() != sizeof id) {
      throw std::runtime_error("loom: the store's unique id under " + key + " has " + std::to_string(bytes.size()) +
                               " bytes, not " + std::to_string(sizeof id));
    }
    std::memcpy(&id, bytes.data(), sizeof id);
  }
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.device = device;
  config.timeoutMs = timeoutMs;
  config.initTimeoutMs = timeoutMs;
  config.commName = device < 0 ? "torch.distributed" : "torch.distributed cuda";
  loomComm_t comm = nullptr;
  if (loomCommInitRankConfig(&comm, size, id, rank, &config) != loomSuccess) {
    throw loomError(nullptr, "loomCommInitRank");
  }
  return comm;
}

}  // namespace loom::torch_backend
