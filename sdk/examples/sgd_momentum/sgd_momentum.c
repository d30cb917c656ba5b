/* An out-of-tree dscore optimizer plugin in plain C11: SGD with momentum
 * (PyTorch torch.optim.SGD semantics, dampening 0). It shows everything a
 * vendor plugin needs and nothing more: the library table behind the one
 * exported entry symbol, a descriptor with a params schema, host-owned state
 * declared as a slot, errors reported through host->set_error, and an
 * optional feature (params_16bit) answered with DSCORE_UNIMPLEMENTED.
 *
 * Build it against an installed dscore: see ../README.md.
 */
#include <dscore/optimizer.h>
#include <dscore/plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The host services table, kept from init() until shutdown(). */
static const dscore_host_api* g_host = NULL;

static dscore_status sgd_init(const dscore_host_api* host, dscore_host_context* library_context) {
  (void)library_context;
  g_host = host;
  return DSCORE_OK;
}

/* Every error goes through the host, to the context of the instance it
 * concerns (each engine has its own), and the host shows it with the
 * plugin's name. */
static dscore_status fail(dscore_host_context* ctx, dscore_status code, const char* message) {
  if (g_host != NULL && g_host->set_error != NULL) return g_host->set_error(ctx, code, message);
  return code;
}

/* The host validates params against this schema and fills the defaults, so
 * create() sees every parameter; unknown keys never reach the plugin. */
static const char kParamsSchema[] =
    "{"
    "\"lr\": {\"type\": \"number\", \"default\": 0.01, \"min\": 0,"
    " \"doc\": \"learning rate (an LR scheduler overrides it per step)\"},"
    "\"momentum\": {\"type\": \"number\", \"default\": 0.9, \"min\": 0,"
    " \"doc\": \"momentum factor; 0 = plain SGD without state\"},"
    "\"nesterov\": {\"type\": \"bool\", \"default\": false,"
    " \"doc\": \"Nesterov momentum (needs momentum > 0)\"},"
    "\"weight_decay\": {\"type\": \"number\", \"default\": 0, \"min\": 0,"
    " \"doc\": \"L2 penalty added to the gradient\"}"
    "}";

typedef struct sgd_optimizer {
  dscore_host_context* ctx; /* from create(): the context of every host call */
  double momentum;
  double weight_decay;
  int nesterov;
} sgd_optimizer;

/* A number parameter by name (ints are numbers too); `fallback` only when a
 * host passes nothing (the dscore host always fills schema defaults). */
static double param_number(const dscore_create_args* args, const char* name, double fallback) {
  for (size_t i = 0; i < args->param_count; ++i) {
    const dscore_named_value* v = args->params[i];
    if (v == NULL || v->name == NULL || strcmp(v->name, name) != 0) continue;
    if (v->type == DSCORE_VALUE_DOUBLE) return v->d;
    if (v->type == DSCORE_VALUE_INT) return (double)v->i;
  }
  return fallback;
}

static int param_bool(const dscore_create_args* args, const char* name, int fallback) {
  for (size_t i = 0; i < args->param_count; ++i) {
    const dscore_named_value* v = args->params[i];
    if (v != NULL && v->name != NULL && strcmp(v->name, name) == 0 && v->type == DSCORE_VALUE_BOOL)
      return v->b != 0;
  }
  return fallback;
}

