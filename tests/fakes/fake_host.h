// Test doubles for talking to plugins through the real C ABI without the real
// plugin host: FakeHost (a dscore_host_api that records errors, logs and
// allocations), TestPluginLibrary (dlopen a plugin .so, init it, find a
// descriptor) and CreateArgs (build dscore_create_args the way the host does,
// defaults filled from the plugin's params_schema).
#pragma once

#include <dscore/plugin.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace dscore::testing {

struct LogLine {
  dscore_log_level level;
  std::string plugin;
  std::string message;
};

// A process-wide fake host for driving one plugin library directly. Its
// contexts are per thread (thread_context(), which CreateArgs passes to
// create()): a test runs W "ranks" as W threads, each creating its instance
// with its own context and communicator. The error is per thread (one call
// at a time per thread); logs and allocations are counted for the process.
class FakeHost {
 public:
  static FakeHost& instance();

  const dscore_host_api* api() const { return &api_; }

  // The (code, message) of the last set_error on the calling thread.
  dscore_status last_error_code() const;
  std::string last_error() const;
  void clear_error();

  std::vector<LogLine> logs() const;
  void clear_logs();

  // Live allocations made through api()->alloc (not yet freed).
  size_t live_allocations() const;
  size_t live_bytes() const;
  // When set, alloc returns NULL (fault injection).
  void set_fail_alloc(bool fail);

  // The communicator of the calling thread's context (NULL by default), as
  // api()->communicator() returns it for instances created on this thread.
  // Borrowed.
  static void set_thread_communicator(const struct dscore_communicator* communicator);
  // The calling thread's context.
  static dscore_host_context* thread_context();
  // A context of its own whose communicator is `communicator` (borrowed):
  // for an instance created on one thread and stepped on another, as a
  // rank of a threaded test. Lives as long as the process.
  static dscore_host_context* new_context(const struct dscore_communicator* communicator);

 private:
  FakeHost();
  static void log_fn(dscore_host_context* ctx, dscore_log_level level, const char* plugin,
                     const char* message);
  static dscore_status set_error_fn(dscore_host_context* ctx, dscore_status code,
                                    const char* message);
  static void* alloc_fn(dscore_host_context* ctx, size_t bytes, size_t alignment,
                        dscore_memory_kind kind, const char* tag);
  static void free_fn(dscore_host_context* ctx, void* ptr, dscore_memory_kind kind);

  dscore_host_api api_{};
  mutable std::mutex mutex_;
  std::vector<LogLine> logs_;
  std::map<void*, size_t> allocations_;
  bool fail_alloc_ = false;
};

// A plugin library opened for a test: dlopen(RTLD_NOW | RTLD_LOCAL), entry
// symbol, init(FakeHost). The destructor calls shutdown and dlclose.
// Failures throw std::runtime_error (GoogleTest reports it as a failure).
class TestPluginLibrary {
 public:
  explicit TestPluginLibrary(const std::string& path);
  ~TestPluginLibrary();
  TestPluginLibrary(const TestPluginLibrary&) = delete;
  TestPluginLibrary& operator=(const TestPluginLibrary&) = delete;

  const dscore_plugin_library* table() const { return table_; }
  const std::string& path() const { return path_; }

  // The descriptor of kind `kind` named `name` (case-insensitive, as the
  // host matches); throws when there is none.
  const dscore_plugin_descriptor* find(dscore_plugin_kind kind, std::string_view name) const;

  template <typename Vtable>
  const Vtable* vtable(dscore_plugin_kind kind, std::string_view name) const {
    return static_cast<const Vtable*>(find(kind, name)->vtable);
  }

 private:
  std::string path_;
  void* handle_ = nullptr;
  const dscore_plugin_library* table_ = nullptr;
};

// One parameter of a params_schema, as tests need to see it.
struct SchemaField {
  std::string name;
  std::string type;          // "bool", "int", "number", "string", ...
  std::string default_json;  // the default as JSON text, "" when none
  bool required = false;
  std::string auto_rule;  // "" when "auto" is not accepted
  std::string doc;
};

// Parse a descriptor's params_schema text. Throws std::runtime_error when it
// is not a JSON object of objects each with a "type".
std::vector<SchemaField> parse_params_schema(const char* schema_json);

// An owned dense CPU tensor with a dscore_tensor view, for feeding plugins.
class TestTensor {
 public:
  TestTensor(dscore_dtype dtype, std::vector<int64_t> shape, const char* name = nullptr);
  TestTensor(dscore_dtype dtype, int64_t numel, const char* name = nullptr)
      : TestTensor(dtype, std::vector<int64_t>{numel}, name) {}
  TestTensor(const TestTensor& other);
  TestTensor& operator=(const TestTensor&) = delete;

  dscore_tensor* view() { return &view_; }
  const dscore_tensor* view() const { return &view_; }
  int64_t numel() const { return view_.numel; }
  // Element i converted to/from float (f32, f16, bf16, f64).
  float get(int64_t i) const;
  void set(int64_t i, float v);
  std::vector<float> values() const;

 private:
  std::vector<int64_t> shape_;
  std::vector<unsigned char> bytes_;
  dscore_tensor view_{};
};

// dscore_create_args built from named values. with_defaults() fills every
// schema default the way the host does, so a test then sets only what it
// varies. get() stays valid until the builder changes or dies.
class CreateArgs {
 public:
  CreateArgs() = default;
  static CreateArgs with_defaults(const dscore_plugin_descriptor* descriptor);

  CreateArgs& boolean(const std::string& name, bool v);
  CreateArgs& integer(const std::string& name, int64_t v);
  CreateArgs& number(const std::string& name, double v);
  CreateArgs& string(const std::string& name, const std::string& v);
  CreateArgs& numbers(const std::string& name, const std::vector<double>& v);
  CreateArgs& json(const std::string& name, const std::string& json_text);
  CreateArgs& remove(const std::string& name);
  CreateArgs& seed(uint64_t s);
  CreateArgs& flags(uint32_t f);  // DSCORE_CREATE_* (default none)
  CreateArgs& rank(int32_t rank, int32_t world_size);
  // The context create() receives (default: FakeHost::thread_context()).
  CreateArgs& context(dscore_host_context* context);

  const dscore_create_args* get();

 private:
  struct Entry {
    dscore_value_type type = DSCORE_VALUE_NULL;
    bool b = false;
    int64_t i = 0;
    double d = 0;
    std::string s;
    std::vector<double> doubles;
  };
  Entry& slot(const std::string& name);

  std::vector<std::pair<std::string, Entry>> entries_;  // in insertion order
  std::vector<dscore_named_value> values_;
  std::vector<const dscore_named_value*> pointers_;
  std::string params_json_;
  dscore_create_args args_{};
  uint64_t seed_ = 1234;
  uint32_t flags_ = 0;
  int32_t rank_ = 0;
  int32_t world_size_ = 1;
  dscore_host_context* context_ = nullptr;
};

}  // namespace dscore::testing
