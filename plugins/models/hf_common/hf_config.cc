#include "hf_config.h"

#include <dscore/cpp/plugin.hpp>

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace dscore::hf {

struct HfConfig::Doc {
  rapidjson::Document json;
};

HfConfig::HfConfig(const std::string& text, const std::string& path)
    : path_(path), text_(text), doc_(std::make_unique<Doc>()) {
  doc_->json.Parse(text.c_str(), text.size());
  if (doc_->json.HasParseError())
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     path + " is not valid JSON (" +
                         rapidjson::GetParseError_En(doc_->json.GetParseError()) + " at byte " +
                         std::to_string(doc_->json.GetErrorOffset()) + ")");
  if (!doc_->json.IsObject())
    throw sdk::Error(DSCORE_INVALID_ARGUMENT, path + " is not a JSON object");
}

HfConfig::~HfConfig() = default;

namespace {

const rapidjson::Value* member(const rapidjson::Document& doc, const std::string& key) {
  auto it = doc.FindMember(key.c_str());
  if (it == doc.MemberEnd() || it->value.IsNull()) return nullptr;
  return &it->value;
}

template <typename T>
T need(const std::optional<T>& fallback, const std::string& key, const std::string& path) {
  if (!fallback)
    throw sdk::Error(DSCORE_INVALID_ARGUMENT,
                     path + " has no \"" + key + "\": dscore needs it to build the model");
  return *fallback;
}

sdk::Error wrong_type(const std::string& key, const std::string& path, const char* what) {
  return sdk::Error(DSCORE_INVALID_ARGUMENT, path + ": \"" + key + "\" must be " + what);
}

}  // namespace

bool HfConfig::has(const std::string& key) const { return member(doc_->json, key) != nullptr; }

int64_t HfConfig::integer(const std::string& key, std::optional<int64_t> fallback) const {
  const rapidjson::Value* v = member(doc_->json, key);
  if (v == nullptr) return need(fallback, key, path_);
  if (!v->IsInt64()) throw wrong_type(key, path_, "an integer");
  return v->GetInt64();
}

double HfConfig::number(const std::string& key, std::optional<double> fallback) const {
  const rapidjson::Value* v = member(doc_->json, key);
  if (v == nullptr) return need(fallback, key, path_);
  if (!v->IsNumber()) throw wrong_type(key, path_, "a number");
  return v->GetDouble();
}

bool HfConfig::boolean(const std::string& key, std::optional<bool> fallback) const {
  const rapidjson::Value* v = member(doc_->json, key);
  if (v == nullptr) return need(fallback, key, path_);
  if (!v->IsBool()) throw wrong_type(key, path_, "true or false");
  return v->GetBool();
}

std::string HfConfig::json(const std::string& key) const {
  const rapidjson::Value* v = member(doc_->json, key);
  if (v == nullptr) return "";
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  v->Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string HfConfig::string(const std::string& key, std::optional<std::string> fallback) const {
  const rapidjson::Value* v = member(doc_->json, key);
  if (v == nullptr) return need(fallback, key, path_);
  if (!v->IsString()) throw wrong_type(key, path_, "a string");
  return std::string(v->GetString(), v->GetStringLength());
}

std::string write_config_json(const std::string& base,
                              const std::vector<std::pair<std::string, std::string>>& values) {
  rapidjson::Document doc;
  doc.SetObject();
  if (!base.empty()) {
    doc.Parse(base.c_str(), base.size());
    if (doc.HasParseError() || !doc.IsObject())
      throw sdk::Error(DSCORE_INTERNAL, "write_config_json: the base config is not a JSON object");
  }
  auto& alloc = doc.GetAllocator();
  for (const auto& [key, text] : values) {
    rapidjson::Document value(&alloc);
    value.Parse(text.c_str(), text.size());
    if (value.HasParseError())
      throw sdk::Error(DSCORE_INTERNAL,
                       "write_config_json: the value of " + key + " is not JSON: " + text);
    rapidjson::Value copy(value, alloc);
    auto it = doc.FindMember(key.c_str());
    if (it != doc.MemberEnd()) {
      it->value = copy;
    } else {
      doc.AddMember(rapidjson::Value(key.c_str(), alloc), copy, alloc);
    }
  }
  rapidjson::StringBuffer out;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> writer(out);
  writer.SetIndent(' ', 2);
  doc.Accept(writer);
  return std::string(out.GetString(), out.GetSize()) + "\n";
}

std::string json_string(const std::string& s) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  writer.String(s.c_str(), static_cast<rapidjson::SizeType>(s.size()));
  return std::string(out.GetString(), out.GetSize());
}

}  // namespace dscore::hf
