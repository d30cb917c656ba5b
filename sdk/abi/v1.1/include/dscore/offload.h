/* dscore plugin ABI v1: offload swappers (DSCORE_KIND_OFFLOAD).
 *
 * A swapper moves buffers between memory and storage asynchronously so the
 * engine can stream optimizer state and parameters through NVMe (ZeRO-
 * Infinity) while it computes. The host owns files' meaning and buffers; the
 * swapper only performs I/O: open, submit reads and writes, reap completions.
 *
 * Chosen by "offload_optimizer"/"offload_param" {"device": "nvme"} (plugin
 * "nvme") or "cpu" (plugin "cpu"); the "aio" section is its params object.
 *
 * The engine consumes this kind through core/offload/swapper.h (NVMe
 * offload of optimizer state): one I/O thread per rank alone calls the
 * instance, splits transfers into requests of at most the "aio" block_size
 * and keeps up to queue_depth of them submitted. The built-in plugin is
 * plugins/offload/nvme (io_uring, or a pread/pwrite thread pool where
 * io_uring is unavailable). Structs grow at the end like every other kind's
 * (DSCORE_HAS_FIELD); ABI 1.0 did not freeze this header, so the fields
 * after `bytes` in dscore_io_completion and `backend` in the vtable are
 * read only when struct_size covers them.
 */
#ifndef DSCORE_OFFLOAD_H_
#define DSCORE_OFFLOAD_H_

#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dscore_offload dscore_offload;

/* open_file flags */
#define DSCORE_OPEN_READ (1u << 0)
#define DSCORE_OPEN_WRITE (1u << 1)
#define DSCORE_OPEN_CREATE (1u << 2) /* create if missing */
#define DSCORE_OPEN_TRUNCATE (1u << 3)

typedef int32_t dscore_io_op;
enum { DSCORE_IO_READ = 1, DSCORE_IO_WRITE = 2 };

/* One asynchronous transfer. `buffer`, `offset` and `bytes` are multiples of
 * alignment() (the buffer's ADDRESS too); the buffer stays owned by the host
 * and must not be touched by it until the completion is reaped. */
typedef struct dscore_io_request {
  uint32_t struct_size;
  dscore_io_op op;
  int64_t file;    /* a handle from open_file */
  uint64_t offset; /* bytes from the start of the file */
  void* buffer;
  size_t bytes;
  uint64_t user_data; /* echoed in the completion */
} dscore_io_request;

/* Filled by the plugin in wait(); the host sets struct_size, and the plugin
 * fills only the fields struct_size covers. A transfer either completes in
 * full (status OK, bytes == the request's bytes) or fails: the plugin
 * retries short transfers itself, so a short count is only ever reported
 * with an error. Statuses: RESOURCE_EXHAUSTED for a full disk or quota
 * (ENOSPC, EDQUOT), DATA_LOSS for a read that met the end of the file,
 * INTERNAL (EIO) or another fitting code for the rest. */
typedef struct dscore_io_completion {
  uint32_t struct_size;
  uint64_t user_data;
  dscore_status status;
  size_t bytes; /* bytes transferred (all of them on success) */
  /* The errno of a failed transfer (0 on success, and for a read that met
   * the end of the file). Default when not covered: 0. */
  int32_t os_error;
} dscore_io_completion;

typedef struct dscore_offload_vtable {
  uint32_t struct_size;

  /* Required. */
  dscore_status (*create)(const dscore_create_args* args, dscore_offload** out);
  /* Required. Waits for in-flight I/O, closes files. Never fails. */
  void (*destroy)(dscore_offload* self);

  /* Required. Alignment in bytes for buffer addresses, offsets and sizes. */
  size_t (*alignment)(const dscore_offload* self);

  /* Required. Open `path` with DSCORE_OPEN_* flags; *file receives a handle. */
  dscore_status (*open_file)(dscore_offload* self, const char* path, uint32_t flags, int64_t* file);
  /* Required. Waits for the file's I/O, then closes it. */
  dscore_status (*close_file)(dscore_offload* self, int64_t file);
  /* Required. Make completed writes to `file` durable (fsync). */
  dscore_status (*sync_file)(dscore_offload* self, int64_t file);

  /* Required. Queue `count` requests (borrowed structs; buffers stay the
   * host's). Returns once queued; errors of individual transfers come back
   * in their completions. RESOURCE_EXHAUSTED when the queue is full: reap
   * with wait() and resubmit. */
  dscore_status (*submit)(dscore_offload* self, const dscore_io_request* const* requests,
                          size_t count);

  /* Required. Block until at least min_count transfers completed (or
   * timeout_ms passed; -1 = no limit), then fill up to `capacity` entries of
   * `out` and set *count. DEADLINE_EXCEEDED when fewer than min_count
   * completed in time (those that did are still returned). */
  dscore_status (*wait)(dscore_offload* self, size_t min_count, int64_t timeout_ms,
                        dscore_io_completion* const* out, size_t capacity, size_t* count);

  /* Optional. Pre-register buffers for faster I/O (io_uring fixed buffers).
   * Each call REPLACES the registered set (count 0 clears it); the host
   * calls it with no transfer in flight, and keeps every buffer allocated
   * until the set is replaced or the instance destroyed. Failing to
   * register is not an error for the plugin (it then uses the buffers
   * unregistered). NULL or UNIMPLEMENTED: the host just does not register. */
  dscore_status (*register_buffers)(dscore_offload* self, void* const* buffers, const size_t* sizes,
                                    size_t count);

  /* Optional. The I/O mechanism this instance uses ("io_uring", "threads"),
   * a static string, for logs and reports. NULL: the host shows "unknown". */
  const char* (*backend)(const dscore_offload* self);
  /* ---- minor 0 ends here ---- */
} dscore_offload_vtable;

#ifdef __cplusplus
}
#endif

#endif /* DSCORE_OFFLOAD_H_ */