static dscore_status sgd_create(const dscore_create_args* args, dscore_optimizer** out) {
  double lr = param_number(args, "lr", 0.01);
  double momentum = param_number(args, "momentum", 0.9);
  double weight_decay = param_number(args, "weight_decay", 0.0);
  int nesterov = param_bool(args, "nesterov", 0);
  char message[160];
  if (!(lr >= 0.0)) {
    snprintf(message, sizeof message, "Invalid learning rate: %g (must be >= 0)", lr);
    return fail(args->context, DSCORE_INVALID_ARGUMENT, message);
  }
  if (!(momentum >= 0.0)) {
    snprintf(message, sizeof message, "Invalid momentum value: %g (must be >= 0)", momentum);
    return fail(args->context, DSCORE_INVALID_ARGUMENT, message);
  }
  if (!(weight_decay >= 0.0)) {
    snprintf(message, sizeof message, "Invalid weight_decay value: %g (must be >= 0)",
             weight_decay);
    return fail(args->context, DSCORE_INVALID_ARGUMENT, message);
  }
  if (nesterov && momentum <= 0.0)
    return fail(args->context, DSCORE_INVALID_ARGUMENT,
                "Nesterov momentum requires a momentum > 0");

  sgd_optimizer* self = (sgd_optimizer*)malloc(sizeof *self);
  if (self == NULL) return fail(args->context, DSCORE_RESOURCE_EXHAUSTED, "out of memory");
  self->ctx = args->context;
  self->momentum = momentum;
  self->weight_decay = weight_decay;
  self->nesterov = nesterov;
  *out = (dscore_optimizer*)self;
  return DSCORE_OK;
}

static void sgd_destroy(dscore_optimizer* self) { free(self); }

/* One fp32 momentum buffer per parameter element, starting at 0: with
 * dampening 0 the first update buf = 0 * momentum + g equals PyTorch's
 * buf = g.clone(). Declared only when momentum > 0. */
static const dscore_optimizer_state_slot kMomentumBuffer = {
    sizeof(dscore_optimizer_state_slot), "momentum_buffer", DSCORE_DTYPE_F32, 1, 0.0};
static const dscore_optimizer_state_slot* const kSlots[] = {&kMomentumBuffer};

static dscore_status sgd_state_slots(const dscore_optimizer* opaque,
                                     const dscore_optimizer_state_slot* const** slots,
                                     size_t* count) {
  const sgd_optimizer* self = (const sgd_optimizer*)opaque;
  *slots = kSlots;
  *count = self->momentum > 0.0 ? 1 : 0;
  return DSCORE_OK;
}

static float bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static float grad_at(const dscore_tensor* g, int64_t i) {
  if (g->dtype == DSCORE_DTYPE_BF16) return bf16_to_float(((const uint16_t*)g->data)[i]);
  return ((const float*)g->data)[i];
}

static int on_cpu(const dscore_tensor* t) {
  return t->device_type == DSCORE_DEVICE_CPU || t->device_type == DSCORE_DEVICE_CUDA_HOST;
}

