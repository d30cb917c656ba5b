/* dscore plugin ABI v1: communication backends (DSCORE_KIND_COMM).
 *
 * A comm backend moves tensors between the ranks of a data-parallel job: MPI
 * for CPU tensors, NCCL for GPU tensors, a single-rank backend. Every rank is
 * one process. The host picks the backend from {"comm": {"backend": "<name>"}}.
 *
 * ORDERING: all ranks must issue the same collectives, with the same sizes and
 * dtypes, in the same order. The host guarantees that for its own calls.
 *
 * STREAMS (PROVISIONAL, see plugin.h): for CUDA tensors a collective is
 * enqueued on `stream` and returns; completion is observed through the
 * stream. For CPU tensors (stream NULL, as every ABI 1.0 host passes) a
 * collective returns when it has completed.
 *
 * GROUPS: split() makes a communicator over a subset of the ranks
 * (MPI_Comm_split / ncclCommSplit): data-parallel, pipeline and expert groups
 * are communicators of their own, each with its own ranks 0..n-1.
 *
 * TIMEOUTS: no collective may block forever. create() receives the job's
 * collective timeout (params "timeout_ms", filled by the host from the comm
 * section). When a peer dies or a collective exceeds it, return
 * DEADLINE_EXCEEDED or UNAVAILABLE with a message naming the collective and,
 * where known, the rank that did not arrive. The host then ends the job on
 * every rank.
 */
#ifndef DSCORE_COMM_H_
#define DSCORE_COMM_H_

#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dscore_comm dscore_comm;
struct dscore_comm_counters;

/* split()'s colour for a rank that joins no new communicator. */
#define DSCORE_COMM_SPLIT_NONE (-1)

/* Reduction operators; values follow DeepSpeed's ReduceOp. AVG is the sum
 * divided by the world size. Backends should reduce in a fixed order (rank
 * 0, 1, ... in fp32 for 16-bit data) so results do not depend on timing. */
typedef int32_t dscore_reduce_op;
enum {
  DSCORE_REDUCE_SUM = 0,
  DSCORE_REDUCE_PRODUCT = 1,
  DSCORE_REDUCE_MIN = 2,
  DSCORE_REDUCE_MAX = 3,
  DSCORE_REDUCE_AVG = 7
};

/* ABI 1.2: all_to_all_v's counts and offsets (below): world_size entries each. */
typedef struct dscore_all_to_all_layout {
  uint32_t struct_size;
  const int64_t* send_counts;
  const int64_t* send_offsets;
  const int64_t* recv_counts;
  const int64_t* recv_offsets;
} dscore_all_to_all_layout;

