#include "core/data/source.h"

#include "core/data/token_source.h"

namespace dscore::data {
namespace {

class SyntheticSource final : public BatchSource {
 public:
  SyntheticSource(const Model& model, uint64_t seed) : model_(model), seed_(seed) {}
  Status fill(SampleRange range, HostBatch* batch) override {
    DSCORE_CHECK(batch->batch_size() == range.count, "batch size mismatch");
    return model_.synthetic_batch(seed_, range.first, batch->view());
  }

 private:
  const Model& model_;
  uint64_t seed_;
};

}  // namespace

Result<std::unique_ptr<BatchSource>> make_batch_source(const config::TrainingConfig& cfg,
                                                       const Model& model) {
  const config::DataConfig& data = cfg.data;
  if (data.type == "synthetic") {
    if (!model.has_synthetic_task())
      return invalid_argument("data.type is \"synthetic\" but " + model.display_name() +
                              " has no synthetic task; give \"data\": {\"type\": \"text\", "
                              "\"path\": ...}");
    return std::unique_ptr<BatchSource>(new SyntheticSource(model, cfg.seed));
  }
  if (data.type == "text" || data.type == "tokens") return make_token_source(cfg, model);
  return invalid_argument("data.type \"" + data.type +
                          "\" is unknown; use \"synthetic\", \"text\" or \"tokens\"");
}

}  // namespace dscore::data
