/* An SGD optimizer plugin written in C against ONE frozen copy of the sdk
 * headers (sdk/abi/v1.N/include, chosen by CMake; ABI_PLUGIN_NAME names it
 * "abi_v1_N_sgd"). The current host must load it and run it: what a vendor
 * built against an older dscore release relies on. Uses only what ABI 1.0
 * had, so the same source builds against every frozen minor. */
#include <dscore/optimizer.h>

#ifndef ABI_PLUGIN_NAME
#error "ABI_PLUGIN_NAME must be defined"
#endif

static const dscore_host_api* g_host;

static dscore_status abi_init(const dscore_host_api* host, dscore_host_context* library_context) {
  (void)library_context;
  g_host = host;
  return DSCORE_OK;
}

struct dscore_optimizer {
  dscore_host_context* ctx; /* the instance's context, for every host call */
};

static dscore_status abi_create(const dscore_create_args* args, dscore_optimizer** out) {
  dscore_optimizer* self;
  self = (dscore_optimizer*)g_host->alloc(args->context, sizeof *self, 0, DSCORE_MEMORY_HOST,
                                          ABI_PLUGIN_NAME);
  if (self == NULL) return DSCORE_RESOURCE_EXHAUSTED;
  self->ctx = args->context;
  *out = self;
  return DSCORE_OK;
}

static void abi_destroy(dscore_optimizer* self) {
  g_host->free(self->ctx, self, DSCORE_MEMORY_HOST);
}

static dscore_status abi_state_slots(const dscore_optimizer* self,
                                     const dscore_optimizer_state_slot* const** slots,
                                     size_t* count) {
  (void)self;
  *slots = NULL;
  *count = 0;
  return DSCORE_OK;
}

static dscore_status abi_step(dscore_optimizer* self, const dscore_optimizer_step_args* args) {
  size_t i;
  int64_t j;
  for (i = 0; i < args->tensor_count; ++i) {
    float* p = (float*)args->params[i]->data;
    const float* g = (const float*)args->grads[i]->data;
    if (args->params[i]->dtype != DSCORE_DTYPE_F32)
      return g_host->set_error(self->ctx, DSCORE_INVALID_ARGUMENT, "fp32 only");
    for (j = 0; j < args->params[i]->numel; ++j)
      p[j] -= (float)(args->hparams->lr * args->hparams->grad_scale * g[j]);
  }
  return DSCORE_OK;
}

static const dscore_optimizer_vtable kVtable = {.struct_size = sizeof(dscore_optimizer_vtable),
                                                .create = abi_create,
                                                .destroy = abi_destroy,
                                                .state_slots = abi_state_slots,
                                                .step = abi_step};

static const dscore_plugin_descriptor kDescriptor = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_OPTIMIZER,
    ABI_PLUGIN_NAME,
    "1.0",
    "SGD built against a frozen copy of the sdk headers",
    DSCORE_CAP_CPU | DSCORE_CAP_F32,
    "{\"lr\": {\"type\": \"number\", \"default\": 0.1}}",
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
