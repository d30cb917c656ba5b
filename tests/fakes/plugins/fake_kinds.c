/* A plain-C test library holding one plugin of several kinds: scheduler
 * 'fake_const' (lr = base_lr * (t + 2), so t = -1 gives the base lr),
 * monitor 'fake_counter' (no flush, no write_config: both optional) and
 * model 'fake_linear' (one layer, two parameters, no forward and no
 * synthetic task: both optional), comm 'fake_loopback' (a single-rank
 * backend without all_to_all and abort) and offload 'fake_ram_swapper'
 * (one 64 KiB in-memory "file", completes I/O at submit; no
 * register_buffers). With FAULT_MODEL_DUP_PARAMS it holds only
 * model 'fake_bad_model', whose description names a parameter twice; with
 * FAULT_MODEL_BAD_SPLIT only model 'fake_bad_split', whose tensor-parallel
 * parts overlap (the engine's tiling check refuses it).
 * Written in C on purpose: a C plugin must work as well as a C++ one.
 * Each kind has one static instance (the tests create one at a time); it
 * keeps the context create() was given for its host calls. */
#include <dscore/comm.h>
#include <dscore/model.h>
#include <dscore/monitor.h>
#include <dscore/offload.h>
#include <dscore/scheduler.h>

#include <stdio.h>
#include <string.h>

static const dscore_host_api* g_host;

static dscore_status lib_init(const dscore_host_api* host, dscore_host_context* library_context) {
  (void)library_context;
  g_host = host;
  return DSCORE_OK;
}

/* ------------------------------------------------------------ scheduler */

#if !defined(FAULT_MODEL_DUP_PARAMS) && !defined(FAULT_MODEL_BAD_SPLIT)

struct dscore_scheduler {
  dscore_host_context* ctx;
  double base_lrs[8];
  size_t groups;
};
static struct dscore_scheduler g_scheduler;

static dscore_status sched_create(const dscore_create_args* args,
                                  const dscore_scheduler_context* context, dscore_scheduler** out) {
  if (context->group_count > 8)
    return g_host->set_error(args->context, DSCORE_INVALID_ARGUMENT, "at most 8 groups");
  g_scheduler.ctx = args->context;
  g_scheduler.groups = context->group_count;
  memcpy(g_scheduler.base_lrs, context->base_lrs, context->group_count * sizeof(double));
  *out = &g_scheduler;
  return DSCORE_OK;
}
static void sched_destroy(dscore_scheduler* self) { (void)self; }
static dscore_status sched_point_at(const dscore_scheduler* self, int64_t t, size_t group,
                                    dscore_schedule_point* out) {
  if (group >= self->groups)
    return g_host->set_error(self->ctx, DSCORE_OUT_OF_RANGE, "no such group");
  out->set_mask = DSCORE_HPARAM_LR;
  out->lr = self->base_lrs[group] * (double)(t + 2);
  return DSCORE_OK;
}
static const dscore_scheduler_vtable kSchedulerVtable = {
    sizeof(dscore_scheduler_vtable), sched_create, sched_destroy, sched_point_at, NULL, NULL, NULL};
static const dscore_plugin_descriptor kScheduler = {sizeof(dscore_plugin_descriptor),
                                                    DSCORE_KIND_SCHEDULER,
                                                    "fake_const",
                                                    "1.0",
                                                    "lr = base * (t + 2)",
                                                    0,
                                                    "{}",
                                                    &kSchedulerVtable};

/* -------------------------------------------------------------- monitor */

struct dscore_monitor {
  dscore_host_context* ctx;
  int events;
};
static struct dscore_monitor g_monitor;

