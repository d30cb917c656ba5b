/* dscore plugin ABI, version 1: what every plugin library shares.
 *
 * A plugin library is a shared object that exports exactly one symbol,
 * `dscore_plugin_library_v1`, returning a static table that describes the
 * library and the plugins it holds (optimizers, LR schedulers, offload
 * swappers, comm backends, monitors, models). This header defines that table,
 * the types every kind uses (status codes, tensor views, named values) and the
 * host services table the host hands to the library. One header per plugin
 * kind (optimizer.h, scheduler.h, ...) defines that kind's function table.
 *
 * Plain C11; depends on nothing but <stdint.h> and <stddef.h>; compiles as C
 * and as C++. Start from sdk/examples/ and docs/plugin-author-guide.md.
 *
 * RULES THAT HOLD FOR EVERY FUNCTION IN THE ABI
 *
 * Versioning. Every struct that crosses the boundary begins with
 * `uint32_t struct_size`, set by whoever fills the struct to sizeof() of the
 * struct as that side compiled it. Within ABI major 1 structs only grow at the
 * end. A reader reads a field only when struct_size covers it
 * (DSCORE_HAS_FIELD); fields it cannot see take their documented default.
 * Arrays of growable structs are passed as arrays of pointers, so a bigger
 * struct on one side never changes the stride seen by the other.
 * A library built against minor M loads into a host of minor H when M <= H,
 * or when M > H and the library's min_host_minor <= H. Never an exact match.
 *
 * Context. Every host service takes the dscore_host_context of the instance
 * it works for: the `context` of the dscore_create_args that created it (or,
 * inside init(), the library context init() received). One context belongs
 * to one engine, so two engines in one process (a trainer and its eval
 * engine, two tests in one binary) never share a communicator, a memory
 * ledger, an error slot or a key-value store. Keep the pointer with the
 * instance; it is valid until the instance is destroyed.
 *
 * Errors. A fallible function returns dscore_status: DSCORE_OK (0) or one of
 * the codes below. The human-readable message goes through the host:
 * `return host->set_error(ctx, DSCORE_INVALID_ARGUMENT, "lr must be > 0");`.
 * No memory crosses allocators. No C++ exception, longjmp or exit() may leave
 * a plugin function: catch everything at the boundary (the optional C++
 * helpers in dscore/cpp/plugin.hpp do that for you). A feature a plugin does
 * not offer answers DSCORE_UNIMPLEMENTED, never a crash.
 *
 * Ownership. Pointers passed INTO a plugin function are borrowed for the
 * duration of that call unless the function says otherwise; copy what you
 * keep. Objects a plugin creates (create_x) are destroyed by the same plugin
 * (destroy_x), called by the host exactly once. Large or long-lived memory
 * (buffers that scale with the model) should come from host->alloc so the
 * host can count it, pin it and report it.
 *
 * Threading. Unless a function says otherwise, the host calls the functions of
 * one instance from one thread at a time (not necessarily the same thread).
 * Different instances may be called concurrently. Host services are
 * thread-safe.
 *
 * Provisional. Parts marked PROVISIONAL have no consumer in the engine yet
 * and are not frozen by ABI 1.0: device memory, the `stream` arguments and
 * the key-value store across processes. Their shape is settled by the GPU
 * work, which may change them before a release freezes them. The offload
 * (swapper) kind, not frozen by 1.0 either, now has its consumer (NVMe
 * offload, offload.h) and only grows at the end. Everything else is frozen
 * at 1.0.
 */
#ifndef DSCORE_PLUGIN_H_
#define DSCORE_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ versions */

#define DSCORE_ABI_VERSION_MAJOR 1
#define DSCORE_ABI_VERSION_MINOR 2

/* The entry symbol of ABI major 1. A new major gets a new symbol name, so a
 * host can look for every major it speaks. */
#define DSCORE_PLUGIN_ENTRY_SYMBOL "dscore_plugin_library_v1"

/* Visibility for the entry symbol; everything else in a plugin stays hidden. */
#if defined(_WIN32)
#define DSCORE_PLUGIN_EXPORT __declspec(dllexport)
#else
#define DSCORE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* True when a struct of type `type` pointed to by `ptr` (whose struct_size
 * was set by the other side) contains `field`. Read a field only if so. */
