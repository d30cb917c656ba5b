/* A single-rank comm backend written in C against ONE frozen copy of the
 * sdk headers (sdk/abi/v1.N/include, chosen by CMake; ABI_PLUGIN_NAME names
 * it "abi_comm_v1_N"). Its vtable ends before the entries later minors
 * added (group_start/group_end in 1.2), so the current host must read it by
 * its struct_size and fall back where it has no entry: grouped calls are
 * then issued one by one (tests/core/comm/communicator_grouped_test.cc). */
#include <dscore/comm.h>
#include <string.h>

#ifndef ABI_PLUGIN_NAME
#error "ABI_PLUGIN_NAME must be defined"
#endif

static const dscore_host_api* g_host;

static dscore_status abi_init(const dscore_host_api* host, dscore_host_context* library_context) {
  (void)library_context;
  g_host = host;
  return DSCORE_OK;
}

struct dscore_comm {
  dscore_host_context* ctx;
};
static struct dscore_comm g_comm;

static size_t element_bytes(dscore_dtype dtype) {
  switch (dtype) {
    case DSCORE_DTYPE_F64:
    case DSCORE_DTYPE_I64:
    case DSCORE_DTYPE_U64:
      return 8;
    case DSCORE_DTYPE_F32:
    case DSCORE_DTYPE_I32:
    case DSCORE_DTYPE_U32:
      return 4;
    case DSCORE_DTYPE_F16:
    case DSCORE_DTYPE_BF16:
    case DSCORE_DTYPE_I16:
    case DSCORE_DTYPE_U16:
      return 2;
    default:
      return 1;
  }
}

static dscore_status abi_create(const dscore_create_args* args, dscore_comm** out) {
  if (args->world_size != 1)
    return g_host->set_error(args->context, DSCORE_INVALID_ARGUMENT,
                             ABI_PLUGIN_NAME " runs one rank only");
  g_comm.ctx = args->context;
  *out = &g_comm;
  return DSCORE_OK;
}
static void abi_destroy(dscore_comm* self) { (void)self; }

/* With one rank every collective copies send to recv; sizes must agree. */
static dscore_status copy(dscore_comm* self, const char* op, const dscore_tensor* send,
                          dscore_tensor* recv) {
  if (send->numel != recv->numel || send->dtype != recv->dtype)
    return g_host->set_error(self->ctx, DSCORE_INVALID_ARGUMENT,
                             op[0] == 'r' ? "reduce_scatter: send must hold world_size x recv "
                                            "elements"
                                          : "send and recv differ in numel or dtype");
  if (send->data != recv->data)
    memmove(recv->data, send->data, (size_t)send->numel * element_bytes(send->dtype));
  return DSCORE_OK;
}
static dscore_status abi_allreduce(dscore_comm* self, const dscore_tensor* send,
                                   dscore_tensor* recv, dscore_reduce_op op, void* stream) {
  (void)op, (void)stream;
  return copy(self, "allreduce", send, recv);
}
static dscore_status abi_reduce_scatter(dscore_comm* self, const dscore_tensor* send,
                                        dscore_tensor* recv, dscore_reduce_op op, void* stream) {
  (void)op, (void)stream;
  return copy(self, "reduce_scatter", send, recv);
}
static dscore_status abi_allgather(dscore_comm* self, const dscore_tensor* send,
                                   dscore_tensor* recv, void* stream) {
  (void)stream;
  return copy(self, "allgather", send, recv);
}
static dscore_status abi_broadcast(dscore_comm* self, dscore_tensor* tensor, int32_t root,
                                   void* stream) {
  (void)tensor, (void)stream;
  if (root != 0) return g_host->set_error(self->ctx, DSCORE_OUT_OF_RANGE, "root must be 0");
  return DSCORE_OK;
}
static dscore_status abi_send(dscore_comm* self, const dscore_tensor* tensor, int32_t peer,
                              void* stream) {
  (void)tensor, (void)peer, (void)stream;
  return g_host->set_error(self->ctx, DSCORE_OUT_OF_RANGE, "one rank: no peer");
}
static dscore_status abi_recv(dscore_comm* self, dscore_tensor* tensor, int32_t peer,
                              void* stream) {
  return abi_send(self, tensor, peer, stream);
}
static dscore_status abi_barrier(dscore_comm* self) {
  (void)self;
  return DSCORE_OK;
}
static dscore_status abi_reduce(dscore_comm* self, const dscore_tensor* send, dscore_tensor* recv,
                                dscore_reduce_op op, int32_t root, void* stream) {
  (void)op, (void)stream;
  if (root != 0) return g_host->set_error(self->ctx, DSCORE_OUT_OF_RANGE, "root must be 0");
  return copy(self, "reduce", send, recv);
}

static const dscore_comm_vtable kVtable = {.struct_size = sizeof(dscore_comm_vtable),
                                           .create = abi_create,
                                           .destroy = abi_destroy,
                                           .allreduce = abi_allreduce,
                                           .reduce_scatter = abi_reduce_scatter,
                                           .allgather = abi_allgather,
                                           .broadcast = abi_broadcast,
                                           .send = abi_send,
                                           .recv = abi_recv,
                                           .barrier = abi_barrier,
                                           .reduce = abi_reduce};

static const dscore_plugin_descriptor kDescriptor = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_COMM,
    ABI_PLUGIN_NAME,
    "1.0",
    "single-rank comm backend built against a frozen copy of the sdk headers",
    DSCORE_CAP_CPU | DSCORE_CAP_F32,
    "{\"timeout_ms\": {\"type\": \"int\", \"default\": 1000}}",
    &kVtable};
static const dscore_plugin_descriptor* const kPlugins[] = {&kDescriptor};
static const dscore_plugin_library kLibrary = {sizeof(dscore_plugin_library),
                                               DSCORE_ABI_VERSION_MAJOR,
                                               DSCORE_ABI_VERSION_MINOR,
                                               0,
                                               "lib-" ABI_PLUGIN_NAME,
                                               "1.0",
                                               "dscore tests",
                                               abi_init,
                                               NULL,
                                               1,
                                               kPlugins};

DSCORE_PLUGIN_EXPORT const dscore_plugin_library* dscore_plugin_library_v1(void) {
  return &kLibrary;
}
