// Grouped calls of the MPI backend (comm.h group_start/group_end): the
// collectives of a group start as nonblocking MPI calls, each with scratch
// of its own; group_end waits for them in issue order and runs each one's
// remaining local work (the ordered reduction, an allreduce's second half).
// Every rank starts the same requests in the same order, as MPI requires.
#include <string>
#include <utility>

#include "mpi_comm.h"

namespace dscore::mpi_comm {

using sdk::Error;

void MpiComm::complete(MPI_Request request, const char* op, uint64_t seq, size_t bytes,
                       std::function<void()> then) {
  if (!grouping) {
    wait(&request, 1, op, seq, bytes);
    if (then) then();
    return;
  }
  pending.push_back({op, seq, bytes, position, request, std::move(then)});
}

unsigned char* MpiComm::scratch(std::vector<unsigned char>* reuse, size_t bytes) {
  if (!grouping) {
    if (reuse->size() < bytes) reuse->resize(bytes);
    return reuse->data();
  }
  // Each call of the group its own buffer (its data does not move when
  // group_scratch grows), as large as it asks.
  if (group_used == group_scratch.size()) group_scratch.emplace_back();
  ScratchBuffer& buffer = group_scratch[group_used++];
  if (buffer.bytes < bytes) {
    buffer.data.reset();  // the old one freed before the larger is taken
    buffer.data.reset(new unsigned char[bytes]);
    buffer.bytes = bytes;
  }
  return buffer.data.get();
}

void MpiComm::enter(const char* op, bool groupable) {
  if (!grouping) return;
  if (!groupable)
    throw Error(DSCORE_FAILED_PRECONDITION,
                std::string(op) +
                    " cannot be grouped: issue it before group_start or after "
                    "group_end");
  position = ++group_calls;
}

void MpiComm::group_start() {
  if (grouping)
    throw Error(DSCORE_FAILED_PRECONDITION,
                "group_start: a group is already open on this communicator; groups do not nest");
  grouping = true;
  group_calls = 0;
  pending.clear();
  group_used = 0;
}

void MpiComm::group_end() {
  if (!grouping) throw Error(DSCORE_FAILED_PRECONDITION, "group_end without group_start");
  const int calls = group_calls;
  auto where = [calls](const Pending& p) {
    return std::string(p.op) + " (op " + std::to_string(p.position) + " of " +
           std::to_string(calls) + " in the group): ";
  };
  dscore_status code = DSCORE_OK;
  std::string failure;
  // `then` may append (an allreduce's allgather half), so index, not iterate.
  for (size_t i = 0; i < pending.size(); ++i) {
    Pending p = std::move(pending[i]);
    position = p.position;
    try {
      wait(&p.request, 1, p.op, p.sequence, p.bytes);
      if (p.then) p.then();
    } catch (const Error& e) {
      if (e.code() == DSCORE_DEADLINE_EXCEEDED) {  // the job ends: do not wait for the rest
        grouping = false;
        pending.clear();
        group_used = 0;
        throw Error(e.code(), where(p) + e.what());
      }
      if (code == DSCORE_OK) {
        code = e.code();
        failure = where(p) + e.what();
      }
    }
  }
  grouping = false;
  pending.clear();
  group_used = 0;
  if (code != DSCORE_OK) throw Error(code, failure);
}

}  // namespace dscore::mpi_comm
