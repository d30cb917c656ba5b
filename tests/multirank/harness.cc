#include "tests/multirank/harness.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace dscore::testing {

std::string RunSpec::config_json() const {
  std::ostringstream c;
  c << "{\n  \"plugins\": {\"paths\": [\"" << DSCORE_BUILD_PLUGIN_DIR << "\""
    << (plugin_path.empty() ? "" : ", \"" + plugin_path + "\"") << "]},\n"
    << "  \"train_batch_size\": " << train_batch << ", \"gradient_accumulation_steps\": " << gas
    << ",\n"
    << "  \"train_steps\": " << steps << ", \"seed\": 7,\n"
    << "  \"gradient_clipping\": " << clipping << ",\n"
    << "  \"optimizer\": " << optimizer << ",\n"
    << (scheduler.empty() ? std::string() : "  \"scheduler\": " + scheduler + ",\n")
    << "  \"model\": "
    << (model.empty() ? "{\"type\": \"mlp\", \"hidden_dim\": " + std::to_string(hidden) +
                            ", \"n_hidden_layers\": " + std::to_string(layers) + "}"
                      : model)
    << ",\n"
    << "  \"comm\": {\"timeout_ms\": " << timeout_ms << "},\n"
    << "  \"zero_optimization\": {\"stage\": " << stage
    << ", \"reduce_bucket_size\": " << reduce_bucket_size
    << ", \"overlap_comm\": " << (overlap_comm ? "true" : "false")
    << ", \"stage3_param_persistence_threshold\": " << persistence_threshold
    << ", \"stage3_max_reuse_distance\": " << max_reuse_distance
    << ", \"stage3_prefetch_bucket_size\": " << prefetch_bucket_size
    << (zero_extra.empty() ? "" : ", " + zero_extra) << "}";
  if (precision == "fp16")
    c << ",\n  \"fp16\": {\"enabled\": true, \"initial_scale_power\": " << initial_scale_power
      << (loss_scale_window > 0 ? ", \"loss_scale_window\": " + std::to_string(loss_scale_window)
                                : "")
      << "}";
  if (precision == "bf16") c << ",\n  \"bf16\": {\"enabled\": true}";
  if (!extra.empty()) c << ",\n  " << extra;
  c << "\n}\n";
  return c.str();
}

namespace {

RankReport read_report(const std::filesystem::path& file) {
  RankReport r;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "numel") {
      words >> r.numel;
    } else if (kind == "loss") {
      int64_t step;
      std::string hex;
      words >> step >> hex;
      r.losses.push_back(std::strtod(hex.c_str(), nullptr));
    } else if (kind == "step") {
      int64_t step;
      std::string what;
      double scale, norm;
      words >> step >> what >> scale >> norm;
      r.applied.push_back(what == "applied");
      r.loss_scales.push_back(scale);
      r.grad_norms.push_back(norm);
    } else if (kind == "wire") {
      int64_t step;
      uint64_t sent;
      words >> step >> sent;
      r.wire_sent.push_back(sent);
    } else if (kind == "comm") {
      // "comm <op words...> <calls> <elements>"
      std::vector<std::string> parts;
      for (std::string w; words >> w;) parts.push_back(w);
      if (parts.size() < 3) continue;
      std::string op;
      for (size_t i = 0; i + 2 < parts.size(); ++i) op += (i ? " " : "") + parts[i];
      r.comm[op] = {std::stoll(parts[parts.size() - 2]), std::stoll(parts.back())};
    } else if (kind == "memory" || kind == "plan") {
      std::vector<int64_t>& v = kind == "memory" ? r.memory : r.plan;
      for (int64_t x; words >> x;) v.push_back(x);
    }
  }
  return r;
}

// What a run wrote under `prefix`: per-rank reports, gathered parameters, dumped state.
void read_outputs(const std::string& prefix, int world, RunResult* result) {
  for (int r = 0; r < world; ++r) {
    const std::filesystem::path file = prefix + ".rank" + std::to_string(r);
    if (std::filesystem::exists(file)) result->ranks.push_back(read_report(file));
  }
  std::ifstream raw(prefix + ".params", std::ios::binary);
  if (raw) {
    std::vector<char> bytes((std::istreambuf_iterator<char>(raw)),
                            std::istreambuf_iterator<char>());
    result->params.resize(bytes.size() / 4);
    std::copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(result->params.size() * 4),
              reinterpret_cast<char*>(result->params.data()));
  }
  std::ifstream state(prefix + ".state", std::ios::binary);
  for (std::string name; state >> name;) {
    size_t count = 0;
    state >> count;
    state.get();  // the newline
    std::vector<float>& values = result->state[name];
    values.resize(count);
    state.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(count * 4));
  }
}

}  // namespace

RunResult run_workers(const RunSpec& spec, const std::vector<std::string>& worker_args,
                      std::chrono::seconds timeout) {
  TempDir dir("dscore_multirank");
  const std::filesystem::path config = dir.write("ds_config.json", spec.config_json());
  const std::string out = (dir.path() / "report").string();
  std::vector<std::string> argv = {
      MPIRUN, "-n", std::to_string(spec.world), "--oversubscribe", "--bind-to", "none"};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  for (const std::string& e : spec.env) argv.insert(argv.end(), {"-x", e});
  argv.insert(argv.end(), {ZERO_WORKER, "--config", config.string(), "--out", out});
  argv.insert(argv.end(), worker_args.begin(), worker_args.end());
  ProcessOptions options;
  options.timeout = timeout;
  options.env = mpi_test_env();
  RunResult result;
  result.process = run_process(argv, options);
  read_outputs(out, spec.world, &result);
  for (int i = 1; std::filesystem::exists(out + "." + std::to_string(i) + ".rank0"); ++i) {
    result.more.emplace_back();
    read_outputs(out + "." + std::to_string(i), spec.world, &result.more.back());
  }
  return result;
}

double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b,
                               double floor) {
  double worst = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), floor));
  return worst;
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b,
                               double floor) {
  std::vector<double> da(a.begin(), a.end()), db(b.begin(), b.end());
  return max_relative_difference(da, db, floor);
}

}  // namespace dscore::testing
