// The MPI backend's collectives (see collectives.cc). Each throws
// sdk::Error on bad arguments, an MPI failure or a missed deadline.
#pragma once

#include "mpi_comm.h"

namespace dscore::mpi_comm {

void allreduce(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op);
void reduce_scatter(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv,
                    dscore_reduce_op op);
void reduce(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv, dscore_reduce_op op,
            int root);
void allgather(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv);
void all_to_all(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv);
void all_to_all_v(MpiComm* m, const dscore_tensor* send, dscore_tensor* recv,
                  const dscore_all_to_all_layout& layout);
void broadcast(MpiComm* m, dscore_tensor* tensor, int root);
void point_to_point(MpiComm* m, const dscore_tensor* tensor, int peer, bool sending);
void barrier(MpiComm* m);

}  // namespace dscore::mpi_comm