static dscore_status mon_create(const dscore_create_args* args, dscore_monitor** out) {
  g_monitor.ctx = args->context;
  g_monitor.events = 0;
  *out = &g_monitor;
  return DSCORE_OK;
}
static void mon_destroy(dscore_monitor* self) { (void)self; }
static dscore_status mon_write(dscore_monitor* self, const dscore_scalar_event* const* events,
                               size_t count) {
  char text[256];
  size_t i;
  for (i = 0; i < count; ++i) {
    if (events[i]->struct_size < sizeof(dscore_scalar_event))
      return g_host->set_error(self->ctx, DSCORE_INVALID_ARGUMENT, "event struct_size too small");
  }
  self->events += (int)count;
  snprintf(text, sizeof text, "%d %s=%g@%lld", self->events, count ? events[count - 1]->tag : "",
           count ? events[count - 1]->value : 0.0,
           count ? (long long)events[count - 1]->step : 0LL);
  return g_host->kv_set(self->ctx, "fake_counter.events", text, strlen(text));
}
static const dscore_monitor_vtable kMonitorVtable = {
    sizeof(dscore_monitor_vtable), mon_create, mon_destroy, mon_write, NULL, NULL};
static const dscore_plugin_descriptor kMonitor = {sizeof(dscore_plugin_descriptor),
                                                  DSCORE_KIND_MONITOR,
                                                  "fake_counter",
                                                  "1.0",
                                                  "counts scalar events",
                                                  0,
                                                  NULL,
                                                  &kMonitorVtable};

/* ----------------------------------------------------------------- comm */

struct dscore_comm {
  dscore_host_context* ctx;
  int32_t rank;
};
static struct dscore_comm g_comm;

static size_t tensor_bytes(const dscore_tensor* t) {
  return (size_t)t->numel * (t->dtype == DSCORE_DTYPE_F64   ? 8
                             : t->dtype == DSCORE_DTYPE_F32 ? 4
                                                            : 2);
}
static dscore_status comm_create(const dscore_create_args* args, dscore_comm** out) {
  if (args->world_size != 1)
    return g_host->set_error(args->context, DSCORE_INVALID_ARGUMENT,
                             "fake_loopback runs one rank only");
  g_comm.ctx = args->context;
  g_comm.rank = args->rank;
  *out = &g_comm;
  return DSCORE_OK;
}
static void comm_destroy(dscore_comm* self) { (void)self; }
static dscore_status comm_copy(dscore_comm* self, const dscore_tensor* send, dscore_tensor* recv) {
  if (send->numel != recv->numel)
    return g_host->set_error(self->ctx, DSCORE_INVALID_ARGUMENT, "numel differs");
  if (send->data != recv->data) memcpy(recv->data, send->data, tensor_bytes(send));
  return DSCORE_OK;
}
static dscore_status comm_allreduce(dscore_comm* self, const dscore_tensor* send,
                                    dscore_tensor* recv, dscore_reduce_op op, void* stream) {
  (void)op, (void)stream;
  return comm_copy(self, send, recv);
}
static dscore_status comm_allgather(dscore_comm* self, const dscore_tensor* send,
                                    dscore_tensor* recv, void* stream) {
  (void)stream;
  return comm_copy(self, send, recv);
}
static dscore_status comm_broadcast(dscore_comm* self, dscore_tensor* tensor, int32_t root,
                                    void* stream) {
  (void)tensor, (void)stream;
  return root == 0 ? DSCORE_OK
                   : g_host->set_error(self->ctx, DSCORE_OUT_OF_RANGE, "root must be 0");
}
static dscore_status comm_p2p(dscore_comm* self, const dscore_tensor* tensor, int32_t peer,
                              void* stream) {
  (void)tensor, (void)peer, (void)stream;
  return g_host->set_error(self->ctx, DSCORE_FAILED_PRECONDITION, "no peers in a one-rank job");
}
static dscore_status comm_recv(dscore_comm* self, dscore_tensor* tensor, int32_t peer,
                               void* stream) {
  return comm_p2p(self, tensor, peer, stream);
}
static dscore_status comm_barrier(dscore_comm* self) {
  (void)self;
  return DSCORE_OK;
}
static dscore_status comm_reduce(dscore_comm* self, const dscore_tensor* send, dscore_tensor* recv,
                                 dscore_reduce_op op, int32_t root, void* stream) {
  (void)op, (void)stream;
  if (root != 0) return g_host->set_error(self->ctx, DSCORE_OUT_OF_RANGE, "root must be 0");
  return comm_copy(self, send, recv);
}
static const dscore_comm_vtable kCommVtable = {.struct_size = sizeof(dscore_comm_vtable),
                                               .create = comm_create,
                                               .destroy = comm_destroy,
                                               .allreduce = comm_allreduce,
                                               .reduce_scatter = comm_allreduce,
                                               .allgather = comm_allgather,
                                               .broadcast = comm_broadcast,
                                               .send = comm_p2p,
                                               .recv = comm_recv,
                                               .barrier = comm_barrier,
                                               .reduce = comm_reduce};