static dscore_status sgd_step(dscore_optimizer* opaque, const dscore_optimizer_step_args* args) {
  const sgd_optimizer* self = (const sgd_optimizer*)opaque;
  const dscore_optimizer_hparams* h = args->hparams;
  char message[200];
  if (h == NULL) return fail(self->ctx, DSCORE_INVALID_ARGUMENT, "hparams is NULL");
  if (args->params_16bit != NULL)
    return fail(self->ctx, DSCORE_UNIMPLEMENTED,
                "sgd_momentum does not write 16-bit parameter copies");

  /* Read a field only if the host's struct has it (DSCORE_HAS_FIELD). */
  double momentum = self->momentum;
  if (DSCORE_HAS_FIELD(h, dscore_optimizer_hparams, override_mask) &&
      (h->override_mask & DSCORE_HPARAM_BETA1) && momentum > 0.0)
    momentum = h->beta1; /* a momentum-cycling scheduler (OneCycle) */
  double wd_multiplier = DSCORE_HAS_FIELD(h, dscore_optimizer_hparams, weight_decay_multiplier)
                             ? h->weight_decay_multiplier
                             : 1.0;
  double scale = DSCORE_HAS_FIELD(h, dscore_optimizer_hparams, grad_scale) ? h->grad_scale : 1.0;
  const float lr = (float)h->lr;
  const float mu = (float)momentum;
  const float wd = (float)(self->weight_decay * wd_multiplier);
  const float gs = (float)scale;
  const int use_momentum = self->momentum > 0.0;
  if (use_momentum && args->slot_count != 1)
    return fail(self->ctx, DSCORE_INVALID_ARGUMENT, "expected the momentum_buffer state slot");

  for (size_t t = 0; t < args->tensor_count; ++t) {
    dscore_tensor* p = args->params[t];
    const dscore_tensor* g = args->grads[t];
    dscore_tensor* buf = use_momentum ? args->states[t] : NULL;
    const char* name = p->name != NULL ? p->name : "?";
    if (!on_cpu(p) || !on_cpu(g) || (buf != NULL && !on_cpu(buf))) {
      snprintf(message, sizeof message,
               "tensor %zu ('%s') is not in CPU memory: sgd_momentum is CPU-only", t, name);
      return fail(self->ctx, DSCORE_INVALID_ARGUMENT, message);
    }
    if (p->dtype != DSCORE_DTYPE_F32 || (buf != NULL && buf->dtype != DSCORE_DTYPE_F32)) {
      snprintf(message, sizeof message, "tensor %zu ('%s'): parameters and state must be fp32", t,
               name);
      return fail(self->ctx, DSCORE_INVALID_ARGUMENT, message);
    }
    if (g->dtype == DSCORE_DTYPE_F16) {
      snprintf(
          message, sizeof message,
          "tensor %zu ('%s'): fp16 gradients are not supported by sgd_momentum (fp32 or bf16 only)",
          t, name);
      return fail(self->ctx, DSCORE_UNIMPLEMENTED, message);
    }
    if (g->dtype != DSCORE_DTYPE_F32 && g->dtype != DSCORE_DTYPE_BF16) {
      snprintf(message, sizeof message, "tensor %zu ('%s'): gradient dtype %d is not a float type",
               t, name, (int)g->dtype);
      return fail(self->ctx, DSCORE_INVALID_ARGUMENT, message);
    }
    if (g->numel != p->numel || (buf != NULL && buf->numel != p->numel)) {
      snprintf(message, sizeof message,
               "tensor %zu ('%s'): gradient/state size differs from the parameter's", t, name);
      return fail(self->ctx, DSCORE_INVALID_ARGUMENT, message);
    }

    float* pd = (float*)p->data;
    float* bd = buf != NULL ? (float*)buf->data : NULL;
    for (int64_t i = 0; i < p->numel; ++i) {
      float d = grad_at(g, i) * gs;
      if (wd != 0.0f) d += wd * pd[i];
      if (bd != NULL) {
        bd[i] = mu * bd[i] + d;
        d = self->nesterov ? d + mu * bd[i] : bd[i];
      }
      pd[i] -= lr * d;
    }
  }
  return DSCORE_OK;
}

/* Designated initializers: the functions an example does not offer stay
 * NULL, also when a later ABI minor appends fields to the table. */
static const dscore_optimizer_vtable kVtable = {.struct_size = sizeof(dscore_optimizer_vtable),
                                                .create = sgd_create,
                                                .destroy = sgd_destroy,
                                                .state_slots = sgd_state_slots,
                                                .step = sgd_step};

static const dscore_plugin_descriptor kSgdMomentum = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_OPTIMIZER,
    "sgd_momentum",
    "1.0.0",
    "SGD with momentum (PyTorch semantics), an example plugin written in C",
    DSCORE_CAP_CPU | DSCORE_CAP_F32 | DSCORE_CAP_BF16,
    kParamsSchema,
    &kVtable};

static const dscore_plugin_descriptor* const kPlugins[] = {&kSgdMomentum};

static const dscore_plugin_library kLibrary = {
    sizeof(dscore_plugin_library),
    DSCORE_ABI_VERSION_MAJOR,
    DSCORE_ABI_VERSION_MINOR,
    0, /* min_host_minor: uses nothing newer than minor 0 */
    "sgd-momentum-example",
    "1.0.0",
    "Example Vendor",
    sgd_init,
    NULL,
    1,
    kPlugins};

DSCORE_PLUGIN_EXPORT const dscore_plugin_library* dscore_plugin_library_v1(void) {
  return &kLibrary;
}
