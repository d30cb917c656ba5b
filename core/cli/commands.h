// The `dscore` subcommands. Each takes the arguments after its name and
// returns the process exit code (0 ok, 1 failure, 2 usage or config error).
#pragma once

#include <string>
#include <vector>

namespace dscore::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int run_command(const std::vector<std::string>& args);
int config_command(const std::vector<std::string>& args);
int plugins_command(const std::vector<std::string>& args);
int lr_schedule_command(const std::vector<std::string>& args);
int loss_scale_command(const std::vector<std::string>& args);
int plan_command(const std::vector<std::string>& args);
int checkpoint_command(const std::vector<std::string>& args);
int zero_to_fp32_command(const std::vector<std::string>& args);
int generate_command(const std::vector<std::string>& args);
int serve_command(const std::vector<std::string>& args);
int export_hf_command(const std::vector<std::string>& args);
int forward_command(const std::vector<std::string>& args);
int io_bench_command(const std::vector<std::string>& args);
int tokenize_command(const std::vector<std::string>& args);
int autotune_command(const std::vector<std::string>& args);

// What `dscore --version` prints: "dscore 0.1.0 (plugin ABI 1.2)".
std::string version_text();

}  // namespace dscore::cli
