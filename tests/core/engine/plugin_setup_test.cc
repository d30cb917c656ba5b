// Tests for core/engine/plugin_setup.cc: every config field that names a
// plugin (model.type, optimizer.type, scheduler.type, plugins.monitors[i].type,
// the DeepSpeed monitor sections, comm.backend) is looked up among the plugins
// actually found on the search path when the config is prepared, i.e. by
// `dscore config check`, and a name that is not there is one config error
// with its JSON path, line:column and a did-you-mean from the plugins found.
#include "core/engine/plugin_setup.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/engine/initialize.h"

namespace dscore {
namespace {

// `lines` are top-level members after "plugins" (line 2, the build's plugin
// folder) and "train_batch_size" (line 3): member k sits on line k + 4.
config::LoadedConfig prepared(const std::vector<std::string>& lines) {
  std::string text = "{\n  \"plugins\": {\"paths\": [\"" + std::string(DSCORE_BUILD_PLUGIN_DIR) +
                     "\"]},\n  \"train_batch_size\": 8";
  for (const std::string& line : lines) text += ",\n  " + line;
  text += "\n}\n";
  InitializeOptions options;
  options.trust_config_plugin_paths = true;  // the build's plugin folder
  options.job = comm::JobEnv{};
  auto setup = prepare_text(text, "t.json", ".", options);
  EXPECT_TRUE(setup.ok()) << setup.status().message();
  return setup.ok() ? setup->loaded : config::LoadedConfig{};
}

// The one error of `loaded` (a failure when there is not exactly one).
config::ConfigError only_error(const config::LoadedConfig& loaded) {
  EXPECT_EQ(loaded.errors.size(), 1u) << format_config_errors(loaded);
  return loaded.errors.empty() ? config::ConfigError{} : loaded.errors.front();
}

bool has_mpi_plugin() {
  return std::filesystem::exists(std::string(DSCORE_BUILD_PLUGIN_DIR) + "/libdscore_comm_mpi.so");
}

// Whether this build's gpt plugin computes on CUDA (its module is built, and
// it declares the cuda capability).
bool gpt_has_cuda() {
  return std::filesystem::exists(std::string(DSCORE_BUILD_PLUGIN_DIR) +
                                 "/cuda/libdscore_gpt_cuda.so");
}

// The message of `loaded`'s error at `path`, or "" without one.
std::string error_at(const config::LoadedConfig& loaded, const std::string& path) {
  for (const config::ConfigError& e : loaded.errors)
    if (e.path == path) return e.message;
  return "";
}

TEST(PluginNames, UnknownCommBackendNamesThePathTheValueAndTheClosestPlugin) {
  config::LoadedConfig loaded = prepared({R"("comm": {"backend": "locall"})"});
  config::ConfigError e = only_error(loaded);
  EXPECT_EQ(e.path, "comm.backend");
  EXPECT_EQ(e.location.line, 4);
  EXPECT_EQ(e.location.column, 23);  // the value "locall"
  EXPECT_EQ(
      e.message.rfind("no comm plugin named 'locall'; did you mean \"local\"?; available: ", 0), 0u)
      << e.message;
  EXPECT_NE(e.message.find(DSCORE_BUILD_PLUGIN_DIR), std::string::npos) << e.message;
  EXPECT_EQ(config::format_error(e, loaded.source_name)
                .rfind("t.json:4:23: comm.backend: no comm plugin", 0),
            0u);
}

TEST(PluginNames, MpiiSuggestsMpi) {
  if (!has_mpi_plugin()) GTEST_SKIP() << "this build has no mpi comm plugin";
  config::ConfigError e = only_error(prepared({R"("comm": {"backend": "mpii"})"}));
  EXPECT_EQ(e.path, "comm.backend");
  EXPECT_EQ(e.location.line, 4);
  EXPECT_EQ(e.location.column, 23);
  // nccl is listed where this build has it (CUDA and NCCL found).
  const bool nccl =
      std::filesystem::exists(std::string(DSCORE_BUILD_PLUGIN_DIR) + "/libdscore_comm_nccl.so");
  EXPECT_EQ(e.message.rfind(std::string("no comm plugin named 'mpii'; did you mean \"mpi\"?; "
                                        "available: local, loopback, mpi") +
                                (nccl ? ", nccl" : "") + ". ",
                            0),
            0u)
      << e.message;
}

TEST(PluginNames, AutoAndEveryFoundBackendAreAccepted) {
  std::vector<std::string> backends = {"auto", "local", "Local"};
  if (has_mpi_plugin()) backends.push_back("mpi");
  for (const std::string& backend : backends) {
    config::LoadedConfig loaded = prepared({"\"comm\": {\"backend\": \"" + backend + "\"}"});
    EXPECT_TRUE(loaded.ok()) << backend << ": " << format_config_errors(loaded);
  }
}

TEST(PluginNames, EveryPluginSectionTypeIsCheckedWithASuggestion) {
  config::LoadedConfig loaded = prepared({
      R"("model": {"type": "mlpp"})",
      R"("optimizer": {"type": "adma"})",
      R"("scheduler": {"type": "WarmupLRR"})",
  });
  ASSERT_EQ(loaded.errors.size(), 3u) << format_config_errors(loaded);
  struct Expected {
    std::string path;
    int line;
    int column;  // where the section's object starts
    std::string message_start;
  };
  const std::vector<Expected> expected = {
      {"model.type", 4, 12, "no model plugin named 'mlpp'; did you mean \"mlp\"?"},
      {"optimizer.type", 5, 16, "no optimizer plugin named 'adma'; did you mean \"adam\"?"},
      {"scheduler.type", 6, 16,
       "no scheduler plugin named 'WarmupLRR'; did you mean \"WarmupLR\"?"},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    const config::ConfigError& e = loaded.errors[i];
    EXPECT_EQ(e.path, expected[i].path);
    EXPECT_EQ(e.location.line, expected[i].line) << e.path;
    EXPECT_EQ(e.location.column, expected[i].column) << e.path;
    EXPECT_EQ(e.message.rfind(expected[i].message_start, 0), 0u) << e.message;
  }
}

TEST(PluginNames, ExtraMonitorTypeNamesItsListEntry) {
  // The list entry starts on line 3, column 18.
  InitializeOptions options;
  options.trust_config_plugin_paths = true;  // the build's plugin folder
  options.job = comm::JobEnv{};
  const std::string text =
      "{\n  \"plugins\": {\"paths\": [\"" + std::string(DSCORE_BUILD_PLUGIN_DIR) +
      "\"],\n    \"monitors\": [{\"type\": \"csv_monitr\"}]},\n  \"train_batch_size\": 8\n}\n";
  auto setup = prepare_text(text, "t.json", ".", options);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  config::ConfigError e = only_error(setup->loaded);
  EXPECT_EQ(e.path, "plugins.monitors[0].type");
  EXPECT_EQ(e.location.line, 3);
  EXPECT_EQ(e.location.column, 18);  // the entry's object
  EXPECT_EQ(
      e.message.rfind("no monitor plugin named 'csv_monitr'; did you mean \"csv_monitor\"?", 0), 0u)
      << e.message;
}

// The gpt model's "cuda_dtype" as the model receives it, and the notices.
struct ModelDtype {
  std::string cuda_dtype;
  std::string notices;
};

ModelDtype model_dtype(const std::vector<std::string>& lines) {
  InitializeOptions options;
  options.trust_config_plugin_paths = true;  // the build's plugin folder
  options.job = comm::JobEnv{};
  std::string text = "{\"plugins\": {\"paths\": [\"" + std::string(DSCORE_BUILD_PLUGIN_DIR) +
                     "\"]}, \"train_batch_size\": 8";
  for (const std::string& line : lines) text += ", " + line;
  auto setup = prepare_text(text + "}", "t.json", ".", options);
  EXPECT_TRUE(setup.ok()) << setup.status().message();
  if (!setup.ok() || !setup->selection.model) return {};
  ModelDtype out;
  const json::Value* dtype = setup->selection.model->params.values().find("cuda_dtype");
  if (dtype != nullptr) out.cuda_dtype = dtype->as_string();
  for (const config::ConfigNotice& n : setup->loaded.notices)
    out.notices += n.path + ": " + n.message + "\n";
  return out;
}

// DeepSpeed computes in the type the model was cast to: fp32 unless a
// reduced-precision section is on. The model's CUDA compute type follows
// the run unless the model section names one.
TEST(ModelComputeType, FollowsTheRunsPrecisionUnlessTheModelSetsIt) {
  const std::string cuda_gpt = R"("model": {"type": "gpt", "device": "cuda")";
  ModelDtype fp32 = model_dtype({cuda_gpt + "}"});
  EXPECT_EQ(fp32.cuda_dtype, "fp32");
  EXPECT_NE(fp32.notices.find("model.cuda_dtype: fp32, the run's precision (no fp16 or bf16 "
                              "section); set model.cuda_dtype to choose"),
            std::string::npos)
      << fp32.notices;
  ModelDtype bf16 = model_dtype({cuda_gpt + "}", R"("bf16": {"enabled": true})"});
  EXPECT_EQ(bf16.cuda_dtype, "bf16");
  EXPECT_NE(bf16.notices.find("model.cuda_dtype: bf16, the run's precision (bf16.enabled)"),
            std::string::npos)
      << bf16.notices;
  // Named in the model section: kept, without a notice.
  ModelDtype named = model_dtype({cuda_gpt + R"(, "cuda_dtype": "bf16"})"});
  EXPECT_EQ(named.cuda_dtype, "bf16");
  EXPECT_EQ(named.notices.find("cuda_dtype"), std::string::npos) << named.notices;
  // fp16: the model's default (its CUDA kernels have no fp16).
  EXPECT_EQ(model_dtype({cuda_gpt + "}", R"("fp16": {"enabled": true})"}).cuda_dtype, "bf16");
  // A CPU model gets the type too, and no notice.
  ModelDtype cpu = model_dtype({R"("model": {"type": "gpt"})"});
  EXPECT_EQ(cpu.cuda_dtype, "fp32");
  EXPECT_EQ(cpu.notices.find("cuda_dtype"), std::string::npos) << cpu.notices;
}

// On "device": "cuda" the model computes on the GPU: the run's device
// fills the model section's, and a CPU model there is an error.
TEST(ModelDevice, FollowsTheRunsCudaDevice) {
  InitializeOptions options;
  options.trust_config_plugin_paths = true;  // the build's plugin folder
  options.job = comm::JobEnv{};
  const std::string head = "{\"plugins\": {\"paths\": [\"" + std::string(DSCORE_BUILD_PLUGIN_DIR) +
                           "\"]}, \"train_batch_size\": 8, \"device\": \"cuda\", ";
  auto filled = prepare_text(head + R"("model": {"type": "gpt"}})", "t.json", ".", options);
  ASSERT_TRUE(filled.ok()) << filled.status().message();
  if (gpt_has_cuda()) {
    ASSERT_TRUE(filled->loaded.ok()) << format_config_errors(filled->loaded);
  }
  ASSERT_TRUE(filled->selection.model);
  const json::Value* device = filled->selection.model->params.values().find("device");
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->as_string(), "cuda");
  std::string notices;
  for (const config::ConfigNotice& n : filled->loaded.notices) notices += n.path + ": " + n.message;
  EXPECT_NE(notices.find("model.device: cuda, the run's \"device\""), std::string::npos) << notices;

