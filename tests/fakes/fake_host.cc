// FakeHost, TestPluginLibrary and CreateArgs (see fake_host.h). Includes a
// minimal JSON reader, enough to read a params_schema: tests may not use
// RapidJSON, which lives only in core/config.
#include "tests/fakes/fake_host.h"

#include <dlfcn.h>
#include <dscore/cpp/dtype.hpp>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace dscore::testing {
namespace {

thread_local dscore_status t_error_code = DSCORE_OK;
thread_local std::string t_error_message;

// ------------------------------------------------------------ mini JSON

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  double number = 0;
  bool integral = false;  // written without '.', 'e' or 'E'
  std::string text;       // the value of a string
  std::string raw;        // the JSON text of the value as written
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;
};

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : s_(text) {}

  Json document() {
    Json v = value();
    skip_space();
    if (pos_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("params_schema is not valid JSON at offset " + std::to_string(pos_) +
                             ": " + what);
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool take(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json value() {
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end");
    size_t start = pos_;
    Json v;
    char c = s_[pos_];
    if (c == '{') {
      v.kind = Json::kObject;
      ++pos_;
      if (!take('}')) {
        do {
          skip_space();
          std::string key = string_body();
          expect(':');
          v.members.emplace_back(key, value());
        } while (take(','));
        expect('}');
      }
    } else if (c == '[') {
      v.kind = Json::kArray;
      ++pos_;
      if (!take(']')) {
        do v.items.push_back(value());
        while (take(','));
        expect(']');
      }
    } else if (c == '"') {
      v.kind = Json::kString;
      v.text = string_body();
    } else if (literal("true")) {
      v.kind = Json::kBool;
      v.b = true;
    } else if (literal("false")) {
      v.kind = Json::kBool;
    } else if (literal("null")) {
      v.kind = Json::kNull;
    } else {
      const char* begin = s_.data() + pos_;
      char* end = nullptr;
      v.number = std::strtod(begin, &end);
      if (end == begin) fail("unexpected character");
      std::string_view raw(begin, static_cast<size_t>(end - begin));
      v.integral = raw.find_first_of(".eE") == std::string_view::npos;
      v.kind = Json::kNumber;
      pos_ += raw.size();
    }
    v.raw = std::string(s_.substr(start, pos_ - start));
    return v;
  }

  std::string string_body() {
    if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string");
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("bad escape");
      char e = s_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': fail("\\u escapes are not supported by the test reader");
        default: out += e;
      }
    }
    if (pos_ >= s_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

const Json* member(const Json& object, std::string_view name) {
  for (const auto& [key, value] : object.members)
    if (key == name) return &value;
  return nullptr;
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string json_number(double d) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", d);
  return buffer;
}

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
  api_.communicator = []() -> const dscore_communicator* { return nullptr; };
  api_.kv_set = [](const char*, const void*, size_t) -> dscore_status {
    return set_error_fn(DSCORE_UNAVAILABLE, "the fake host has no key-value store");
  };
  api_.kv_get = [](const char*, void*, size_t, size_t*, int64_t) -> dscore_status {
    return set_error_fn(DSCORE_UNAVAILABLE, "the fake host has no key-value store");
  };
  api_.range_push = [](const char*) {};
  api_.range_pop = []() {};
  api_.now_ns = []() -> uint64_t {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  };
}

void FakeHost::log_fn(dscore_log_level level, const char* plugin, const char* message) {
  FakeHost& h = instance();
  std::lock_guard<std::mutex> lock(h.mutex_);
  h.logs_.push_back({level, plugin ? plugin : "", message ? message : ""});
}

dscore_status FakeHost::set_error_fn(dscore_status code, const char* message) {
  t_error_code = code;
  t_error_message = message ? message : "";
  return code;
}

void* FakeHost::alloc_fn(size_t bytes, size_t alignment, dscore_memory_kind kind, const char*) {
  FakeHost& h = instance();
  if (kind == DSCORE_MEMORY_DEVICE) {
    set_error_fn(DSCORE_RESOURCE_EXHAUSTED, "the fake host has no accelerator");
    return nullptr;
  }
  if (alignment == 0) alignment = 64;
  std::lock_guard<std::mutex> lock(h.mutex_);
  if (h.fail_alloc_) {
    set_error_fn(DSCORE_RESOURCE_EXHAUSTED, "fake host: allocation failure injected");
    return nullptr;
  }
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  if (p == nullptr) {
    set_error_fn(DSCORE_RESOURCE_EXHAUSTED, "fake host: out of memory");
    return nullptr;
  }
  h.allocations_[p] = bytes;
  return p;
}

void FakeHost::free_fn(void* ptr, dscore_memory_kind) {
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
    dscore_status st = table_->init(FakeHost::instance().api());
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
  Json doc = JsonReader(schema_json).document();
  if (doc.kind != Json::kObject) throw std::runtime_error("params_schema is not a JSON object");
  std::vector<SchemaField> fields;
  for (const auto& [name, spec] : doc.members) {
    if (spec.kind != Json::kObject)
      throw std::runtime_error("params_schema entry '" + name + "' is not an object");
    SchemaField f;
    f.name = name;
    const Json* type = member(spec, "type");
    if (type == nullptr || type->kind != Json::kString)
      throw std::runtime_error("params_schema entry '" + name + "' has no \"type\"");
    f.type = type->text;
    if (const Json* d = member(spec, "default")) f.default_json = d->raw;
    if (const Json* r = member(spec, "required")) f.required = r->kind == Json::kBool && r->b;
    if (const Json* a = member(spec, "auto")) f.auto_rule = a->text;
    if (const Json* d = member(spec, "doc")) f.doc = d->text;
    fields.push_back(std::move(f));
  }
  return fields;
}

// ------------------------------------------------------------ CreateArgs

CreateArgs CreateArgs::with_defaults(const dscore_plugin_descriptor* descriptor) {
  CreateArgs args;
  for (const SchemaField& f : parse_params_schema(descriptor->params_schema)) {
    if (f.default_json.empty()) continue;
    Json d = JsonReader(f.default_json).document();
    if (d.kind == Json::kBool) {
      args.boolean(f.name, d.b);
    } else if (d.kind == Json::kString) {
      args.string(f.name, d.text);
    } else if (d.kind == Json::kNumber && f.type == "int") {
      args.integer(f.name, static_cast<int64_t>(d.number));
    } else if (d.kind == Json::kNumber) {
      args.number(f.name, d.number);
    } else if (d.kind == Json::kArray && f.type != "json") {
      std::vector<double> v;
      for (const Json& item : d.items) v.push_back(item.number);
      args.numbers(f.name, v);
    } else if (d.kind != Json::kNull) {
      args.json(f.name, d.raw);
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
CreateArgs& CreateArgs::rank(int32_t rank, int32_t world_size) {
  rank_ = rank;
  world_size_ = world_size;
  return *this;
}

const dscore_create_args* CreateArgs::get() {
  values_.assign(entries_.size(), dscore_named_value{});
  pointers_.clear();
  params_json_ = "{";
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

    if (k > 0) params_json_ += ", ";
    params_json_ += json_quote(name) + ": ";
    switch (e.type) {
      case DSCORE_VALUE_BOOL: params_json_ += e.b ? "true" : "false"; break;
      case DSCORE_VALUE_INT: params_json_ += std::to_string(e.i); break;
      case DSCORE_VALUE_DOUBLE: params_json_ += json_number(e.d); break;
      case DSCORE_VALUE_STRING: params_json_ += json_quote(e.s); break;
      case DSCORE_VALUE_JSON: params_json_ += e.s; break;
      case DSCORE_VALUE_DOUBLE_ARRAY: {
        params_json_ += "[";
        for (size_t j = 0; j < e.doubles.size(); ++j)
          params_json_ += (j ? ", " : "") + json_number(e.doubles[j]);
        params_json_ += "]";
        break;
      }
      default: params_json_ += "null";
    }
  }
  params_json_ += "}";

  args_ = dscore_create_args{};
  args_.struct_size = sizeof(dscore_create_args);
  args_.params = pointers_.data();
  args_.param_count = pointers_.size();
  args_.params_json = params_json_.c_str();
  args_.rank = rank_;
  args_.world_size = world_size_;
  args_.local_rank = rank_;
  args_.seed = seed_;
  return &args_;
}

}  // namespace dscore::testing