static const dscore_plugin_descriptor kComm = {sizeof(dscore_plugin_descriptor),
                                               DSCORE_KIND_COMM,
                                               "fake_loopback",
                                               "1.0",
                                               "single-rank loopback",
                                               DSCORE_CAP_CPU,
                                               NULL,
                                               &kCommVtable};

/* -------------------------------------------------------------- offload */

struct dscore_offload {
  dscore_host_context* ctx;
  unsigned char file[65536];
  int open;
  dscore_io_completion done[16];
  size_t done_count;
};
static struct dscore_offload g_offload;

static dscore_status off_create(const dscore_create_args* args, dscore_offload** out) {
  memset(&g_offload, 0, sizeof g_offload);
  g_offload.ctx = args->context;
  *out = &g_offload;
  return DSCORE_OK;
}
static void off_destroy(dscore_offload* self) { (void)self; }
static size_t off_alignment(const dscore_offload* self) {
  (void)self;
  return 4096;
}
static dscore_status off_open(dscore_offload* self, const char* path, uint32_t flags,
                              int64_t* file) {
  (void)path, (void)flags;
  self->open = 1;
  *file = 7;
  return DSCORE_OK;
}
static dscore_status off_close(dscore_offload* self, int64_t file) {
  if (file != 7) return g_host->set_error(self->ctx, DSCORE_NOT_FOUND, "no such file handle");
  self->open = 0;
  return DSCORE_OK;
}
static dscore_status off_sync(dscore_offload* self, int64_t file) {
  return file == 7 ? DSCORE_OK
                   : g_host->set_error(self->ctx, DSCORE_NOT_FOUND, "no such file handle");
}
static dscore_status off_submit(dscore_offload* self, const dscore_io_request* const* requests,
                                size_t count) {
  size_t i;
  for (i = 0; i < count; ++i) {
    const dscore_io_request* r = requests[i];
    dscore_io_completion* c;
    if (self->done_count == 16)
      return g_host->set_error(self->ctx, DSCORE_RESOURCE_EXHAUSTED, "queue full");
    c = &self->done[self->done_count++];
    c->user_data = r->user_data;
    c->bytes = 0;
    c->status = DSCORE_OK;
    if (r->offset + r->bytes > sizeof self->file) {
      c->status = DSCORE_OUT_OF_RANGE;
    } else if (r->op == DSCORE_IO_WRITE) {
      memcpy(self->file + r->offset, r->buffer, r->bytes);
      c->bytes = r->bytes;
    } else {
      memcpy(r->buffer, self->file + r->offset, r->bytes);
      c->bytes = r->bytes;
    }
  }
  return DSCORE_OK;
}
static dscore_status off_wait(dscore_offload* self, size_t min_count, int64_t timeout_ms,
                              dscore_io_completion* const* out, size_t capacity, size_t* count) {
  size_t i, n = self->done_count < capacity ? self->done_count : capacity;
  (void)timeout_ms;
  for (i = 0; i < n; ++i) {
    out[i]->user_data = self->done[i].user_data;
    out[i]->status = self->done[i].status;
    out[i]->bytes = self->done[i].bytes;
  }
  memmove(self->done, self->done + n, (self->done_count - n) * sizeof self->done[0]);
  self->done_count -= n;
  *count = n;
  return n >= min_count ? DSCORE_OK
                        : g_host->set_error(self->ctx, DSCORE_DEADLINE_EXCEEDED,
                                            "fewer completions than asked");
}
static const char* off_backend(const dscore_offload* self) {
  (void)self;
  return "ram";
}
static const dscore_offload_vtable kOffloadVtable = {sizeof(dscore_offload_vtable),
                                                     off_create,
                                                     off_destroy,
                                                     off_alignment,
                                                     off_open,
                                                     off_close,
                                                     off_sync,
                                                     off_submit,
                                                     off_wait,
                                                     NULL,
                                                     off_backend};
