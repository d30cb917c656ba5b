// Small collectives that make every rank reach the same decision: the
// outcome of a local action (so a save that failed on one rank fails on
// all, with that rank's reason), and rank 0's string (a checkpoint tag).
// Call them while the comm stream is idle.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/comm/communicator.h"

namespace dscore::comm {

// OK only when every rank's `local` is OK; otherwise the lowest failing
// rank's status, its message prefixed "rank R: " (cut at about 1000 bytes),
// marked shared_by_all_ranks(). One rank: `local` as is.
Status agree(Communicator& comm, const Status& local);

// Rank 0's `value` on every rank (INVALID_ARGUMENT on rank 0 when it is
// longer than max_bytes).
Result<std::string> broadcast_string(Communicator& comm, const std::string& value,
                                     size_t max_bytes);

// Every rank's `value`, in rank order, on every rank (any length).
Result<std::vector<std::string>> allgather_strings(Communicator& comm, const std::string& value);

}  // namespace dscore::comm
