// DeepSpeed's rules that span keys (docs/deepspeed-reference.md#configuration,
// #gradient-averaging, #zero-optimization-keys), with DeepSpeed's own
// messages where it has one. Each error names the key
// it is about, with that key's position in the file.
//
// Deliberate difference: a "scheduler" without "params" is accepted (the
// scheduler's defaults apply); DeepSpeed crashes calling the constructor
// with **None.
#include "core/config/config_rules.h"

#include "core/config/deepspeed_schema.h"
#include "core/config/schema.h"
#include "core/config/schema_util.h"

namespace dscore::config {

namespace {

json::Value* get(json::Value* doc, std::initializer_list<const char*> keys) {
  json::Value* v = doc;
  for (const char* k : keys) {
    if (!v || !v->is_object()) return nullptr;
    v = v->find(k);
  }
  return v;
}

bool flag(json::Value* doc, std::initializer_list<const char*> keys) {
  json::Value* v = get(doc, keys);
  return v && v->is_bool() && v->as_bool();
}

class Rules {
 public:
  Rules(json::Value* resolved, std::vector<ConfigError>* errors, std::vector<ConfigNotice>* notices)
      : doc_(resolved), errors_(errors), notices_(notices) {}

  void run() {
    precision();
    zero_deprecated();
    zero_checks();
    optimizer();
  }

 private:
  // An error about the value at `keys` (or the nearest enclosing value that
  // has a position, when the value is a default); `at_key`: about the key
  // itself, so point at the key.
  void error_at(std::initializer_list<const char*> keys, std::string message, bool at_key = false,
                ErrorKind kind = ErrorKind::kInvalid) {
    std::string path;
    json::Location where = doc_->location;
    json::Value* v = doc_;
    for (const char* k : keys) {
      path = join_path(path, k);
      const json::Member* m = v && v->is_object() ? v->find_member(k) : nullptr;
      v = m ? const_cast<json::Value*>(&m->value) : nullptr;
      if (m && at_key && m->key_location.known())
        where = m->key_location;
      else if (v && v->location.known())
        where = v->location;
    }
    errors_->push_back(ConfigError{path, where, std::move(message), kind});
  }

  void precision() {
    if (flag(doc_, {"fp16", "enabled"}) && flag(doc_, {"bf16", "enabled"}))
      error_at({"bf16", "enabled"}, "bfloat16 and fp16 modes cannot be simultaneously enabled");
    // DeepSpeed 0.19's rules for 16-bit masters (runtime/config.py).
    json::Value* device = get(doc_, {"zero_optimization", "offload_optimizer", "device"});
    const bool offloaded = device && device->is_string() && device->as_string() != "none";
    if (flag(doc_, {"fp16", "fp16_master_weights_and_grads"}) && (stage() < 1 || !offloaded))
      error_at({"fp16", "fp16_master_weights_and_grads"},
               "fp16_master_weights_and_grads needs ZeRO stage 1, 2 or 3 with optimizer offload "
               "(zero_optimization.offload_optimizer.device \"cpu\"), as in DeepSpeed");
    if (flag(doc_, {"bf16", "bf16_master_weights_and_grads"}) && stage() < 1)
      error_at({"bf16", "bf16_master_weights_and_grads"},
               "bf16_master_weights_and_grads needs ZeRO stage 1, 2 or 3 (it changes the "
               "partitioned master), as in DeepSpeed: set zero_optimization.stage");
    if (flag(doc_, {"bf16", "bf16_optimizer_states"}) &&
        !flag(doc_, {"bf16", "bf16_master_weights_and_grads"}))
      error_at({"bf16", "bf16_optimizer_states"},
               "bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled, as in "
               "DeepSpeed: add \"bf16_master_weights_and_grads\": true");
  }

  int64_t stage() {
    json::Value* s = get(doc_, {"zero_optimization", "stage"});
    return s && s->is_int() ? s->as_int() : 0;
  }

  // cpu_offload / cpu_offload_param: true -> {device: cpu} with every other
  // offload key at its default; false -> off. (Together with the new key is
  // the validator's error; the renamed stage3_gather_fp16_... is moved there.)
  void zero_deprecated() {
    json::Value* zero = get(doc_, {"zero_optimization"});
    if (!zero || !zero->is_object()) return;
    const ObjectSpec* zero_spec = child_spec(deepspeed_schema(), "zero_optimization");
    struct Mapping {
      const char* old_key;
      const char* new_key;
    };
    for (Mapping m : {Mapping{"cpu_offload", "offload_optimizer"},
                      Mapping{"cpu_offload_param", "offload_param"}}) {
      json::Value* old_value = zero->find(m.old_key);
      if (!old_value) continue;
      if (old_value->is_bool() && old_value->as_bool() && !zero->find(m.new_key)) {
        json::Value written = json::Value::object();
        written.set("device", json::Value("cpu"));
        json::Value mapped = validate_object(written, *child_spec(*zero_spec, m.new_key),
                                             join_path("zero_optimization", m.new_key),
                                             AutoResolver(), ValidationSink{errors_, notices_});
        mapped.location = old_value->location;
        set_in_schema_order(zero, *zero_spec, m.new_key, std::move(mapped));
      }
      zero->erase(m.old_key);
    }
    zero->erase("cpu_offload_use_pin_memory");
  }