  auto cpu =
      prepare_text(head + R"("model": {"type": "gpt", "device": "cpu"}})", "t.json", ".", options);
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  const std::string e = error_at(cpu->loaded, "model.device");
  EXPECT_NE(e.find("remove model.device"), std::string::npos) << format_config_errors(cpu->loaded);
}

// On "device": "cuda" a model or optimizer plugin that does not declare the
// cuda capability is a config error naming it and the fixes (it would fail
// at the first step on the GPU's views or tensors), unless the optimizer's
// state is offloaded, when it steps host tensors.
TEST(CudaCapabilities, APluginThatCannotRunOnCudaIsAConfigError) {
  const std::string cuda = R"("device": "cuda")";
  const std::string mlp =
      R"("model": {"type": "mlp", "input_dim": 8, "hidden_dim": 16, "output_dim": 2, )"
      R"("n_hidden_layers": 1})";
  const std::string gpt = R"("model": {"type": "gpt"})";
  const config::LoadedConfig on_cuda = prepared({cuda, mlp});
  const std::string model = error_at(on_cuda, "model.type");
  for (const char* part : {"model 'mlp' computes on the CPU only", "set \"device\": \"cpu\""})
    EXPECT_NE(model.find(part), std::string::npos) << part << "\n" << format_config_errors(on_cuda);
  EXPECT_EQ(error_at(prepared({mlp}), "model.type"), "") << "on the CPU it is fine";

  const std::string sgd = R"("optimizer": {"type": "SGD", "params": {"lr": 0.1}})";
  const config::LoadedConfig sgd_on_cuda = prepared({cuda, gpt, sgd});
  const std::string optimizer = error_at(sgd_on_cuda, "optimizer.type");
  for (const char* part :
       {"optimizer 'SGD' steps CPU tensors only", "FusedAdam", "offload_optimizer.device \"cpu\""})
    EXPECT_NE(optimizer.find(part), std::string::npos) << part << "\n"
                                                       << format_config_errors(sgd_on_cuda);
  const std::string offloaded = R"("zero_optimization": {"stage": 1, "offload_optimizer": )"
                                R"({"device": "cpu"}})";
  EXPECT_EQ(error_at(prepared({cuda, gpt, sgd, offloaded}), "optimizer.type"), "")
      << "its state on the host: it steps host tensors";
  const config::LoadedConfig adam =
      prepared({cuda, gpt, R"("optimizer": {"type": "AdamW", "params": {"lr": 0.1}})"});
  if (gpt_has_cuda()) {
    EXPECT_TRUE(adam.ok()) << format_config_errors(adam);
  }
}

}  // namespace
}  // namespace dscore
