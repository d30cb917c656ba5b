// A minimal SGD optimizer plugin, compiled many times with one FAULT_* macro
// each (see CMakeLists.txt) into fault-injecting libraries that exercise the
// host's validation and guarded calls: wrong ABI versions, a NULL required
// function, create() failing, throwing (with and without the sdk's guard),
// returning garbage or a NULL handle, a bad params schema, a failing init(),
// a segfault in step() (always, or in chosen `dscore autotune` trials). Without a FAULT_* macro it
// is a well-behaved plugin.
//
// To let tests observe what crossed the ABI, the plugin records, when the
// environment names a folder in DSCORE_FAKE_RECORD_DIR, files
// "<name>.init_count", "<name>.shutdown_count" and "<name>.create_args"
// (rank, world, seed, params_json and every typed param): library-level
// calls belong to no engine, so no host context outlives them to read.
#include <dscore/optimizer.h>
#include <dscore/cpp/plugin.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

#ifndef FAKE_NAME
#define FAKE_NAME "fake_sgd"
#endif
#ifndef FAKE_ABI_MAJOR
#define FAKE_ABI_MAJOR DSCORE_ABI_VERSION_MAJOR
#endif
#ifndef FAKE_ABI_MINOR
#define FAKE_ABI_MINOR DSCORE_ABI_VERSION_MINOR
#endif
#ifndef FAKE_MIN_HOST_MINOR
#define FAKE_MIN_HOST_MINOR 0
#endif

DSCORE_PLUGIN_HOST_STORAGE

namespace {

using dscore::sdk::host;

struct FakeSgd {
  dscore_host_context* ctx;
  double momentum;
};

int g_init_count = 0;

void record(const char* what, const std::string& value) {
  const char* dir = std::getenv("DSCORE_FAKE_RECORD_DIR");
  if (dir == nullptr) return;
  const std::string path = std::string(dir) + "/" + FAKE_NAME + "." + what;
  if (std::FILE* f = std::fopen(path.c_str(), "w")) {
    std::fwrite(value.data(), 1, value.size(), f);
    std::fclose(f);
  }
}
void publish_count(const char* what, int count) { record(what, std::to_string(count)); }

// "lr:DOUBLE:0.5" style summary of one typed param.
std::string describe(const dscore_named_value* v) {
  std::string out = std::string(v->name) + ":";
  switch (v->type) {
    case DSCORE_VALUE_NULL:
      return out + "NULL";
    case DSCORE_VALUE_BOOL:
      return out + "BOOL:" + (v->b ? "true" : "false");
    case DSCORE_VALUE_INT:
      return out + "INT:" + std::to_string(v->i);
    case DSCORE_VALUE_DOUBLE:
      return out + "DOUBLE:" + std::to_string(v->d);
    case DSCORE_VALUE_STRING:
      return out + "STRING:" + v->s;
    case DSCORE_VALUE_JSON:
      return out + "JSON:" + v->s;
    case DSCORE_VALUE_DOUBLE_ARRAY: {
      out += "DOUBLE_ARRAY:";
      for (size_t i = 0; i < v->count; ++i) out += (i ? "," : "") + std::to_string(v->doubles[i]);
      return out;
    }
    default:
      return out + "?";
  }
}

dscore_status fake_init(const dscore_host_api* api, dscore_host_context* library_context) {
  dscore::sdk::store_host(api, library_context);
  publish_count("init_count", ++g_init_count);
#if defined(FAULT_INIT_FAILS)
  return api->set_error(library_context, DSCORE_FAILED_PRECONDITION,
                        "license file /nonexistent/fake.lic not found");
#else
  return DSCORE_OK;
#endif
}

int g_shutdown_count = 0;
void fake_shutdown(void) { publish_count("shutdown_count", ++g_shutdown_count); }

[[maybe_unused]] dscore_status create_impl(const dscore_create_args* args, dscore_optimizer** out) {
  dscore::sdk::Params params(args);
  std::string summary =
      "rank=" + std::to_string(args->rank) + " world=" + std::to_string(args->world_size) +
      " local=" + std::to_string(args->local_rank) + " seed=" + std::to_string(args->seed) +
      " json=" + args->params_json + " params=";
  for (size_t i = 0; i < args->param_count; ++i)
    summary += (i ? ";" : "") + describe(args->params[i]);
  record("create_args", summary);

  void* memory = host()->alloc(args->context, sizeof(FakeSgd), 0, DSCORE_MEMORY_HOST, FAKE_NAME);
  if (memory == nullptr) return DSCORE_RESOURCE_EXHAUSTED;  // the host recorded why
  FakeSgd* self = new (memory) FakeSgd{args->context, params.number("momentum", 0.0)};
  *out = reinterpret_cast<dscore_optimizer*>(self);
  return DSCORE_OK;
}

}  // namespace

