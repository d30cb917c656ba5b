// FakeHost, TestPluginLibrary and CreateArgs (see fake_host.h). Schemas are
// read with core/config's parser, the same one the real host uses.
#include "tests/fakes/fake_host.h"

#include <dlfcn.h>
#include <dscore/cpp/dtype.hpp>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <stdexcept>

#include "core/config/json.h"
#include "core/config/schema.h"

namespace dscore::testing {
namespace {

thread_local dscore_status t_error_code = DSCORE_OK;
thread_local std::string t_error_message;

// What a dscore_host_context of the fake host points to.
struct FakeContext {
  const dscore_communicator* communicator = nullptr;
};
thread_local FakeContext t_context;

}  // namespace

// ------------------------------------------------------------ FakeHost

FakeHost& FakeHost::instance() {
  static FakeHost host;
  return host;
}

FakeHost::FakeHost() {
  api_.struct_size = sizeof(dscore_host_api);
  api_.abi_major = DSCORE_ABI_VERSION_MAJOR;
  api_.abi_minor = DSCORE_ABI_VERSION_MINOR;
  api_.host_version = "fake-host";
  api_.log = &FakeHost::log_fn;
  api_.set_error = &FakeHost::set_error_fn;
  api_.alloc = &FakeHost::alloc_fn;
  api_.free = &FakeHost::free_fn;
  api_.communicator = [](dscore_host_context* ctx,
                         dscore_comm_group) -> const dscore_communicator* {
    return ctx != nullptr ? reinterpret_cast<FakeContext*>(ctx)->communicator : nullptr;
  };
  api_.kv_set = [](dscore_host_context* ctx, const char*, const void*, size_t) -> dscore_status {
    return set_error_fn(ctx, DSCORE_UNAVAILABLE, "the fake host has no key-value store");
  };
  api_.kv_get = [](dscore_host_context* ctx, const char*, void*, size_t, size_t*,
                   int64_t) -> dscore_status {
    return set_error_fn(ctx, DSCORE_UNAVAILABLE, "the fake host has no key-value store");
  };
  api_.range_push = [](dscore_host_context*, const char*) {};
  api_.range_pop = [](dscore_host_context*) {};
  api_.now_ns = []() -> uint64_t {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  };
}

void FakeHost::log_fn(dscore_host_context*, dscore_log_level level, const char* plugin,
                      const char* message) {
  FakeHost& h = instance();
  std::lock_guard<std::mutex> lock(h.mutex_);
  h.logs_.push_back({level, plugin ? plugin : "", message ? message : ""});
}

dscore_status FakeHost::set_error_fn(dscore_host_context*, dscore_status code,
                                     const char* message) {
  t_error_code = code;
  t_error_message = message ? message : "";
  return code;
}

void* FakeHost::alloc_fn(dscore_host_context* ctx, size_t bytes, size_t alignment,
                         dscore_memory_kind kind, const char*) {
  FakeHost& h = instance();
  if (kind == DSCORE_MEMORY_DEVICE) {
    set_error_fn(ctx, DSCORE_RESOURCE_EXHAUSTED, "the fake host has no accelerator");
    return nullptr;
  }
  if (alignment == 0) alignment = 64;
  std::lock_guard<std::mutex> lock(h.mutex_);
  if (h.fail_alloc_) {
    set_error_fn(ctx, DSCORE_RESOURCE_EXHAUSTED, "fake host: allocation failure injected");
    return nullptr;
  }
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  if (p == nullptr) {
    set_error_fn(ctx, DSCORE_RESOURCE_EXHAUSTED, "fake host: out of memory");
    return nullptr;
  }
  h.allocations_[p] = bytes;
  return p;
}

void FakeHost::free_fn(dscore_host_context*, void* ptr, dscore_memory_kind) {
  if (ptr == nullptr) return;
  FakeHost& h = instance();
  std::lock_guard<std::mutex> lock(h.mutex_);
  h.allocations_.erase(ptr);
  std::free(ptr);
}

dscore_status FakeHost::last_error_code() const { return t_error_code; }
std::string FakeHost::last_error() const { return t_error_message; }
void FakeHost::clear_error() {
  t_error_code = DSCORE_OK;
  t_error_message.clear();
}

std::vector<LogLine> FakeHost::logs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return logs_;
}
void FakeHost::clear_logs() {
  std::lock_guard<std::mutex> lock(mutex_);
  logs_.clear();
}
size_t FakeHost::live_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocations_.size();
}
size_t FakeHost::live_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t total = 0;
  for (const auto& [p, n] : allocations_) total += n;
  return total;
}
void FakeHost::set_thread_communicator(const dscore_communicator* communicator) {
  t_context.communicator = communicator;
}

dscore_host_context* FakeHost::thread_context() {
  return reinterpret_cast<dscore_host_context*>(&t_context);
}

