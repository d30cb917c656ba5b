// Plugin instances (core/plugin_host/instances.cc, model_instance.cc):
// creation through the guarded call path, with every fault a plugin can
// commit at create() turned into a Status naming the plugin; library
// lifetime (init once, shutdown once, code mapped while an instance lives);
// and the optional functions answering OK or UNIMPLEMENTED.
#include "core/plugin_host/instances.h"

#include <gtest/gtest.h>
#include <link.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/base/memory.h"
#include "core/plugin_host/host_api.h"
#include "core/plugin_host/library.h"
#include "tests/core/plugin_host/test_plugins.h"

namespace dscore::plugin_host {
namespace {

using testing::open_test_registry;
using testing::test_plugin_file;

// Where the fake plugins record what crossed the ABI (fake_optimizer.cc):
// set before any plugin is loaded, removed when the process exits.
const std::string& record_dir() {
  struct RecordDir {
    RecordDir()
        : path((std::filesystem::temp_directory_path() /
                ("dscore_fake_records_" + std::to_string(::getpid())))
                   .string()) {
      std::filesystem::create_directories(path);
      ::setenv("DSCORE_FAKE_RECORD_DIR", path.c_str(), 1);
    }
    ~RecordDir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
    std::string path;
  };
  static const RecordDir dir;
  return dir.path;
}
const std::string& kRecordDir = record_dir();

std::string kv(const std::string& key) {
  std::ifstream in(kRecordDir + "/" + key);
  if (!in) return "<absent>";
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void kv_put(const std::string& key, const std::string& value) {
  std::ofstream(kRecordDir + "/" + key) << value;
}
// A value the instance published in its context's key-value store.
std::string context_kv(HostContext& host, const std::string& key) {
  auto value = host.kv().get(key, 0);
  return value.ok() ? *value : "<absent>";
}

ValidatedParams params_of(const PluginInfo& info, const std::string& text) {
  auto parsed = json::parse(text, "test");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  std::vector<config::ConfigError> errors;
  std::vector<config::ConfigNotice> notices;
  ValidatedParams p =
      validate_params(info, *parsed, "optimizer.params", config::AutoResolver(), &errors, &notices);
  for (const auto& e : errors) ADD_FAILURE() << e.path << ": " << e.message;
  return p;
}
ValidatedParams no_params() {
  return ValidatedParams::from_object(json::Value::object(), json::Value::object());
}

// Whether the dynamic loader has `path` mapped right now.
bool is_mapped(const std::string& path) {
  struct Search {
    const std::string* path;
    bool found;
  } search{&path, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name != nullptr && *s->path == info->dlpi_name) s->found = true;
        return 0;
      },
      &search);
  return search.found;
}

struct Fp32 {
  explicit Fp32(std::vector<float> v)
      : values(std::move(v)), shape{static_cast<int64_t>(values.size())} {
    tensor = dscore_tensor{sizeof(dscore_tensor),
                           values.data(),
                           DSCORE_DTYPE_F32,
                           DSCORE_DEVICE_CPU,
                           0,
                           1,
                           shape,
                           nullptr,
                           shape[0],
                           nullptr};
  }
  std::vector<float> values;
  int64_t shape[1];
  dscore_tensor tensor;
};

Status sgd_step(OptimizerInstance& opt, Fp32& param, Fp32& grad, double lr, Fp32* state = nullptr) {
  dscore_tensor* params[] = {&param.tensor};
  const dscore_tensor* grads[] = {&grad.tensor};
  dscore_tensor* states[] = {state != nullptr ? &state->tensor : nullptr};
  dscore_optimizer_hparams hp{sizeof hp, lr, 0, 0.9, 0.999, 1.0, 1, 1.0, 0};
  dscore_optimizer_step_args args{
      sizeof args, &hp,    1, params, grads, state ? 1u : 0u, state ? states : nullptr,
      nullptr,     nullptr};
  return opt.step(args);
}

// ----------------------------------------------------------------- optimizer

TEST(PluginInstances, OptimizerCreatesWithValidatedParamsAndSteps) {
  auto registry = open_test_registry({"fake_sgd"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_OPTIMIZER, "fake_sgd").value();

  auto plain = OptimizerInstance::create(info, params_of(info, "{}"), InstanceContext{});
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_TRUE((*plain)->slots().empty());  // no momentum: no state
  Fp32 p({1, 2}), g({1, -1});
  ASSERT_TRUE(sgd_step(**plain, p, g, 0.5).ok());
  EXPECT_EQ(p.values, (std::vector<float>{0.5f, 2.5f}));

  // momentum > 0 makes the plugin declare one host-owned state slot.
  auto with_momentum =
      OptimizerInstance::create(info, params_of(info, R"({"momentum": 0.5})"), InstanceContext{});
  ASSERT_TRUE(with_momentum.ok()) << with_momentum.status().message();
  ASSERT_EQ((*with_momentum)->slots().size(), 1u);
  const OptimizerInstance::Slot& slot = (*with_momentum)->slots()[0];
  EXPECT_EQ(slot.name, "momentum_buffer");
  EXPECT_EQ(slot.dtype, DSCORE_DTYPE_F32);
  EXPECT_EQ(slot.elements_per_param, 1u);
  EXPECT_EQ(slot.initial_value, 0.0);
  Fp32 q({1}), h({2}), buf({1});
  ASSERT_TRUE(sgd_step(**with_momentum, q, h, 0.1, &buf).ok());
  EXPECT_FLOAT_EQ(buf.values[0], 0.5f * 1 + 2);  // state lives in the host's buffer
  EXPECT_FLOAT_EQ(q.values[0], 1 - 0.1f * 2.5f);
}

TEST(PluginInstances, CreateArgumentsReachThePluginIntact) {
  auto registry = open_test_registry({"fake_sgd"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_OPTIMIZER, "fake_sgd").value();
  InstanceContext context;
  context.rank = 3;
  context.world_size = 8;
  context.local_rank = 1;
  context.seed = 1234;
  auto opt = OptimizerInstance::create(info, params_of(info, R"({"momentum": 0.25, "steps": 7})"),
                                       context);
  ASSERT_TRUE(opt.ok()) << opt.status().message();
  EXPECT_EQ(kv("fake_sgd.create_args"),
            "rank=3 world=8 local=1 seed=1234 json={\"momentum\":0.25,\"steps\":7} "
            "params=lr:DOUBLE:0.010000;momentum:DOUBLE:0.250000;nesterov:BOOL:false;"
            "betas:DOUBLE_ARRAY:0.900000,0.999000;steps:INT:7;mode:STRING:exact");
}

TEST(PluginInstances, PluginErrorFromStepNamesThePluginAndFunction) {
  auto registry = open_test_registry({"fake_sgd"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_OPTIMIZER, "fake_sgd").value();
  auto opt = OptimizerInstance::create(info, no_params(), InstanceContext{});
  ASSERT_TRUE(opt.ok()) << opt.status().message();
  Fp32 p({1}), g({1});
  p.tensor.dtype = DSCORE_DTYPE_F64;
  Status st = sgd_step(**opt, p, g, 0.1);
  EXPECT_EQ(st.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_EQ(st.message(), info.display() + " step: fake_sgd handles fp32 tensors only");
}

// One faulty plugin's create(): the Status it must turn into.
Status create_fault(const std::string& name) {
  auto registry = open_test_registry({name});
  if (!registry) return internal_error("no registry");
  auto info = registry->find(DSCORE_KIND_OPTIMIZER, name);
  EXPECT_TRUE(info.ok()) << info.status().message();
  if (!info.ok()) return info.status();
  auto opt = OptimizerInstance::create(**info, no_params(), InstanceContext{});
  EXPECT_FALSE(opt.ok());
  return opt.ok() ? Status::Ok() : opt.status();
}

TEST(PluginInstances, CreateReturningAnErrorCarriesThePluginsMessage) {
  Status st = create_fault("fake_create_invalid");
  EXPECT_EQ(st.code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_EQ(st.message(), "optimizer 'fake_create_invalid' (" +
                              test_plugin_file("fake_create_invalid") +
                              ") create: fake rejects its params: 'lr' must be > 0");
}

TEST(PluginInstances, RawCppExceptionEscapingCreateIsCaughtAtTheBoundary) {
  Status st = create_fault("fake_throws_raw");
  EXPECT_EQ(st.code(), DSCORE_INTERNAL);
  EXPECT_EQ(st.message(),
            "optimizer 'fake_throws_raw' (" + test_plugin_file("fake_throws_raw") +
                ") threw a C++ exception out of create across the C ABI; its exported "
                "functions must catch everything (use dscore::sdk::guard from "
                "dscore/cpp/plugin.hpp); the exception said: raw boom from create");
}

TEST(PluginInstances, ExceptionInsideTheSdkGuardBecomesAStatusWithItsMessage) {
  Status st = create_fault("fake_throws_guarded");
  EXPECT_EQ(st.code(), DSCORE_INTERNAL);
  EXPECT_EQ(st.message(), "optimizer 'fake_throws_guarded' (" +
                              test_plugin_file("fake_throws_guarded") +
                              ") create: guarded boom from create");
}

TEST(PluginInstances, StatusOutsideTheEnumIsInternal) {
  Status st = create_fault("fake_garbage_status");
  EXPECT_EQ(st.code(), DSCORE_INTERNAL);
  EXPECT_EQ(st.message(), "optimizer 'fake_garbage_status' (" +
                              test_plugin_file("fake_garbage_status") +
                              ") create returned an invalid status 1234 (not a dscore_status code; "
                              "a bug in the plugin)");
}

TEST(PluginInstances, OkWithANullHandleIsInternal) {
  Status st = create_fault("fake_null_handle");
  EXPECT_EQ(st.code(), DSCORE_INTERNAL);
  EXPECT_EQ(st.message(), "optimizer 'fake_null_handle' (" + test_plugin_file("fake_null_handle") +
                              ") create returned OK but no instance (the handle is NULL); a bug in "
                              "the plugin");
}

TEST(PluginInstances, FailingInitMakesTheLibraryUnusableAndRunsOnce) {
  kv_put("fake_init_fails.init_count", "0");
  auto registry = open_test_registry({"fake_init_fails"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_OPTIMIZER, "fake_init_fails").value();
  const std::string expected = "library 'lib-fake_init_fails' (" +
                               test_plugin_file("fake_init_fails") +
                               ") init: license file /nonexistent/fake.lic not found; the library "
                               "cannot be used (its init() failed; fix what the message says or "
                               "remove the library from the plugin path)";
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto opt = OptimizerInstance::create(info, no_params(), InstanceContext{});
    ASSERT_FALSE(opt.ok());
    EXPECT_EQ(opt.status().code(), DSCORE_FAILED_PRECONDITION);
    EXPECT_EQ(opt.status().message(), expected);
  }
  EXPECT_EQ(kv("fake_init_fails.init_count"), "1");
}

TEST(PluginInstances, WrongKindIsRejectedBeforeAnyPluginCode) {
  auto registry = open_test_registry({"fake_kinds"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_SCHEDULER, "fake_const").value();
  auto opt = OptimizerInstance::create(info, no_params(), InstanceContext{});
  ASSERT_FALSE(opt.ok());
  EXPECT_EQ(opt.status().code(), DSCORE_INVALID_ARGUMENT);
  EXPECT_EQ(opt.status().message(),
            info.display() + " is a scheduler plugin, not a optimizer plugin");
  EXPECT_FALSE(info.library->initialized());
}

// ------------------------------------------------------------------ lifetime

TEST(PluginInstances, InitOnceBeforeFirstCreateShutdownOnceWhenTheLastReferenceGoes) {
  kv_put("fake_sgd.init_count", "0");
  kv_put("fake_sgd.shutdown_count", "0");
  const std::string path = test_plugin_file("fake_sgd");
  {
    auto registry = open_test_registry({"fake_sgd"});
    ASSERT_TRUE(registry);
    const PluginInfo& info = *registry->find(DSCORE_KIND_OPTIMIZER, "fake_sgd").value();
    EXPECT_EQ(kv("fake_sgd.init_count"), "0");  // listing does not init
    auto a = OptimizerInstance::create(info, no_params(), InstanceContext{});
    auto b = OptimizerInstance::create(info, no_params(), InstanceContext{});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(kv("fake_sgd.init_count"), "1");
    EXPECT_EQ(kv("fake_sgd.shutdown_count"), "0");
  }
  EXPECT_EQ(kv("fake_sgd.shutdown_count"), "1");
  EXPECT_FALSE(library_is_open(path));
}

TEST(PluginInstances, AnInstanceKeepsItsLibraryLoadedAfterTheRegistryIsGone) {
  const std::string path = test_plugin_file("fake_sgd");
  std::unique_ptr<OptimizerInstance> opt;
  {
    auto registry = open_test_registry({"fake_sgd"});
    ASSERT_TRUE(registry);
    auto created = OptimizerInstance::create(
        *registry->find(DSCORE_KIND_OPTIMIZER, "fake_sgd").value(), no_params(), InstanceContext{});
    ASSERT_TRUE(created.ok()) << created.status().message();
    opt = std::move(created).value();
  }
  EXPECT_TRUE(library_is_open(path));
  EXPECT_TRUE(is_mapped(path));
  Fp32 p({1}), g({1});
  ASSERT_TRUE(sgd_step(*opt, p, g, 0.25).ok());  // the code is still there
  EXPECT_FLOAT_EQ(p.values[0], 0.75f);
  kv_put("fake_sgd.shutdown_count", "0");
  opt.reset();
  EXPECT_EQ(kv("fake_sgd.shutdown_count"), "1");
  EXPECT_FALSE(library_is_open(path));
}

TEST(PluginInstances, PluginMemoryComesFromTheCountedHostAllocator) {
  auto registry = open_test_registry({"fake_sgd"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_OPTIMIZER, "fake_sgd").value();
  InstanceContext context;
  context.host = std::make_shared<HostContext>();
  auto opt = OptimizerInstance::create(info, no_params(), context);
  ASSERT_TRUE(opt.ok());
  // FakeSgd: its context pointer and its momentum, in the instance's ledger.
  EXPECT_EQ(context.host->memory().by_tag()["fake_sgd"], sizeof(void*) + sizeof(double));
  EXPECT_EQ(memory_by_tag().count("fake_sgd"), 0u);  // not the process ledger
  opt->reset();
  EXPECT_EQ(context.host->memory().by_tag()["fake_sgd"], 0u);
}

// ------------------------------------------------------- scheduler, monitor

TEST(PluginInstances, SchedulerPointsAndOptionalFunctions) {
  auto registry = open_test_registry({"fake_kinds"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_SCHEDULER, "fake_const").value();
  auto sched = SchedulerInstance::create(info, no_params(), InstanceContext{}, {0.1, 0.2}, 100);
  ASSERT_TRUE(sched.ok()) << sched.status().message();
  EXPECT_EQ((*sched)->first_iteration(), -1);  // NULL first_iteration means -1
  auto p0 = (*sched)->point_at(-1, 0);
  ASSERT_TRUE(p0.ok());
  EXPECT_DOUBLE_EQ(p0->lr, 0.1);
  auto p1 = (*sched)->point_at(3, 1);
  ASSERT_TRUE(p1.ok());
  EXPECT_DOUBLE_EQ(p1->lr, 1.0);
  auto bad = (*sched)->point_at(0, 5);
  EXPECT_EQ(bad.status().code(), DSCORE_OUT_OF_RANGE);
  EXPECT_EQ(bad.status().message(), info.display() + " point_at: no such group");

  EXPECT_FALSE((*sched)->has_extra_state());
  auto saved = (*sched)->save_extra_state();
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(*saved, "");
  EXPECT_TRUE((*sched)->load_extra_state("").ok());
  EXPECT_EQ((*sched)->load_extra_state("xyz").code(), DSCORE_FAILED_PRECONDITION);

  auto none = SchedulerInstance::create(info, no_params(), InstanceContext{}, {}, 100);
  EXPECT_EQ(none.status().code(), DSCORE_INVALID_ARGUMENT);
}

TEST(PluginInstances, MonitorWritesAndTreatsMissingOptionalFunctionsAsOk) {
  auto registry = open_test_registry({"fake_kinds"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_MONITOR, "fake_counter").value();
  InstanceContext context;
  context.host = std::make_shared<HostContext>();
  auto monitor = MonitorInstance::create(info, no_params(), context);
  ASSERT_TRUE(monitor.ok()) << monitor.status().message();
  dscore_scalar_event loss{0, "Train/Samples/train_loss", 2.5, 64, 0};
  dscore_scalar_event lr{0, "Train/Samples/lr", 0.001, 64, 0};  // struct_size filled by the host
  ASSERT_TRUE((*monitor)->write_scalars({loss, lr}).ok());
  EXPECT_EQ(context_kv(*context.host, "fake_counter.events"), "2 Train/Samples/lr=0.001@64");
  EXPECT_TRUE((*monitor)->flush().ok());
  EXPECT_TRUE((*monitor)->write_config("{}").ok());
}

// --------------------------------------------------------------------- model

struct LayerBuffers {
  Fp32 weight{std::vector<float>(6, 1.0f)};
  Fp32 bias{std::vector<float>(2, 0.5f)};
  Fp32 weight_grad{std::vector<float>(6, 0.0f)};
  Fp32 bias_grad{std::vector<float>(2, 0.0f)};
  const dscore_tensor* params[2] = {&weight.tensor, &bias.tensor};
  dscore_tensor* grads[2] = {&weight_grad.tensor, &bias_grad.tensor};
  std::string calls;
};

dscore_model_hooks hooks_for(LayerBuffers* buffers) {
  dscore_model_hooks hooks{};
  hooks.struct_size = sizeof hooks;
  hooks.ctx = buffers;
  hooks.acquire = [](void* ctx, size_t layer, dscore_acquire_mode mode,
                     dscore_layer_views* out) -> dscore_status {
    auto* b = static_cast<LayerBuffers*>(ctx);
    b->calls += (mode == DSCORE_ACQUIRE_FORWARD ? "F" : "B") + std::to_string(layer);
    out->count = 2;
    out->params = b->params;
    out->grads = mode == DSCORE_ACQUIRE_BACKWARD ? b->grads : nullptr;
    return DSCORE_OK;
  };
  hooks.release = [](void* ctx, size_t layer) -> dscore_status {
    static_cast<LayerBuffers*>(ctx)->calls += "R" + std::to_string(layer);
    return DSCORE_OK;
  };
  hooks.grads_ready = [](void* ctx, size_t layer) -> dscore_status {
    static_cast<LayerBuffers*>(ctx)->calls += "G" + std::to_string(layer);
    return DSCORE_OK;
  };
  return hooks;
}

TEST(PluginInstances, ModelDescribesRunsThroughHooksAndAnswersUnimplemented) {
  auto registry = open_test_registry({"fake_kinds"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_MODEL, "fake_linear").value();
  auto model = ModelInstance::create(info, no_params(), InstanceContext{});
  ASSERT_TRUE(model.ok()) << model.status().message();
  const dscore_model_description& d = (*model)->description();
  ASSERT_EQ(d.layer_count, 1u);
  EXPECT_STREQ(d.layers[0]->params[1]->name, "fc.bias");
  EXPECT_EQ(d.hidden_size, 2);

  Fp32 out(std::vector<float>(3, 0.0f));
  ASSERT_TRUE((*model)->init_param(1, 4, 3, &out.tensor).ok());
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(out.values[i], 1.0f + 0.01f * (4 + i));

  LayerBuffers buffers;
  dscore_model_hooks hooks = hooks_for(&buffers);
  dscore_batch batch{sizeof(dscore_batch), 1, 0, nullptr};
  double loss = 0;
  ASSERT_TRUE((*model)->forward_backward(batch, hooks, 4.0, &loss).ok());
  EXPECT_DOUBLE_EQ(loss, 6 * 1.0 + 2 * 0.5);
  EXPECT_EQ(buffers.calls, "F0R0B0G0R0");
  EXPECT_FLOAT_EQ(buffers.bias_grad.values[1], 4.0f);

  Status fwd = (*model)->forward(batch, hooks, &loss, nullptr);
  EXPECT_EQ(fwd.code(), DSCORE_UNIMPLEMENTED);
  EXPECT_NE(fwd.message().find(info.display() + " has no forward-only pass"), std::string::npos);
  EXPECT_FALSE((*model)->has_synthetic_task());
  EXPECT_EQ((*model)->synthetic_batch(1, 0, batch).code(), DSCORE_UNIMPLEMENTED);
}

TEST(PluginInstances, ModelWithADuplicateParameterNameIsRejectedNamingLayerAndParam) {
  auto registry = open_test_registry({"fake_bad_model"});
  ASSERT_TRUE(registry);
  const PluginInfo& info = *registry->find(DSCORE_KIND_MODEL, "fake_bad_model").value();
  auto model = ModelInstance::create(info, no_params(), InstanceContext{});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), DSCORE_INTERNAL);
  EXPECT_EQ(model.status().message(),
            info.display() +
                " describe: layer 0 ('fc') param 'fc.weight': the parameter name "
                "'fc.weight' is used twice (names must be unique in the model: they "
                "key checkpoints) (a bug in the model plugin)");
}

}  // namespace
}  // namespace dscore::plugin_host