extern "C" {

static dscore_status fake_create(const dscore_create_args* args, dscore_optimizer** out) {
#if defined(FAULT_CREATE_INVALID)
  (void)out;
  (void)args;
  return host()->set_error(args->context, DSCORE_INVALID_ARGUMENT,
                           "fake rejects its params: 'lr' must be > 0");
#elif defined(FAULT_CREATE_THROWS_RAW)
  // Deliberately no catch: the exception unwinds into the host.
  (void)out;
  (void)args;
  throw std::runtime_error("raw boom from create");
#elif defined(FAULT_CREATE_THROWS_GUARDED)
  (void)out;
  (void)args;
  return dscore::sdk::guard(dscore::sdk::HostRef(args),
                            [&] { throw std::runtime_error("guarded boom from create"); });
#elif defined(FAULT_GARBAGE_STATUS)
  (void)out;
  (void)args;
  return 1234;
#elif defined(FAULT_NULL_HANDLE)
  (void)out;
  (void)args;
  return DSCORE_OK;
#else
  return dscore::sdk::guard(dscore::sdk::HostRef(args), [&] { return create_impl(args, out); });
#endif
}

static void fake_destroy(dscore_optimizer* self) {
  FakeSgd* sgd = reinterpret_cast<FakeSgd*>(self);
  dscore_host_context* ctx = sgd->ctx;
  sgd->~FakeSgd();
  host()->free(ctx, sgd, DSCORE_MEMORY_HOST);
}

static const dscore_optimizer_state_slot kMomentumSlot = {
    sizeof(dscore_optimizer_state_slot), "momentum_buffer", DSCORE_DTYPE_F32, 1, 0.0};
static const dscore_optimizer_state_slot* const kSlots[] = {&kMomentumSlot};

static dscore_status fake_state_slots(const dscore_optimizer* self,
                                      const dscore_optimizer_state_slot* const** slots,
                                      size_t* count) {
  const FakeSgd* sgd = reinterpret_cast<const FakeSgd*>(self);
  *slots = kSlots;
  *count = sgd->momentum > 0 ? 1 : 0;
  return DSCORE_OK;
}

[[maybe_unused]] static dscore_status fake_step(dscore_optimizer* self,
                                                const dscore_optimizer_step_args* args) {
#if defined(FAULT_SEGV_IN_TRIAL)
  // A crash in some of `dscore autotune`'s trials only: those whose name
  // (DSCORE_AUTOTUNE_TRIAL) contains DSCORE_FAKE_SEGV_TRIAL.
  const char* trial = std::getenv("DSCORE_AUTOTUNE_TRIAL");
  const char* pattern = std::getenv("DSCORE_FAKE_SEGV_TRIAL");
  if (trial != nullptr && pattern != nullptr && *pattern != '\0' &&
      std::string(trial).find(pattern) != std::string::npos) {
    int* volatile target = reinterpret_cast<int*>(static_cast<uintptr_t>(64));
    *target = 42;
  }
#endif
#if defined(FAULT_SEGV_IN_STEP)
  (void)self;
  (void)args;
  // An address in the never-mapped first page, not NULL itself: the store
  // really faults (no UBSan null report first), and volatile keeps the
  // compiler from proving anything about it and emitting a trap instead.
  int* volatile target = reinterpret_cast<int*>(static_cast<uintptr_t>(64));
  *target = 42;
  return DSCORE_OK;
#else
  const FakeSgd* sgd = reinterpret_cast<const FakeSgd*>(self);
  const double lr = args->hparams->lr;
  const double scale = args->hparams->grad_scale;
  for (size_t i = 0; i < args->tensor_count; ++i) {
    dscore_tensor* p = args->params[i];
    const dscore_tensor* g = args->grads[i];
    if (p->dtype != DSCORE_DTYPE_F32 || g->dtype != DSCORE_DTYPE_F32)
      return host()->set_error(sgd->ctx, DSCORE_INVALID_ARGUMENT,
                               FAKE_NAME " handles fp32 tensors only");
    float* pd = static_cast<float*>(p->data);
    const float* gd = static_cast<const float*>(g->data);
    float* buf = sgd->momentum > 0 ? static_cast<float*>(args->states[i]->data) : nullptr;
    for (int64_t j = 0; j < p->numel; ++j) {
      double grad = gd[j] * scale;
      if (buf != nullptr) {
        buf[j] = static_cast<float>(sgd->momentum * buf[j] + grad);
        grad = buf[j];
      }
      pd[j] = static_cast<float>(pd[j] - lr * grad);
    }
  }
  return DSCORE_OK;
#endif
}

}  // extern "C"