dscore_host_context* FakeHost::new_context(const dscore_communicator* communicator) {
  static std::mutex mutex;
  static std::deque<FakeContext> contexts;  // stable addresses, kept for the process
  std::lock_guard<std::mutex> lock(mutex);
  contexts.push_back(FakeContext{communicator});
  return reinterpret_cast<dscore_host_context*>(&contexts.back());
}

void FakeHost::set_fail_alloc(bool fail) {
  std::lock_guard<std::mutex> lock(mutex_);
  fail_alloc_ = fail;
}

// ------------------------------------------------------------ TestPluginLibrary

TestPluginLibrary::TestPluginLibrary(const std::string& path) : path_(path) {
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) throw std::runtime_error("dlopen(" + path + "): " + dlerror());
  void* sym = dlsym(handle_, DSCORE_PLUGIN_ENTRY_SYMBOL);
  if (sym == nullptr) {
    dlclose(handle_);
    throw std::runtime_error(path + " does not export " DSCORE_PLUGIN_ENTRY_SYMBOL);
  }
  auto entry = reinterpret_cast<dscore_plugin_entry_v1>(sym);
  table_ = entry();
  if (table_ == nullptr || table_->abi_major != DSCORE_ABI_VERSION_MAJOR) {
    dlclose(handle_);
    throw std::runtime_error(path + ": no library table or wrong ABI major");
  }
  if (table_->init != nullptr) {
    FakeHost::instance().clear_error();
    dscore_status st = table_->init(FakeHost::instance().api(), FakeHost::thread_context());
    if (st != DSCORE_OK) {
      std::string message = FakeHost::instance().last_error();
      dlclose(handle_);
      throw std::runtime_error(path + ": init failed: " + message);
    }
  }
}

TestPluginLibrary::~TestPluginLibrary() {
  if (table_ != nullptr && table_->shutdown != nullptr) table_->shutdown();
  if (handle_ != nullptr) dlclose(handle_);
}

const dscore_plugin_descriptor* TestPluginLibrary::find(dscore_plugin_kind kind,
                                                        std::string_view name) const {
  for (size_t i = 0; i < table_->plugin_count; ++i) {
    const dscore_plugin_descriptor* d = table_->plugins[i];
    if (d == nullptr || d->kind != kind || d->name == nullptr) continue;
    std::string_view n(d->name);
    if (n.size() != name.size()) continue;
    bool same = true;
    for (size_t k = 0; k < n.size() && same; ++k)
      same = std::tolower(static_cast<unsigned char>(n[k])) ==
             std::tolower(static_cast<unsigned char>(name[k]));
    if (same) return d;
  }
  throw std::runtime_error(path_ + " has no plugin named '" + std::string(name) + "' of kind " +
                           std::to_string(kind));
}

// ------------------------------------------------------------ TestTensor

TestTensor::TestTensor(dscore_dtype dtype, std::vector<int64_t> shape, const char* name)
    : shape_(std::move(shape)) {
  int64_t numel = 1;
  for (int64_t d : shape_) numel *= d;
  bytes_.assign(static_cast<size_t>(numel) * sdk::dtype_size(dtype), 0);
  view_.struct_size = sizeof(dscore_tensor);
  view_.data = bytes_.data();
  view_.dtype = dtype;
  view_.device_type = DSCORE_DEVICE_CPU;
  view_.ndim = static_cast<int32_t>(shape_.size());
  view_.shape = shape_.data();
  view_.numel = numel;
  view_.name = name;
}

TestTensor::TestTensor(const TestTensor& other)
    : shape_(other.shape_), bytes_(other.bytes_), view_(other.view_) {
  view_.data = bytes_.data();
  view_.shape = shape_.data();
}

float TestTensor::get(int64_t i) const { return sdk::load_float(&view_, i); }
void TestTensor::set(int64_t i, float v) { sdk::store_float(&view_, i, v); }
std::vector<float> TestTensor::values() const {
  std::vector<float> out(static_cast<size_t>(view_.numel));
  for (int64_t i = 0; i < view_.numel; ++i) out[i] = get(i);
  return out;
}

// ------------------------------------------------------------ schema

std::vector<SchemaField> parse_params_schema(const char* schema_json) {
  if (schema_json == nullptr) return {};
  auto spec = config::parse_params_schema(schema_json);
  if (!spec.ok()) throw std::runtime_error("bad params_schema: " + spec.status().message());
  std::vector<SchemaField> fields;
  for (const config::FieldSpec& f : spec->fields) {
    SchemaField field;
    field.name = f.name;
    field.type = config::field_type_name(f.type);
    if (f.default_value) field.default_json = json::serialize(*f.default_value);
    field.required = f.required;
    field.auto_rule = f.auto_rule;
    field.doc = f.doc;
    fields.push_back(std::move(field));
  }
  return fields;
}

// ------------------------------------------------------------ CreateArgs