static const dscore_plugin_descriptor kOffload = {sizeof(dscore_plugin_descriptor),
                                                  DSCORE_KIND_OFFLOAD,
                                                  "fake_ram_swapper",
                                                  "1.0",
                                                  "one in-memory file",
                                                  DSCORE_CAP_CPU,
                                                  NULL,
                                                  &kOffloadVtable};

#endif /* !FAULT_MODEL_DUP_PARAMS && !FAULT_MODEL_BAD_SPLIT */

/* ---------------------------------------------------------------- model */

static const int64_t kWeightShape[] = {3, 2};
#if !defined(FAULT_MODEL_BAD_SPLIT)
static const int64_t kBiasShape[] = {2};
#endif
static const dscore_model_param kWeight = {
    sizeof(dscore_model_param), "fc.weight", 2, kWeightShape, 6, 0, 0, 0, 0, 0};
#if defined(FAULT_MODEL_DUP_PARAMS)
static const dscore_model_param kBias = {
    sizeof(dscore_model_param),   "fc.weight", 1, kBiasShape, 2,
    DSCORE_PARAM_NO_WEIGHT_DECAY, 0,           0, 0,          0};
#define MODEL_NAME "fake_bad_model"
#elif defined(FAULT_MODEL_BAD_SPLIT)
/* Every tensor-parallel rank claims rows 0-2 of a 6-row bias: the parts
 * overlap and leave rows 3-5 to nobody. */
static const int64_t kPartShape[] = {3};
static const dscore_model_param kBias = {sizeof(dscore_model_param),
                                         "fc.bias",
                                         1,
                                         kPartShape,
                                         3,
                                         DSCORE_PARAM_NO_WEIGHT_DECAY | DSCORE_PARAM_TP_SPLIT,
                                         0,
                                         1,
                                         6,
                                         0};
#define MODEL_NAME "fake_bad_split"
#define MODEL_SCHEMA                                                                      \
  "{\"tensor_parallel_size\": {\"type\": \"int\", \"default\": 1, \"doc\": \"set by the " \
  "engine\"},"                                                                            \
  " \"tensor_parallel_rank\": {\"type\": \"int\", \"default\": 0, \"doc\": \"set by the " \
  "engine\"}}"
#else
static const dscore_model_param kBias = {sizeof(dscore_model_param),   "fc.bias", 1, kBiasShape, 2,
                                         DSCORE_PARAM_NO_WEIGHT_DECAY, 0,         0, 0,          0};
#define MODEL_NAME "fake_linear"
#endif
static const dscore_model_param* const kParams[] = {&kWeight, &kBias};
static const dscore_model_layer kLayer = {sizeof(dscore_model_layer), "fc", 2, kParams};
static const dscore_model_layer* const kLayers[] = {&kLayer};
static const int64_t kXShape[] = {3};
static const int64_t kYShape[] = {2};
static const dscore_model_input kX = {sizeof(dscore_model_input), "x", DSCORE_DTYPE_F32, 1,
                                      kXShape};
static const dscore_model_input kY = {sizeof(dscore_model_input), "y", DSCORE_DTYPE_F32, 1,
                                      kYShape};
static const dscore_model_input* const kInputs[] = {&kX, &kY};
static const dscore_model_description kDescription = {
    sizeof(dscore_model_description), 1, kLayers, 2, kInputs, 2, 0, NULL};

struct dscore_model {
  int unused;
};
static struct dscore_model g_model;