typedef struct dscore_comm_vtable {
  uint32_t struct_size;

  /* Required. Collective: every rank calls it. args->rank/world_size/
   * local_rank come from the launcher (mpirun, srun, torchrun variables).
   * Bootstrap data (an NCCL unique id) goes through host->kv_set/kv_get on
   * args->context. */
  dscore_status (*create)(const dscore_create_args* args, dscore_comm** out);

  /* Required. Collective where the backend needs it. Never fails. */
  void (*destroy)(dscore_comm* self);

  /* Required. recv = op over ranks of send. In place when send->data ==
   * recv->data. Same numel and dtype on both. */
  dscore_status (*allreduce)(dscore_comm* self, const dscore_tensor* send, dscore_tensor* recv,
                             dscore_reduce_op op, void* stream);

  /* Required. send has world_size * n elements, recv n: rank r receives the
   * reduction of chunk r of every rank's send. */
  dscore_status (*reduce_scatter)(dscore_comm* self, const dscore_tensor* send, dscore_tensor* recv,
                                  dscore_reduce_op op, void* stream);

  /* Required. send has n elements, recv world_size * n: chunk r of recv is
   * rank r's send. In place allowed when send->data is recv's chunk `rank`. */
  dscore_status (*allgather)(dscore_comm* self, const dscore_tensor* send, dscore_tensor* recv,
                             void* stream);

  /* Required. tensor on `root` is copied to every rank's tensor. */
  dscore_status (*broadcast)(dscore_comm* self, dscore_tensor* tensor, int32_t root, void* stream);

  /* Required. Point-to-point; a send on rank a to b must be matched by a
   * recv on b from a, in the same order. */
  dscore_status (*send)(dscore_comm* self, const dscore_tensor* tensor, int32_t peer, void* stream);
  dscore_status (*recv)(dscore_comm* self, dscore_tensor* tensor, int32_t peer, void* stream);

  /* Required. Returns when every rank has entered it (or times out). */
  dscore_status (*barrier)(dscore_comm* self);

  /* Optional. send and recv have world_size * n elements: chunk j of rank
   * i's send becomes chunk i of rank j's recv (OneBitAdam's sign exchange). */
  dscore_status (*all_to_all)(dscore_comm* self, const dscore_tensor* send, dscore_tensor* recv,
                              void* stream);

  /* Optional. Make the rest of the job fail fast (after a local fatal error):
   * pending and future collectives of this instance return UNAVAILABLE, and
   * the backend may end every rank's process (MPI_Abort). */
  void (*abort)(dscore_comm* self, const char* reason);

  /* Required. recv on `root` = op over ranks of send (same numel and dtype);
   * recv is ignored (may be NULL) on other ranks. In place on the root when
   * send->data == recv->data. ZeRO-1/2 reduce each gradient bucket into the
   * rank that owns that part of the partition. */
  dscore_status (*reduce)(dscore_comm* self, const dscore_tensor* send, dscore_tensor* recv,
                          dscore_reduce_op op, int32_t root, void* stream);

  /* Optional. Totals since create(), for the communication-volume checks
   * and comms_logger. The host sets out->struct_size. */
  dscore_status (*counters)(const dscore_comm* self, struct dscore_comm_counters* out);

  /* Optional (UNIMPLEMENTED when absent; the host then cannot form groups).
   * Collective over self: every rank calls it. The ranks passing the same
   * `color` (>= 0) form one new communicator, ranked by `key` and then by
   * their rank in self; a rank passing DSCORE_COMM_SPLIT_NONE takes part but
   * gets *out = NULL. The new communicator is independent of self (either
   * may be destroyed first) and is destroyed with destroy(); it keeps self's
   * timeout. */
  dscore_status (*split)(dscore_comm* self, int32_t color, int32_t key, dscore_comm** out);
  /* ---- minor 0 ends here ---- */

  /* Optional, added in minor 2 (read only when struct_size covers them;
   * both or neither). GROUPED CALLS: the collectives issued between
   * group_start and group_end (allreduce, reduce_scatter, allgather,
   * broadcast, reduce, all_to_all; never send/recv, barrier or split) may
   * be started together and complete only at group_end: until group_end
   * returns (CPU) or until `stream` reaches it (CUDA), no recv buffer holds
   * its result and every send and recv buffer must stay valid and
   * unchanged. A call inside a group returns once the collective is
   * queued, or an error for arguments it rejects at once. group_end returns
   * when every queued collective completed (CPU) or is enqueued on `stream`
   * (CUDA), after waiting for all of them even when one failed; its error
   * names the first failed collective and its position in the group
   * ("reduce_scatter (op 3 of 8 in the group): ...") (a missed deadline is
   * returned at once: the job ends). Results equal the
   * same calls issued one by one, bit for bit. Groups do not nest; every
   * rank issues the same grouped calls in the same order (ORDERING above).
   * When these are NULL the host issues the calls of a group one by one. */
  dscore_status (*group_start)(dscore_comm* self);
  dscore_status (*group_end)(dscore_comm* self, void* stream);

  /* Optional, added in minor 2 (read only when struct_size covers it).
   * ALL-TO-ALL WITH VARIABLE COUNTS (MPI_Alltoallv; an MoE layer's tokens
   * to their experts' ranks and back): this rank sends
   * layout->send_counts[j] elements from send at layout->send_offsets[j]
   * to rank j, and receives layout->recv_counts[j] elements from rank j
   * into recv at layout->recv_offsets[j]. Counts and offsets are in
   * elements of the tensors' (equal) dtype; recv_counts[j] here must equal
   * rank j's send_counts[this rank] (exchange them first, e.g. with
   * all_to_all). send and recv are different buffers. Not inside a group. */
  dscore_status (*all_to_all_v)(dscore_comm* self, const dscore_tensor* send, dscore_tensor* recv,
                                const dscore_all_to_all_layout* layout, void* stream);
} dscore_comm_vtable;

/* What a backend actually moved. "Payload" counts tensor bytes only, not
 * protocol headers. */
typedef struct dscore_comm_counters {
  uint32_t struct_size;
  uint64_t operations;     /* collectives and point-to-point calls completed */
  uint64_t bytes_sent;     /* payload bytes this rank sent */
  uint64_t bytes_received; /* payload bytes this rank received */
} dscore_comm_counters;

/* A communicator as the host hands it to plugins that talk
 * (host->communicator(ctx, group)). The vtable is the HOST's: calls through
 * it are counted (bytes per collective, for comms_logger) and checked, then
 * forwarded to the backend; create, destroy, split, group_start and
 * group_end are NULL here. Use it
 * only from the thread that calls your plugin, and obey the ORDERING rule
 * above among the ranks of the group. */
typedef struct dscore_communicator {
  uint32_t struct_size;
  int32_t rank;
  int32_t world_size;
  const dscore_comm_vtable* vtable; /* create/destroy/split are NULL here */
  dscore_comm* comm;                /* the first argument of every vtable call */
} dscore_communicator;

#ifdef __cplusplus
}
#endif

#endif /* DSCORE_COMM_H_ */
