// The batch triad, as DeepSpeed's _set_batch_related_parameters and _batch_assertion
// (docs/deepspeed-reference.md#batch-size-triad): derive with Python floor division in a fixed
// order, then assert train > 0, micro > 0, gas > 0 and train == micro * gas * W, in that order,
// with DeepSpeed's messages.
//
// dscore's "auto" rule for these keys: "auto" counts as not provided, so the
// other keys determine it; when that leaves neither train_batch_size nor the
// micro-batch size, the micro-batch size is 1 (one sample per rank).
//
// Where DeepSpeed would crash with ZeroDivisionError (a micro-batch size or
// accumulation count of 0 used as a divisor), dscore reports the assertion
// DeepSpeed would have reached about that key instead.
#include "core/config/batch.h"

#include <limits>

namespace dscore::config {

namespace {

const char* const kTrain = "train_batch_size";
const char* const kMicro = "train_micro_batch_size_per_gpu";
const char* const kGas = "gradient_accumulation_steps";

// Python's a // b (rounds toward negative infinity); nullopt on overflow.
std::optional<int64_t> floor_div(int64_t a, int64_t b) {
  if (b == 0 || (a == std::numeric_limits<int64_t>::min() && b == -1)) return std::nullopt;
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

std::optional<int64_t> mul(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<int64_t> product(int64_t a, int64_t b, int64_t c) {
  auto ab = mul(a, b);
  return ab ? mul(*ab, c) : std::nullopt;
}

std::string s(int64_t v) { return std::to_string(v); }

}  // namespace

BatchOutcome derive_batch(const BatchInput& given, int64_t world_size) {
  BatchOutcome out;
  const int64_t w = world_size;
  const auto& train = given.train_batch_size;
  const auto& micro = given.train_micro_batch_size_per_gpu;
  const auto& gas = given.gradient_accumulation_steps;
  int64_t t = 0, m = 0, g = 0;
  auto overflow = [&](const char* key) {
    out.error = "the batch sizes overflow a 64-bit integer";
    out.error_key = key;
    return out;
  };

  if (train && micro && gas) {
    t = *train, m = *micro, g = *gas;
  } else if (train && micro) {
    t = *train, m = *micro;
    auto per_micro = floor_div(t, m);
    auto q = per_micro ? floor_div(*per_micro, w) : std::optional<int64_t>();
    if (m != 0 && !q) return overflow(kGas);
    g = q.value_or(0);  // m == 0: the micro-batch assertion reports it
    out.derivations.push_back(
        {kGas, "(train " + s(t) + " // micro " + s(m) + ") // world size " + s(w)});
  } else if (train && gas) {
    t = *train, g = *gas;
    auto per_rank = floor_div(t, w);
    if (!per_rank) return overflow(kMicro);
    // g == 0: as if 1, so the accumulation-steps assertion reports it.
    auto q = floor_div(*per_rank, g == 0 ? 1 : g);
    if (!q) return overflow(kMicro);
    m = *q;
    out.derivations.push_back(
        {kMicro, "(train " + s(t) + " // world size " + s(w) + ") // gas " + s(g)});
  } else if (micro && gas) {
    m = *micro, g = *gas;
    auto p = product(m, g, w);
    if (!p) return overflow(kTrain);
    t = *p;
    out.derivations.push_back(
        {kTrain, "micro " + s(m) + " * gas " + s(g) + " * world size " + s(w)});
  } else if (train) {
    t = *train, g = 1;
    m = *floor_div(t, w);
    out.derivations.push_back({kGas, "1 when only train_batch_size is given"});
    out.derivations.push_back({kMicro, "train " + s(t) + " // world size " + s(w)});
  } else if (micro) {
    m = *micro, g = 1;
    auto p = mul(m, w);
    if (!p) return overflow(kTrain);
    t = *p;
    out.derivations.push_back({kGas, "1 when only the micro-batch size is given"});
    out.derivations.push_back({kTrain, "micro " + s(m) + " * world size " + s(w)});
  } else {
    out.error = "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided";
    out.error_key = "";
    return out;
  }

  out.batch = BatchConfig{t, m, g};
  if (t <= 0) {
    out.error = "Train batch size: " + s(t) + " has to be greater than 0";
    out.error_key = kTrain;
  } else if (m <= 0) {
    out.error = "Micro batch size per gpu: " + s(m) + " has to be greater than 0";
    out.error_key = kMicro;
  } else if (g <= 0) {
    out.error = "Gradient accumulation steps: " + s(g) + " has to be greater than 0";
    out.error_key = kGas;
  } else if (auto p = product(m, g, w); !p || *p != t) {
    out.error =
        "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
        "gradient_acc_step * world_size " +
        s(t) + " != " + s(m) + " * " + s(g) + " * " + s(w);
    out.error_key = kTrain;
  }
  return out;
}

void resolve_batch(const json::Value& written, json::Value* resolved, int64_t world_size,
                   std::vector<ConfigError>* errors, std::vector<ConfigNotice>* notices) {
  const char* const keys[] = {kTrain, kMicro, kGas};
  for (const ConfigError& e : *errors)
    for (const char* k : keys)
      if (e.path == k) return;

  BatchInput in;
  std::optional<int64_t>* slots[] = {&in.train_batch_size, &in.train_micro_batch_size_per_gpu,
                                     &in.gradient_accumulation_steps};
  bool any_auto = false;
  json::Location first_given;
  for (int i = 0; i < 3; ++i) {
    const json::Value* w = written.is_object() ? written.find(keys[i]) : nullptr;
    if (w && w->is_auto()) any_auto = true;
    const json::Value* v = resolved->find(keys[i]);
    if (v && v->is_int()) {
      *slots[i] = v->as_int();
      if (!first_given.known()) first_given = v->location;
    }
  }
  bool micro_defaulted = false;
  if (any_auto && !in.train_batch_size && !in.train_micro_batch_size_per_gpu) {
    in.train_micro_batch_size_per_gpu = 1;
    micro_defaulted = true;
  }

  BatchOutcome outcome = derive_batch(in, world_size);
  if (!outcome.ok()) {
    std::string message = outcome.error;
    // About a key: point at it (or at the given key it was derived from);
    // about the whole triad: point at the document.
    json::Location where = resolved->location;
    if (!outcome.error_key.empty()) {
      if (first_given.known()) where = first_given;
      const json::Value* v = resolved->find(outcome.error_key);
      if (v && v->location.known()) where = v->location;
      for (const auto& [key, how] : outcome.derivations)
        if (key == outcome.error_key) message += " (" + key + " derived as " + how + ")";
    }
    errors->push_back(ConfigError{outcome.error_key, where, message});
    return;
  }

  // The three keys go first, in schema order, so the printed config reads
  // like the file.
  const int64_t values[] = {outcome.batch.train_batch_size,
                            outcome.batch.train_micro_batch_size_per_gpu,
                            outcome.batch.gradient_accumulation_steps};
  std::vector<json::Member> members;
  for (int i = 0; i < 3; ++i) {
    json::Value v(values[i]);
    const json::Member* old = resolved->find_member(keys[i]);
    const json::Member* w = written.is_object() ? written.find_member(keys[i]) : nullptr;
    v.location = old ? old->value.location : (w ? w->value.location : json::Location{});
    members.push_back(
        {keys[i], old ? old->key_location : (w ? w->key_location : json::Location{}), v});
  }
  for (json::Member& m : resolved->members())
    if (m.key != kTrain && m.key != kMicro && m.key != kGas) members.push_back(std::move(m));
  resolved->members() = std::move(members);

  for (int i = 0; i < 3; ++i) {
    const json::Value* w = written.is_object() ? written.find(keys[i]) : nullptr;
    std::string how;
    for (const auto& [key, text] : outcome.derivations)
      if (key == keys[i]) how = text;
    if (i == 1 && micro_defaulted) {
      notices->push_back(
          {keys[i], std::string(w && w->is_auto() ? "\"auto\" -> 1" : "set to 1") +
                        " (neither train_batch_size nor a micro-batch size is given: one "
                        "sample per rank per micro-batch)"});
    } else if (w && w->is_auto()) {
      notices->push_back({keys[i], "\"auto\" -> " + s(values[i]) + " (" + how + ")"});
    }
  }
}

}  // namespace dscore::config