#define DSCORE_HAS_FIELD(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* ----------------------------------------------------------------- status */

/* 0 = success. Codes follow the canonical set used by abseil/gRPC/PJRT. */
typedef int32_t dscore_status;
enum {
  DSCORE_OK = 0,
  DSCORE_CANCELLED = 1,
  DSCORE_UNKNOWN = 2,
  DSCORE_INVALID_ARGUMENT = 3,  /* bad parameter value or shape */
  DSCORE_DEADLINE_EXCEEDED = 4, /* a timeout (e.g. a collective) expired */
  DSCORE_NOT_FOUND = 5,         /* a named thing does not exist */
  DSCORE_ALREADY_EXISTS = 6,
  DSCORE_PERMISSION_DENIED = 7,
  DSCORE_RESOURCE_EXHAUSTED = 8,  /* out of memory, disk full */
  DSCORE_FAILED_PRECONDITION = 9, /* called in the wrong state */
  DSCORE_ABORTED = 10,
  DSCORE_OUT_OF_RANGE = 11,
  DSCORE_UNIMPLEMENTED = 12, /* optional feature not offered */
  DSCORE_INTERNAL = 13,      /* a bug or broken invariant */
  DSCORE_UNAVAILABLE = 14,   /* a peer or device went away */
  DSCORE_DATA_LOSS = 15      /* corrupt or truncated data */
};
#define DSCORE_STATUS_MAX 15

/* ----------------------------------------------------------- data types */

typedef int32_t dscore_dtype;
enum {
  DSCORE_DTYPE_INVALID = 0,
  DSCORE_DTYPE_F32 = 1,
  DSCORE_DTYPE_F16 = 2,  /* IEEE binary16 */
  DSCORE_DTYPE_BF16 = 3, /* bfloat16 */
  DSCORE_DTYPE_F64 = 4,
  DSCORE_DTYPE_I8 = 5,
  DSCORE_DTYPE_U8 = 6,
  DSCORE_DTYPE_I16 = 7,
  DSCORE_DTYPE_U16 = 8,
  DSCORE_DTYPE_I32 = 9,
  DSCORE_DTYPE_U32 = 10,
  DSCORE_DTYPE_I64 = 11,
  DSCORE_DTYPE_U64 = 12,
  DSCORE_DTYPE_BOOL = 13 /* one byte, 0 or 1 */
};

/* Device numbering follows DLPack's DLDeviceType. */
typedef int32_t dscore_device_type;
enum {
  DSCORE_DEVICE_CPU = 1,
  DSCORE_DEVICE_CUDA = 2,
  DSCORE_DEVICE_CUDA_HOST = 3 /* pinned host memory, CPU-addressable */
};

/* ------------------------------------------------------------ tensor view */

/* A borrowed view of memory the caller owns. Never freed by the receiver.
 * `shape` has `ndim` entries; `strides` (in ELEMENTS, not bytes) is NULL for a
 * dense row-major tensor. `numel` is the product of `shape` (1 for ndim 0).
 * `name` may be NULL; when set it is the parameter/state name for messages. */
typedef struct dscore_tensor {
  uint32_t struct_size;
  void* data;
  dscore_dtype dtype;
  dscore_device_type device_type;
  int32_t device_id;
  int32_t ndim;
  const int64_t* shape;
  const int64_t* strides;
  int64_t numel;
  const char* name;
} dscore_tensor;

/* ----------------------------------------------------------- named values */

/* A typed configuration value: how a plugin receives its `params` object.
 * The host has already validated it against the plugin's params schema,
 * filled defaults and resolved "auto", so a plugin with a schema sees every
 * declared parameter, with the declared type. */
typedef int32_t dscore_value_type;
enum {
  DSCORE_VALUE_NULL = 0,
  DSCORE_VALUE_BOOL = 1,         /* b */
  DSCORE_VALUE_INT = 2,          /* i */
  DSCORE_VALUE_DOUBLE = 3,       /* d */
  DSCORE_VALUE_STRING = 4,       /* s (UTF-8, NUL-terminated) */
  DSCORE_VALUE_DOUBLE_ARRAY = 5, /* doubles[0..count) */
  DSCORE_VALUE_JSON = 6          /* s holds JSON text (objects, mixed arrays) */
};

