// The built-in "tensorboard" monitor (docs/deepspeed-reference.md#monitors): DeepSpeed's
// TensorBoardMonitor, which calls SummaryWriter.add_scalar(tag, value,
// global_samples) for each event and flushes after every batch. One event
// file per monitor under output_path/job_name, named as torch names its own;
// TensorBoard (and `wandb sync --sync-tensorboard`) read it as is.
#include <dscore/monitor.h>
#include <unistd.h>
#include <dscore/cpp/monitor_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "event_file.h"

namespace dscore::tensorboard {
namespace {

using sdk::Error;

constexpr const char kParamsSchema[] = R"json({
  "output_path": {"type": "string", "default": "",
                  "doc": "folder holding the job folder; \"\" = the current directory"},
  "job_name": {"type": "string", "default": "DeepSpeedJobName",
               "doc": "the event file goes to output_path/job_name"}
})json";

// Python's os.path.join(a, b) for two POSIX components.
std::string path_join(const std::string& a, const std::string& b) {
  if (!b.empty() && b[0] == '/') return b;
  if (a.empty() || a.back() == '/') return a + b;
  return a + "/" + b;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// torch's _global_uid: distinguishes writers created in the same second.
std::atomic<unsigned> g_next_uid{0};

class TensorBoardMonitor : public sdk::Instance {
 public:
  TensorBoardMonitor(sdk::HostRef host, const sdk::Params& p) : Instance(host) {
    const std::string log_dir = path_join(p.string("output_path"), p.string("job_name"));
    const std::string dir = log_dir.empty() ? "." : log_dir;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      throw Error(ec.value() == EACCES || ec.value() == EROFS ? DSCORE_PERMISSION_DENIED
                                                              : DSCORE_INVALID_ARGUMENT,
                  "cannot create the TensorBoard log directory '" + dir +
                      "' (output_path + job_name): " + ec.message() +
                      "; set tensorboard.output_path to a writable directory");
    const double now = unix_now();
    const std::string name =
        event_file_name(now, hostname(), static_cast<long>(::getpid()), g_next_uid++);
    try {
      file_ = std::make_unique<EventFile>(path_join(log_dir, name), now);
    } catch (const Error& e) {
      throw Error(e.code(),
                  std::string(e.what()) + "; set tensorboard.output_path to a writable directory");
    }
  }

  void write(const dscore_scalar_event& e, bool has_wall_time) {
    const double wall_time = has_wall_time && e.wall_time > 0 ? e.wall_time : unix_now();
    file_->append(scalar_event(wall_time, e.step, e.tag != nullptr ? e.tag : "",
                               static_cast<float>(e.value)));
  }
  void flush() { file_->flush(); }

 private:
  std::unique_ptr<EventFile> file_;
};

const dscore_plugin_descriptor kTensorBoard = sdk::monitor_descriptor<TensorBoardMonitor>(
    "tensorboard", "0.1.0",
    "DeepSpeed's TensorBoard monitor: an events.out.tfevents.* file under output_path/job_name",
    kParamsSchema);

}  // namespace
}  // namespace dscore::tensorboard

DSCORE_PLUGIN_LIBRARY("dscore-tensorboard", "0.1.0", "dscore", &dscore::tensorboard::kTensorBoard)
