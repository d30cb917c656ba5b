// The folder layout of an offline wandb run, as `wandb.init(mode="offline",
// dir=BASE)` leaves it and `wandb sync` expects it:
//   BASE/wandb/offline-run-<YYYYmmdd_HHMMSS>-<run id>/run-<run id>.wandb
//   BASE/wandb/offline-run-.../files/, logs/
//   BASE/wandb/latest-run -> offline-run-...
#pragma once

#include <dscore/cpp/plugin.hpp>

#include <string>

namespace dscore::wandb {

struct RunFolder {
  std::string run_dir;   // BASE/wandb/offline-run-...
  std::string run_file;  // run_dir/run-<id>.wandb (not created here)
};

// 8 characters from [a-z0-9], as wandb's generate_id().
std::string new_run_id();

// Creates the folders and the latest-run link (a failure to link is only
// logged). Throws sdk::Error naming the folder that cannot be created.
RunFolder create_run_folder(const sdk::HostRef& host, const std::string& base,
                            const std::string& run_id, double start_time);

}  // namespace dscore::wandb