typedef struct dscore_named_value {
  uint32_t struct_size;
  const char* name;
  dscore_value_type type;
  int32_t b;
  int64_t i;
  double d;
  const char* s;
  const double* doubles;
  size_t count;
} dscore_named_value;

/* --------------------------------------------------------- host services */

typedef int32_t dscore_log_level;
enum { DSCORE_LOG_DEBUG = 0, DSCORE_LOG_INFO = 1, DSCORE_LOG_WARNING = 2, DSCORE_LOG_ERROR = 3 };

typedef int32_t dscore_memory_kind;
enum {
  DSCORE_MEMORY_HOST = 0,   /* ordinary CPU memory */
  DSCORE_MEMORY_PINNED = 1, /* page-locked host memory (CUDA pinned if available) */
  DSCORE_MEMORY_DEVICE = 2  /* PROVISIONAL: accelerator memory of the current device */
};

/* The context a plugin instance lives in: one per engine (its communicator
 * groups, memory ledger, error slots, key-value store). Opaque and owned by
 * the host; see "Context" above. */
typedef struct dscore_host_context dscore_host_context;

/* Communicator groups a context may hold (host->communicator). Values are
 * stable; new groups (pipeline, expert, tensor parallel) are appended when
 * the engine has them. */
typedef int32_t dscore_comm_group;
enum {
  DSCORE_GROUP_WORLD = 0,             /* every rank of the job */
  DSCORE_GROUP_DATA_PARALLEL = 1,     /* the replicas that reduce gradients together
                                         (the whole world until model parallelism) */
  DSCORE_GROUP_TENSOR_PARALLEL = 2,   /* ABI 1.2: the ranks that hold the parts of one
                                         model replica's split tensors (AutoTP's
                                         autotp_size); none without tensor parallelism */
  DSCORE_GROUP_SEQUENCE_PARALLEL = 3, /* ABI 1.2: the ranks that split each sample's
                                        sequence (Ulysses' sequence_parallel_size; the
                                        model exchanges heads with all_to_all); none
                                        without sequence parallelism */
  DSCORE_GROUP_EXPERT_PARALLEL = 4    /* ABI 1.2: the ranks an MoE layer's experts are
                                        spread over (expert_parallel.autoep_size; the
                                        model sends each token to its experts' rank with
                                        all_to_all_v); none without expert parallelism */
};

struct dscore_communicator; /* comm.h */

/* Given to a library's init() and valid until its shutdown() returns.
 * Append-only: fields above each "minor N" marker exist in every host of that
 * minor or later. All functions are thread-safe. Each takes the context of
 * the instance it serves (dscore_create_args.context) or, in init(), the
 * library context; NULL is tolerated (the call then reaches no engine: log
 * lines still print, errors and allocations are not attributed). */
