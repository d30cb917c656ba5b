// Shared by the 1-bit optimizers (onebitadam, zerooneadam, onebitlamb).
// 1-bit compressed allreduce with worker and server error feedback, as
// DeepSpeed's NcclBackend.compressed_allreduce (docs/deepspeed-reference.md#onebitadam), over the
// host's communicator (comm.h): each rank sends the signs of its momentum
// (1 bit per element) plus one fp32 scale, so about 1/32 of the bytes of an
// fp32 allreduce cross the wire (exactly (1 + 1/W)/32 of them, plus scales).
#pragma once

#include <dscore/comm.h>
#include <dscore/plugin.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dscore::onebit {

// Elements of one tensor's buffers once padded so that every rank's server
// chunk is a whole number of bytes of signs: a multiple of W * lcm(W, 8).
int64_t padded_size(int64_t numel, int world_size);

// The error-feedback memory of one tensor: what compression lost last time,
// added back before the next compression. Zero-initialised.
struct ErrorFeedback {
  std::vector<float> worker;  // (padded_size) this rank's worker error
  std::vector<float> server;  // (padded_size / W) the server error of this rank's chunk
};

// 1 bit per element, most significant bit first (numpy/cupy packbits):
// bit set <=> value >= 0 (sign(0) counts as +1, as DeepSpeed's
// sign().add_(1).bool()). `values` has a multiple of 8 elements.
void pack_signs(const float* values, int64_t count, uint8_t* bits);
// +1 / -1 for each packed bit.
inline float sign_of(const uint8_t* bits, int64_t i) {
  return (bits[i >> 3] >> (7 - (i & 7))) & 1 ? 1.0f : -1.0f;
}

// Replaces m[0, numel) on every rank by the compressed average of all ranks'
// m, updating `errors` (resized and zeroed on first use). Collective: every
// rank calls it for the same tensor, in the same order. Throws sdk::Error /
// sdk::Reported when a collective fails.
void compressed_allreduce(const dscore_communicator& comm, float* m, int64_t numel,
                          ErrorFeedback& errors);

// Bytes of one compressed allreduce as the communicator counts them (send
// sides): all_to_all of the signs, allgather of the server signs, two
// allgathers of one fp32 scale.
int64_t compressed_bytes(int64_t numel, int world_size);

}  // namespace dscore::onebit
