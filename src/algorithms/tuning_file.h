// The cost model's calibrated constants on disk, and the fit that calibration makes from
// measured times. The file is small text, one `key = value` a line, '#' to the end of a
// line is a comment:
//
//   # loom tuning file v1
//   machine = node17              (informational: where it was measured)
//   intra.latency_us = 1.5        µs, >= 0
//   intra.gbps = 8                GB/s, > 0
//   inter.latency_us = 25
//   inter.gbps = 1.2
//   reduce.gbps = 10
//   copy.gbps = 13
//   oneshot.latency_us = 0.5
//   oneshot.max_bytes.allreduce = 8192   per collective (allreduce, broadcast, reduce, allgather,
//                                 reducescatter, alltoall): the largest call the machine
//                                 calibration timed no slower on the one-shot board than through
//                                 the FIFO, two ranks of one host (select.cc); 0 or absent: not
//                                 timed; a whole number
//   mem.gbps = 4.5                shared memory past the cache, plain stores
//   streaming.gbps = 6            ... and non-temporal stores
//   streaming.min_bytes = 33554432  calls from this size on no longer fit the cache (0: none
//                                 counted as past it); a whole number
//   direct.gbps = 10              shared memory read straight from the sender's buffer
//   device.simple.latency_us = 4  a device communicator's plan kernel (loom-perf --calibrate
//   device.simple.gbps = 200      --device cuda): a hop of its simple wire, of its low-
//   device.ll.latency_us = 4      latency wire, its local copy and its reduction; a device
//   device.ll.gbps = 2.5          communicator reads these in place of intra.*, copy.gbps
//   device.copy.gbps = 400        and reduce.gbps, and inter.* as a host one does
//   device.reduce.gbps = 400
//   chunk.bytes = 524288          data-path sizes (DataPathSizes below), whole numbers:
//   shm.fifo_bytes = 1048576      LOOM_CHUNK_SIZE, LOOM_SHM_FIFO_BYTES and LOOM_SOCKET_SNDBUF
//   socket.sndbuf = 262144        where those variables are unset; direct reads between
//   shm.direct_min_bytes = 0      processes from this size (0: never) where LOOM_SHM_DIRECT is
//                                 unset
//
// Every key is optional; when one appears twice, the last one read wins. A key is checked
// wherever it appears but sets only the profiles it is for (device.* device communicators',
// intra.* to direct.gbps host ones'); `ll.latency_us` and `ll.gbps`, earlier names, read as
// device.ll.*.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/cost_model.h"
#include "base/status.h"

namespace loom {

// The sizes of the data path that a tuning file may carry beside the model's constants. They
// are settings, not constants: read when a communicator is configured, before its links
// exist, each under its environment variable (communicator.cc). -1: not in the file.
struct DataPathSizes {
  long long chunkBytes = -1;        // chunk.bytes: LOOM_CHUNK_SIZE
  long long shmFifoBytes = -1;      // shm.fifo_bytes: LOOM_SHM_FIFO_BYTES
  long long socketSendBuffer = -1;  // socket.sndbuf: LOOM_SOCKET_SNDBUF
  // shm.direct_min_bytes: where LOOM_SHM_DIRECT is unset, processes of one host read each
  // other's sends from this size straight from the sender's memory (0: never; ShmTransport).
  long long shmDirectMinBytes = -1;
};

// Sets the constants that `path` names in *inout and leaves the others; *keysRead (when not
// null) gets the keys the file set, in file order. An unreadable file, a line without '=', an
// unknown key, a value that is not a finite number, a negative latency, a bandwidth <= 0 or
// a size that is not a whole number >= 0 is loomInvalidArgument naming the file, the line
// and the key; *inout is then untouched. The data-path sizes go to *sizes (when not null;
// never to *keysRead).
Status loadTuningFile(const std::string& path, CommProfile* inout, std::vector<std::string>* keysRead = nullptr,
                      DataPathSizes* sizes = nullptr);

// loadTuningFile for the lines of `text`; `origin` stands for the file in messages.
Status applyTuningText(const std::string& text, const std::string& origin, CommProfile* inout,
                       std::vector<std::string>* keysRead = nullptr, DataPathSizes* sizes = nullptr);

// The keys above that set `profile` (a host or a device communicator's), in the order above
// (not the data-path sizes'), leaving out oneshot.max_bytes.* where not timed (0).
std::vector<std::string> tuningKeys(const CommProfile& profile);

// The value `key` names in `profile` (NaN for a key not above or not for such a profile).
double tuningValue(const CommProfile& profile, const std::string& key);

// The lines of `keys` (every key of tuningKeys(profile) when empty) that are for `profile`,
// each value in the fewest digits that read back to the same double.
std::string tuningText(const CommProfile& profile, const std::vector<std::string>& keys = {});

// The lines of the sizes in `sizes` that are >= 0, in the order above.
std::string dataPathText(const DataPathSizes& sizes);

// Writes the header, each line of `comment` as a comment line, `machine` (when
// `hostname` is not empty), tuningText(profile, keys) and dataPathText(sizes).
// loomSystemError when the file cannot be written.
Status saveTuningFile(const std::string& path, const CommProfile& profile, const std::string& hostname,
                      const std::vector<std::string>& keys = {}, const std::string& comment = "",
                      const DataPathSizes& sizes = {});

// The link that best explains measured (bytes, µs) points: the least-squares line
// time = latencyUs + bytes / (gbps * 1e3). A negative intercept is clamped to 0 (the line
// through the origin is then fitted). Fewer than two distinct sizes, or times that do not
// grow with size, are loomInvalidArgument; *out is then untouched.
Status fitLinkCost(const std::vector<std::pair<size_t, double>>& bytesAndUs, LinkCost* out);

// oneshot.latency_us from an 8 B allreduce on the one-shot board measured at `measuredUs`
// between `p`'s ranks: the measurement less the copy and fold the model adds (0 at least).
double oneShotLatencyFrom(double measuredUs, const CommProfile& p);

}  // namespace loom