typedef struct dscore_host_api {
  uint32_t struct_size;
  uint32_t abi_major; /* the host's ABI version */
  uint32_t abi_minor;
  const char* host_version; /* dscore release, e.g. "0.1.0" */

  /* Log one line under the plugin's name. `message` is copied. */
  void (*log)(dscore_host_context* ctx, dscore_log_level level, const char* plugin,
              const char* message);

  /* Record `message` as the error of the current call (this context, this
   * thread) and return `code` unchanged, so
   * `return host->set_error(ctx, code, "...")` works. The host reads it
   * after the plugin function returns non-OK. A plugin that returns an
   * error without calling set_error still works; the message then says only
   * the code. */
  dscore_status (*set_error)(dscore_host_context* ctx, dscore_status code, const char* message);

  /* Memory counted in the context's ledger. `alignment` is a power of two
   * (0 = 64). Returns NULL on failure (and records RESOURCE_EXHAUSTED).
   * `tag` names the use for memory reports and may be NULL. Free with the
   * same context and kind. free(NULL) is a no-op. DSCORE_MEMORY_DEVICE is
   * PROVISIONAL: it fails (UNIMPLEMENTED) in hosts without an accelerator
   * allocator, which in ABI 1.0 is every host. */
  void* (*alloc)(dscore_host_context* ctx, size_t bytes, size_t alignment, dscore_memory_kind kind,
                 const char* tag);
  void (*free)(dscore_host_context* ctx, void* ptr, dscore_memory_kind kind);

  /* The context's communicator for `group`, or NULL when it has none (no
   * job yet: listing, config check; a group the engine does not form).
   * Borrowed; valid while the instance that asked lives. */
  const struct dscore_communicator* (*communicator)(dscore_host_context* ctx,
                                                    dscore_comm_group group);

  /* The job's key-value store (bootstrap of comm backends: an NCCL unique
   * id, the address of an in-process exchange). kv_set publishes `size`
   * bytes under `key`; kv_get blocks up to timeout_ms for the key, copies at
   * most `capacity` bytes into `buffer` and stores the value's full size in
   * *size. DEADLINE_EXCEEDED on timeout; UNAVAILABLE when the job has no
   * store or a rank holding it went away. The store spans the whole job:
   * the ranks of one process (ranks as threads) share one in memory, and
   * ranks in separate processes one that rank 0 serves over TCP at
   * MASTER_ADDR:MASTER_PORT (hosts of ABI 1.2 on; 1.0 and 1.1 hosts span
   * one process only). Values are arbitrary bytes. */
  dscore_status (*kv_set)(dscore_host_context* ctx, const char* key, const void* value,
                          size_t size);
  dscore_status (*kv_get)(dscore_host_context* ctx, const char* key, void* buffer, size_t capacity,
                          size_t* size, int64_t timeout_ms);

  /* Profiling ranges (nest per thread) and a monotonic clock. */
  void (*range_push)(dscore_host_context* ctx, const char* name);
  void (*range_pop)(dscore_host_context* ctx);
  uint64_t (*now_ns)(void);
  /* ---- minor 0 ends here ---- */
} dscore_host_api;

/* ---------------------------------------------------- plugin descriptors */

typedef int32_t dscore_plugin_kind;
enum {
  DSCORE_KIND_OPTIMIZER = 1, /* optimizer.h */
  DSCORE_KIND_SCHEDULER = 2, /* scheduler.h */
  DSCORE_KIND_OFFLOAD = 3,   /* offload.h */
  DSCORE_KIND_COMM = 4,      /* comm.h */
  DSCORE_KIND_MONITOR = 5,   /* monitor.h */
  DSCORE_KIND_MODEL = 6      /* model.h */
};

/* Capability bits, shared by all kinds. The host reads: the device bits
 * (CPU/CUDA) and dtype bits of optimizers, models and comm backends to check
 * that the engine's tensors suit the plugin; MULTI_RANK of any kind. Schedulers
 * and monitors touch no tensors and may declare 0. DSCORE_DEVICE_CUDA_HOST
 * (pinned) memory is CPU-addressable: a CAP_CPU plugin must accept it. */
#define DSCORE_CAP_CPU ((uint64_t)1 << 0)         /* works on CPU tensors */
#define DSCORE_CAP_CUDA ((uint64_t)1 << 1)        /* works on CUDA tensors */
#define DSCORE_CAP_F32 ((uint64_t)1 << 8)         /* accepts fp32 tensors */
#define DSCORE_CAP_F16 ((uint64_t)1 << 9)         /* accepts fp16 tensors */
#define DSCORE_CAP_BF16 ((uint64_t)1 << 10)       /* accepts bf16 tensors */
#define DSCORE_CAP_MULTI_RANK ((uint64_t)1 << 16) /* runs in multi-rank jobs */

/* One plugin: what ds_config.json names. The vtable pointer points at the
 * kind's function table (dscore_optimizer_vtable, ...), which itself begins
 * with struct_size. Everything here is static data: the host reads it to
 * list and validate plugins without running any plugin code. */
