// The built-in "csv_monitor" (docs/deepspeed-reference.md#monitors), byte-compatible with
// DeepSpeed's csvMonitor: directory output_path/job_name, one file per tag
// (tag with '/' and ' ' -> '_', plus ".csv") opened for append, a header row
// "step,<last tag component>" the first time this process writes a file,
// rows "<step>,<repr(value)>", lines ended "\r\n" as Python's csv.writer does.
#include <dscore/monitor.h>
#include <unistd.h>
#include <dscore/cpp/file_io.hpp>
#include <dscore/cpp/monitor_plugin.hpp>
#include <dscore/cpp/plugin.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>

#include <dscore/cpp/python_float.hpp>

namespace dscore::csv_monitor {
namespace {

using sdk::errno_status;
using sdk::Error;

constexpr const char kParamsSchema[] = R"json({
  "output_path": {"type": "string", "default": "",
                  "doc": "folder holding the job folder; \"\" = the current directory"},
  "job_name": {"type": "string", "default": "DeepSpeedJobName",
               "doc": "the CSV files go to output_path/job_name"}
})json";

// Python's os.path.join(a, b) for two POSIX components.
std::string path_join(const std::string& a, const std::string& b) {
  if (!b.empty() && b[0] == '/') return b;
  if (a.empty() || a.back() == '/') return a + b;
  return a + "/" + b;
}

// A field as Python's csv.writer (QUOTE_MINIMAL) writes it.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

class CsvMonitor : public sdk::Instance {
 public:
  CsvMonitor(sdk::HostRef host, const sdk::Params& p) : Instance(host) {
    std::string output_path = p.string("output_path");
    std::string job_name = p.string("job_name");
    log_dir_ = path_join(output_path, job_name);
    std::error_code ec;
    std::filesystem::create_directories(log_dir_.empty() ? "." : log_dir_, ec);
    if (ec)
      throw Error(ec.value() == EACCES || ec.value() == EROFS ? DSCORE_PERMISSION_DENIED
                                                              : DSCORE_INVALID_ARGUMENT,
                  "cannot create the csv_monitor directory '" + log_dir_ +
                      "' (output_path + job_name): " + ec.message() +
                      "; set csv_monitor.output_path to a writable directory");
    if (::access(log_dir_.empty() ? "." : log_dir_.c_str(), W_OK | X_OK) != 0) {
      int err = errno;
      throw Error(errno_status(err), "the csv_monitor directory '" + log_dir_ +
                                         "' is not writable: " + std::strerror(err) +
                                         "; set csv_monitor.output_path to a writable directory");
    }
  }

  ~CsvMonitor() {
    for (auto& [name, file] : files_) std::fclose(file.handle);
  }

  // DeepSpeed closes each file after every event, so rows are visible at
  // once; the adapter flushes after every write_scalars() for the same effect.
  void write(const dscore_scalar_event& e, bool /*has_wall_time*/) {
    const std::string tag = e.tag != nullptr ? e.tag : "";
    std::string filename = tag;
    for (char& c : filename)
      if (c == '/' || c == ' ') c = '_';
    auto it = files_.find(filename);
    if (it == files_.end()) {
      std::string path = log_dir_ + "/" + filename + ".csv";
      std::FILE* f = std::fopen(path.c_str(), "a");
      if (f == nullptr) {
        int err = errno;
        throw Error(errno_status(err),
                    "cannot open '" + path + "' for append: " + std::strerror(err));
      }
      it = files_.emplace(filename, File{f, path}).first;
      size_t slash = tag.rfind('/');
      std::string header = slash == std::string::npos ? tag : tag.substr(slash + 1);
      put(it->second, "step," + csv_field(header) + "\r\n");
    }
    put(it->second, std::to_string(e.step) + "," + sdk::python_float_repr(e.value) + "\r\n");
    dirty_ = true;
  }

  void flush() {
    if (!dirty_) return;
    for (auto& [name, file] : files_)
      if (std::fflush(file.handle) != 0) fail(file, "flush");
    dirty_ = false;
  }

 private:
  struct File {
    std::FILE* handle;
    std::string path;
  };

  [[noreturn]] static void fail(const File& file, const char* what) {
    int err = errno;
    throw Error(errno_status(err),
                std::string("cannot ") + what + " '" + file.path + "': " + std::strerror(err));
  }
  static void put(const File& file, const std::string& line) {
    if (std::fwrite(line.data(), 1, line.size(), file.handle) != line.size()) fail(file, "write");
  }

  std::string log_dir_;
  std::map<std::string, File> files_;  // by sanitised file name, as DeepSpeed tracks headers
  bool dirty_ = false;
};

const dscore_plugin_descriptor kCsvMonitor = sdk::monitor_descriptor<CsvMonitor>(
    "csv_monitor", "0.1.0",
    "DeepSpeed's CSV monitor: one <tag>.csv file per tag under output_path/job_name",
    kParamsSchema);

}  // namespace
}  // namespace dscore::csv_monitor

DSCORE_PLUGIN_LIBRARY("dscore-csv-monitor", "0.1.0", "dscore", &dscore::csv_monitor::kCsvMonitor)