namespace {

dscore_optimizer_vtable make_vtable() {
  dscore_optimizer_vtable vt{};
  vt.struct_size = sizeof vt;
  vt.create = fake_create;
  vt.destroy = fake_destroy;
  vt.state_slots = fake_state_slots;
#if defined(FAULT_NULL_STEP)
  vt.step = nullptr;
#else
  vt.step = fake_step;
#endif
  return vt;
}
const dscore_optimizer_vtable kVtable = make_vtable();

#if defined(FAULT_BAD_SCHEMA)
const char kSchema[] = R"({"lr": {"type": "number", "default": 0.01)";  // unterminated
#else
const char kSchema[] = R"({
  "lr": {"type": "number", "default": 0.01, "min": 0, "auto": "optimizer_lr", "doc": "learning rate"},
  "momentum": {"type": "number", "default": 0, "min": 0, "max": 1},
  "nesterov": {"type": "bool", "default": false},
  "betas": {"type": "number_array", "length": 2, "default": [0.9, 0.999]},
  "steps": {"type": "int"},
  "mode": {"type": "string", "enum": ["fast", "exact"], "default": "exact"},
  "per_group": {"type": "number_or_array"},
  "extra": {"type": "json"},
  "legacy": {"type": "bool", "error": "'legacy' was removed in 2.0; drop it"}
})";
#endif

const dscore_plugin_descriptor kDescriptor = {
    sizeof(dscore_plugin_descriptor),
    DSCORE_KIND_OPTIMIZER,
    FAKE_NAME,
    "1.2.3",
    "fault-injecting test optimizer (plain SGD when well-behaved)",
    DSCORE_CAP_CPU | DSCORE_CAP_F32,
    kSchema,
    &kVtable,
};

#if defined(FAKE_EXTRA_FUTURE_KIND)
// A plugin of a kind this host does not know (as a newer minor might add).
const int kFutureVtable[4] = {sizeof(kFutureVtable), 0, 0, 0};
const dscore_plugin_descriptor kFutureDescriptor = {sizeof(dscore_plugin_descriptor),
                                                    99,
                                                    "from_the_future",
                                                    "1.0",
                                                    "a kind from ABI 1.1",
                                                    0,
                                                    nullptr,
                                                    kFutureVtable};
const dscore_plugin_descriptor* const kPlugins[] = {&kFutureDescriptor, &kDescriptor};
#else
const dscore_plugin_descriptor* const kPlugins[] = {&kDescriptor};
#endif

const dscore_plugin_library kLibrary = {
    sizeof(dscore_plugin_library),
    FAKE_ABI_MAJOR,
    FAKE_ABI_MINOR,
    FAKE_MIN_HOST_MINOR,
    "lib-" FAKE_NAME,
    "0.0.1",
    "dscore tests",
    fake_init,
    fake_shutdown,
    sizeof(kPlugins) / sizeof(kPlugins[0]),
    kPlugins,
};

}  // namespace

extern "C" DSCORE_PLUGIN_EXPORT const dscore_plugin_library* dscore_plugin_library_v1(void) {
  return &kLibrary;
}