typedef struct dscore_plugin_descriptor {
  uint32_t struct_size;
  dscore_plugin_kind kind;
  /* The name used in ds_config.json ("adam", "WarmupLR", "csv_monitor").
   * Matched case-insensitively; unique per kind across the search path. */
  const char* name;
  const char* version;     /* the plugin's own version, free text */
  const char* description; /* one line for `dscore plugins list` */
  uint64_t capabilities;   /* DSCORE_CAP_* */
  /* JSON text describing the `params` object this plugin accepts, or NULL to
   * accept any object unvalidated. An object mapping each parameter name to
   *   {"type": "bool"|"int"|"number"|"string"|"number_array"|"number_or_array"|"json",
   *    "default": <value>,          optional; absent = the parameter is optional
   *                                 and simply not passed when not given
   *    "required": true,            optional
   *    "min": n, "max": n,          optional bounds for int/number (inclusive)
   *    "enum": ["a", "b"],          optional allowed strings
   *    "length": n,                 optional exact length for arrays
   *    "auto": "<rule>",            optional: accepts "auto", resolved by the
   *                                 host rule named here (see docs/config-auto.md:
   *                                 "default", "train_steps", "optimizer_lr", ...)
   *    "error": "<message>",        optional: the parameter is rejected with
   *                                 this message whenever it is given
   *    "doc": "<one line>"}
   * Unknown parameters are rejected with a did-you-mean suggestion. */
  const char* params_schema;
  const void* vtable;
} dscore_plugin_descriptor;

/* The static table returned by the entry symbol. */
typedef struct dscore_plugin_library {
  uint32_t struct_size;
  uint32_t abi_major;      /* DSCORE_ABI_VERSION_MAJOR the library was built with */
  uint32_t abi_minor;      /* DSCORE_ABI_VERSION_MINOR the library was built with */
  uint32_t min_host_minor; /* oldest host minor this library works with (<= abi_minor) */
  const char* name;        /* library name, e.g. "dscore-adam" */
  const char* version;     /* library version, free text */
  const char* vendor;

  /* Optional (may be NULL). Called once after the library is chosen for use,
   * before any create(), with the host services table and the library's own
   * context (for logging and errors outside any instance), both borrowed
   * until shutdown returns. A non-OK return makes the library unusable and
   * its message (set_error on library_context) is shown to the user. */
  dscore_status (*init)(const dscore_host_api* host, dscore_host_context* library_context);
  /* Optional. Called once after the last instance is destroyed, before the
   * library is unloaded. Must not fail. */
  void (*shutdown)(void);

  size_t plugin_count;
  const dscore_plugin_descriptor* const* plugins; /* plugin_count entries */
} dscore_plugin_library;

/* The entry point: no arguments, no side effects, returns a pointer to a
 * static table that stays valid while the library is loaded. Listing plugins
 * calls only this. Define it with:
 *
 *   DSCORE_PLUGIN_EXPORT const dscore_plugin_library* dscore_plugin_library_v1(void) {
 *     return &my_library;
 *   }
 */
typedef const dscore_plugin_library* (*dscore_plugin_entry_v1)(void);

/* A byte sink the host passes to a plugin's save_* function. Call it any
 * number of times; the bytes are concatenated. Returns non-OK when the sink
 * failed (disk full): stop and return that status. */
typedef dscore_status (*dscore_write_fn)(void* ctx, const void* data, size_t size);

/* ------------------------------------------------------ create arguments */

/* What every kind's create() receives. All pointers are borrowed for the
 * duration of create(); copy what you keep. */
typedef struct dscore_create_args {
  uint32_t struct_size;
  /* The validated `params` object: one entry per given or defaulted key. */
  const dscore_named_value* const* params;
  size_t param_count;
  /* The same object as JSON text exactly as the user wrote it ("{}" if none). */
  const char* params_json;
  int32_t rank;       /* global rank of this process (0 when single) */
  int32_t world_size; /* number of ranks (1 when single) */
  int32_t local_rank; /* rank within this machine */
  uint64_t seed;      /* the job's seed */
  /* The context of the instance being created: pass it to every host
   * service the instance calls, for as long as it lives. */
  dscore_host_context* context;
  /* ---- minor 0 ends here ---- */

  /* ABI 1.2, PROVISIONAL: DSCORE_CREATE_* flags. Read it only when
   * struct_size covers it (an older host's arguments end before it). */
  uint32_t flags;
} dscore_create_args;

/* dscore_create_args.flags: the instance is made only to describe itself
 * (its parameters, state slots and declared memory, for `dscore plan`);
 * the host calls nothing on it that computes or steps. A plugin may skip
 * what only computing needs (a GPU, a CUDA context, a module of kernels),
 * so that a plan for a GPU run is made where no GPU is. A plugin that
 * ignores the flag is created as usual. */
#define DSCORE_CREATE_DESCRIBE_ONLY 0x1u

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DSCORE_PLUGIN_H_ */