CreateArgs CreateArgs::with_defaults(const dscore_plugin_descriptor* descriptor) {
  CreateArgs args;
  for (const SchemaField& f : parse_params_schema(descriptor->params_schema)) {
    if (f.default_json.empty()) continue;
    auto parsed = json::parse(f.default_json, "default");
    if (!parsed.ok()) throw std::runtime_error(parsed.status().message());
    const json::Value& d = *parsed;
    if (d.is_bool()) {
      args.boolean(f.name, d.as_bool());
    } else if (d.is_string()) {
      args.string(f.name, d.as_string());
    } else if (d.is_number() && f.type == "int") {
      args.integer(f.name, d.as_int());
    } else if (d.is_number()) {
      args.number(f.name, d.as_number());
    } else if (d.is_array() && f.type != "json") {
      std::vector<double> v;
      for (const json::Value& item : d.items()) v.push_back(item.as_number());
      args.numbers(f.name, v);
    } else if (!d.is_null()) {
      args.json(f.name, f.default_json);
    }
  }
  return args;
}

CreateArgs::Entry& CreateArgs::slot(const std::string& name) {
  for (auto& [key, entry] : entries_)
    if (key == name) return entry = Entry{};
  entries_.emplace_back(name, Entry{});
  return entries_.back().second;
}

CreateArgs& CreateArgs::boolean(const std::string& name, bool v) {
  Entry& e = slot(name);
  e.type = DSCORE_VALUE_BOOL;
  e.b = v;
  return *this;
}
CreateArgs& CreateArgs::integer(const std::string& name, int64_t v) {
  Entry& e = slot(name);
  e.type = DSCORE_VALUE_INT;
  e.i = v;
  return *this;
}
CreateArgs& CreateArgs::number(const std::string& name, double v) {
  Entry& e = slot(name);
  e.type = DSCORE_VALUE_DOUBLE;
  e.d = v;
  return *this;
}
CreateArgs& CreateArgs::string(const std::string& name, const std::string& v) {
  Entry& e = slot(name);
  e.type = DSCORE_VALUE_STRING;
  e.s = v;
  return *this;
}
CreateArgs& CreateArgs::numbers(const std::string& name, const std::vector<double>& v) {
  Entry& e = slot(name);
  e.type = DSCORE_VALUE_DOUBLE_ARRAY;
  e.doubles = v;
  return *this;
}
CreateArgs& CreateArgs::json(const std::string& name, const std::string& json_text) {
  Entry& e = slot(name);
  e.type = DSCORE_VALUE_JSON;
  e.s = json_text;
  return *this;
}
CreateArgs& CreateArgs::remove(const std::string& name) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->first == name) {
      entries_.erase(it);
      break;
    }
  return *this;
}
CreateArgs& CreateArgs::seed(uint64_t s) {
  seed_ = s;
  return *this;
}
CreateArgs& CreateArgs::flags(uint32_t f) {
  flags_ = f;
  return *this;
}
CreateArgs& CreateArgs::rank(int32_t rank, int32_t world_size) {
  rank_ = rank;
  world_size_ = world_size;
  return *this;
}

CreateArgs& CreateArgs::context(dscore_host_context* context) {
  context_ = context;
  return *this;
}

const dscore_create_args* CreateArgs::get() {
  values_.assign(entries_.size(), dscore_named_value{});
  pointers_.clear();
  json::Value params = json::Value::object();
  for (size_t k = 0; k < entries_.size(); ++k) {
    const auto& [name, e] = entries_[k];
    dscore_named_value& v = values_[k];
    v.struct_size = sizeof(dscore_named_value);
    v.name = name.c_str();
    v.type = e.type;
    v.b = e.b ? 1 : 0;
    v.i = e.i;
    v.d = e.d;
    v.s = e.s.c_str();
    v.doubles = e.doubles.data();
    v.count = e.doubles.size();
    pointers_.push_back(&v);

    switch (e.type) {
      case DSCORE_VALUE_BOOL:
        params.set(name, e.b);
        break;
      case DSCORE_VALUE_INT:
        params.set(name, e.i);
        break;
      case DSCORE_VALUE_DOUBLE:
        params.set(name, e.d);
        break;
      case DSCORE_VALUE_STRING:
        params.set(name, e.s);
        break;
      case DSCORE_VALUE_JSON: {
        auto parsed = json::parse(e.s, name);
        if (!parsed.ok()) throw std::runtime_error(parsed.status().message());
        params.set(name, *parsed);
        break;
      }
      case DSCORE_VALUE_DOUBLE_ARRAY: {
        json::Value array = json::Value::array();
        for (double d : e.doubles) array.push_back(d);
        params.set(name, std::move(array));
        break;
      }
      default:
        params.set(name, nullptr);
    }
  }
  params_json_ = json::serialize(params);

  args_ = dscore_create_args{};
  args_.struct_size = sizeof(dscore_create_args);
  args_.params = pointers_.data();
  args_.param_count = pointers_.size();
  args_.params_json = params_json_.c_str();
  args_.rank = rank_;
  args_.world_size = world_size_;
  args_.local_rank = rank_;
  args_.seed = seed_;
  args_.context = context_ != nullptr ? context_ : FakeHost::thread_context();
  args_.flags = flags_;
  return &args_;
}

}  // namespace dscore::testing
