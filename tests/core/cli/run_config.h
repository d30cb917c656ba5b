// A small mlp training config for the CLI tests, as ds_config.json text: the
// same shape as configs/quickstart.json, shrunk so a run of 100 steps takes
// milliseconds.
#pragma once

#include <string>

namespace dscore::testing {

struct MlpRunConfig {
  std::string optimizer = R"({"type": "Adam", "params": {"lr": 0.003}})";
  std::string output_path;  // csv_monitor.output_path; empty = no csv_monitor section
  std::string job_name = "job";
  int train_steps = 100;  // <= 0: no "train_steps" key
  std::string extra;      // more top-level members, e.g. R"("fp16": {"enabled": true})"

  std::string text() const {
    std::string t = "{\n";
    t += "  \"train_batch_size\": 32,\n";
    t += "  \"steps_per_print\": 10,\n";
    t += "  \"optimizer\": " + optimizer + ",\n";
    if (!output_path.empty())
      t += "  \"csv_monitor\": {\"enabled\": true, \"output_path\": \"" + output_path +
           "\", \"job_name\": \"" + job_name + "\"},\n";
    t +=
        "  \"model\": {\"type\": \"mlp\", \"input_dim\": 8, \"hidden_dim\": 16, \"output_dim\": 2, "
        "\"n_hidden_layers\": 1},\n";
    if (train_steps > 0) t += "  \"train_steps\": " + std::to_string(train_steps) + ",\n";
    if (!extra.empty()) t += "  " + extra + ",\n";
    t += "  \"seed\": 1\n}\n";
    return t;
  }
};

}  // namespace dscore::testing
