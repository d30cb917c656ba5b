// The NCCL backend's collectives (see collectives.cc). Each enqueues its
// work on `stream` (the instance's own stream when NULL) and returns
// without waiting for it; each throws sdk::Error on bad arguments, an NCCL
// failure or a missed enqueue deadline.
#pragma once

#include "nccl_comm.h"

namespace dscore::nccl_comm {

void allreduce(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op,
               cudaStream_t stream);
void reduce_scatter(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv,
                    dscore_reduce_op op, cudaStream_t stream);
void reduce(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op,
            int root, cudaStream_t stream);
void allgather(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv, cudaStream_t stream);
void all_to_all(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv, cudaStream_t stream);
void all_to_all_v(NcclComm* m, const dscore_tensor* send, dscore_tensor* recv,
                  const dscore_all_to_all_layout& layout, cudaStream_t stream);
void broadcast(NcclComm* m, dscore_tensor* tensor, int root, cudaStream_t stream);
void point_to_point(NcclComm* m, const dscore_tensor* tensor, int peer, bool sending,
                    cudaStream_t stream);
// A one-element allreduce on the instance's stream, then a timed wait for
// that stream (so also for every collective enqueued on it before).
void barrier(NcclComm* m);

}  // namespace dscore::nccl_comm
