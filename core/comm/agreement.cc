#include "core/comm/agreement.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace dscore::comm {
namespace {

constexpr size_t kSlotBytes = 1024;

}  // namespace

Status agree(Communicator& comm, const Status& local) {
  const int world = comm.world_size();
  if (world == 1) return local;
  std::vector<char> mine(kSlotBytes, 0);
  const int32_t code = local.code();
  const std::string& message = local.message();
  const uint32_t length = static_cast<uint32_t>(std::min(message.size(), kSlotBytes - 8));
  std::memcpy(mine.data(), &code, 4);
  std::memcpy(mine.data() + 4, &length, 4);
  std::memcpy(mine.data() + 8, message.data(), length);
  std::vector<char> all(kSlotBytes * static_cast<size_t>(world));
  DSCORE_RETURN_IF_ERROR(
      comm.allgather({mine.data(), DSCORE_DTYPE_U8, static_cast<int64_t>(kSlotBytes)},
                     {all.data(), DSCORE_DTYPE_U8, static_cast<int64_t>(all.size())}));
  for (int r = 0; r < world; ++r) {
    const char* slot = all.data() + kSlotBytes * static_cast<size_t>(r);
    int32_t c;
    uint32_t n;
    std::memcpy(&c, slot, 4);
    std::memcpy(&n, slot + 4, 4);
    if (c == DSCORE_OK) continue;
    n = std::min<uint32_t>(n, kSlotBytes - 8);
    return Status(static_cast<StatusCode>(c),
                  "rank " + std::to_string(r) + ": " + std::string(slot + 8, n))
        .as_shared_by_all_ranks();
  }
  return Status::Ok();
}

Result<std::string> broadcast_string(Communicator& comm, const std::string& value,
                                     size_t max_bytes) {
  Status local = comm.rank() == 0 && value.size() > max_bytes
                     ? invalid_argument("\"" + value.substr(0, 64) + "...\" is longer than " +
                                        std::to_string(max_bytes) + " bytes")
                     : Status::Ok();
  DSCORE_RETURN_IF_ERROR(agree(comm, local));
  if (comm.world_size() == 1) return value;
  std::vector<char> buffer(max_bytes + 8, 0);
  if (comm.rank() == 0) {
    const uint64_t n = value.size();
    std::memcpy(buffer.data(), &n, 8);
    std::memcpy(buffer.data() + 8, value.data(), value.size());
  }
  DSCORE_RETURN_IF_ERROR(
      comm.broadcast({buffer.data(), DSCORE_DTYPE_U8, static_cast<int64_t>(buffer.size())}, 0));
  uint64_t n;
  std::memcpy(&n, buffer.data(), 8);
  return std::string(buffer.data() + 8, std::min<uint64_t>(n, max_bytes));
}

Result<std::vector<std::string>> allgather_strings(Communicator& comm, const std::string& value) {
  const int world = comm.world_size();
  if (world == 1) return std::vector<std::string>{value};
  std::vector<int64_t> lengths(static_cast<size_t>(world));
  int64_t mine = static_cast<int64_t>(value.size());
  DSCORE_RETURN_IF_ERROR(
      comm.allgather({&mine, DSCORE_DTYPE_I64, 1}, {lengths.data(), DSCORE_DTYPE_I64, world}));
  const int64_t widest = *std::max_element(lengths.begin(), lengths.end());
  if (widest == 0) return std::vector<std::string>(static_cast<size_t>(world));
  std::vector<char> slot(static_cast<size_t>(widest), 0);
  if (!value.empty()) std::memcpy(slot.data(), value.data(), value.size());
  std::vector<char> all(static_cast<size_t>(widest * world));
  DSCORE_RETURN_IF_ERROR(comm.allgather({slot.data(), DSCORE_DTYPE_U8, widest},
                                        {all.data(), DSCORE_DTYPE_U8, widest * world}));
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r)
    out.emplace_back(all.data() + widest * r, static_cast<size_t>(lengths[static_cast<size_t>(r)]));
  return out;
}

}  // namespace dscore::comm