  void zero_checks() {
    json::Value* zero = get(doc_, {"zero_optimization"});
    if (!zero || !zero->is_object()) return;
    const int64_t s = stage();
    if (flag(doc_, {"zero_optimization", "legacy_stage1"}))
      error_at(
          {"zero_optimization", "legacy_stage1"},
          "The deprecated version of ZeRO Stage 1 is not supported in deepspeed >= 0.5.9. Please "
          "downgrade to a version less than 0.5.9 if you need to use this deprecated version of "
          "ZeRO.");
    if (!zero->find("overlap_comm"))
      set_in_schema_order(zero, *child_spec(deepspeed_schema(), "zero_optimization"),
                          "overlap_comm", json::Value(s == 3));

    // (What dscore makes of a ratio at stage 3 is placement.cc's notice.)
    json::Value* ratio = get(doc_, {"zero_optimization", "offload_optimizer", "ratio"});
    if (ratio && ratio->is_number() && ratio->as_number() < 1.0 && s != 3)
      error_at({"zero_optimization", "offload_optimizer", "ratio"},
               "Partial offloading only supported for ZeRO Stage 3.");

    json::Value* bucket = get(doc_, {"zero_optimization", "allgather_bucket_size"});
    if ((s == 1 || s == 2) && bucket && bucket->is_int() && bucket->as_int() % 2 != 0)
      error_at({"zero_optimization", "allgather_bucket_size"},
               "allgather_bucket_size must be a multiple of nccl_start_alignment_factor, 2");

    // ZeRO-2/3 reduce-scatter the averaged gradients and cannot apply a
    // predivide factor or prescaling (docs/deepspeed-reference.md#gradient-averaging).
    if ((s == 2 || s == 3) && flag(doc_, {"zero_optimization", "reduce_scatter"})) {
      const std::string zero_name = s == 2 ? "ZeRO-2" : "ZeRO-3";
      json::Value* predivide = get(doc_, {"gradient_predivide_factor"});
      if (predivide && predivide->is_number() && predivide->as_number() != 1.0)
        error_at({"gradient_predivide_factor"},
                 "gradient_predivide_factor != 1.0 is not yet supported with " + zero_name +
                     " with reduce scatter enabled");
      if (flag(doc_, {"prescale_gradients"}))
        error_at({"prescale_gradients"}, "pre-scale gradients is not yet supported with " +
                                             zero_name + " with reduce scatter enabled");
    }
  }

  void optimizer() {
    if (get(doc_, {"optimizer", "params", "max_grad_norm"}))
      error_at(
          {"optimizer", "params", "max_grad_norm"},
          "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the "
          "deepspeed parameter 'gradient_clipping' see: "
          "https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details",
          /*at_key=*/true, ErrorKind::kDeepSpeedRejects);
  }

  json::Value* doc_;
  std::vector<ConfigError>* errors_;
  std::vector<ConfigNotice>* notices_;
};

}  // namespace

void apply_legacy_forms(json::Value* document, std::vector<ConfigNotice>* notices) {
  if (!document->is_object()) return;
  json::Value* zero = document->find("zero_optimization");
  if (!zero || !zero->is_bool()) return;
  const bool on = zero->as_bool();
  json::Value mapped = json::Value::object();
  mapped.location = zero->location;
  json::Value stage(int64_t{on ? 1 : 0});
  stage.location = zero->location;
  mapped.set("stage", stage);
  const json::Value* allgather = document->find("allgather_size");
  int64_t bucket = allgather && allgather->is_integral() ? allgather->as_int() : 500000000;
  json::Value bucket_value(bucket);
  bucket_value.location =
      allgather && allgather->is_integral() ? allgather->location : zero->location;
  mapped.set("allgather_bucket_size", bucket_value);
  notices->push_back(
      {"zero_optimization", std::string("the boolean form is deprecated: read as {\"stage\": ") +
                                (on ? "1" : "0") +
                                ", \"allgather_bucket_size\": " + std::to_string(bucket) + "}"});
  *zero = std::move(mapped);
}

void apply_deepspeed_rules(json::Value* resolved, std::vector<ConfigError>* errors,
                           std::vector<ConfigNotice>* notices) {
  Rules(resolved, errors, notices).run();
}

}  // namespace dscore::config