static dscore_status model_create(const dscore_create_args* args, dscore_model** out) {
  (void)args;
  *out = &g_model;
  return DSCORE_OK;
}
static void model_destroy(dscore_model* self) { (void)self; }
static dscore_status model_describe(const dscore_model* self,
                                    const dscore_model_description** out) {
  (void)self;
  *out = &kDescription;
  return DSCORE_OK;
}
static dscore_status model_init_param(const dscore_model* self, size_t param_index, int64_t offset,
                                      int64_t count, dscore_tensor* out) {
  int64_t i;
  (void)self;
  for (i = 0; i < count; ++i)
    ((float*)out->data)[i] = (float)param_index + 0.01f * (float)(offset + i);
  return DSCORE_OK;
}
/* loss = sum of all parameters; d(loss_scale * loss)/dp = loss_scale. */
static dscore_status model_forward_backward(dscore_model* self, const dscore_batch* batch,
                                            const dscore_model_hooks* hooks, double loss_scale,
                                            double* loss) {
  dscore_layer_views views;
  dscore_status st;
  size_t p;
  int64_t j;
  double sum = 0;
  (void)self;
  (void)batch;
  memset(&views, 0, sizeof views);
  views.struct_size = sizeof views;
  st = hooks->acquire(hooks->ctx, 0, DSCORE_ACQUIRE_FORWARD, &views);
  if (st != DSCORE_OK) return st;
  for (p = 0; p < views.count; ++p)
    for (j = 0; j < views.params[p]->numel; ++j) sum += ((const float*)views.params[p]->data)[j];
  st = hooks->release(hooks->ctx, 0);
  if (st != DSCORE_OK) return st;
  *loss = sum;
  st = hooks->acquire(hooks->ctx, 0, DSCORE_ACQUIRE_BACKWARD, &views);
  if (st != DSCORE_OK) return st;
  for (p = 0; p < views.count; ++p)
    for (j = 0; j < views.grads[p]->numel; ++j)
      ((float*)views.grads[p]->data)[j] += (float)loss_scale;
  st = hooks->grads_ready(hooks->ctx, 0);
  if (st != DSCORE_OK) {
    hooks->release(hooks->ctx, 0);
    return st;
  }
  return hooks->release(hooks->ctx, 0);
}
static const dscore_model_vtable kModelVtable = {.struct_size = sizeof(dscore_model_vtable),
                                                 .create = model_create,
                                                 .destroy = model_destroy,
                                                 .describe = model_describe,
                                                 .init_param = model_init_param,
                                                 .forward_backward = model_forward_backward};
static const dscore_plugin_descriptor kModel = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_MODEL,
    MODEL_NAME,
    "1.0",
    "a linear layer whose loss is the sum of its parameters",
    DSCORE_CAP_CPU | DSCORE_CAP_F32,
#if defined(MODEL_SCHEMA)
    MODEL_SCHEMA,
#else
    NULL,
#endif
    &kModelVtable};

/* -------------------------------------------------------------- library */

#if defined(FAULT_MODEL_DUP_PARAMS)
static const dscore_plugin_descriptor* const kPlugins[] = {&kModel};
#define LIBRARY_NAME "lib-fake_bad_model"
#elif defined(FAULT_MODEL_BAD_SPLIT)
static const dscore_plugin_descriptor* const kPlugins[] = {&kModel};
#define LIBRARY_NAME "lib-fake_bad_split"
#else
static const dscore_plugin_descriptor* const kPlugins[] = {&kScheduler, &kMonitor, &kModel, &kComm,
                                                           &kOffload};
#define LIBRARY_NAME "lib-fake_kinds"
#endif

static const dscore_plugin_library kLibrary = {sizeof(dscore_plugin_library),
                                               DSCORE_ABI_VERSION_MAJOR,
                                               DSCORE_ABI_VERSION_MINOR,
                                               0,
                                               LIBRARY_NAME,
                                               "0.0.1",
                                               "dscore tests",
                                               lib_init,
                                               NULL,
                                               sizeof(kPlugins) / sizeof(kPlugins[0]),
                                               kPlugins};

DSCORE_PLUGIN_EXPORT const dscore_plugin_library* dscore_plugin_library_v1(void) {
  return &kLibrary;
}
