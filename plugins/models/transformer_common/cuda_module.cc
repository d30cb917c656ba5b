// Finding and loading a decoder model's CUDA module (cuda_module.h), and
// the errors that say which file failed, why (dlerror) and what to do.
#include "cuda_module.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <map>
#include <mutex>
#include <string>

namespace dscore::transformer {
namespace {

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// What to do about a module that did not load, from dlerror()'s text.
std::string fix_for(const std::string& path, const std::string& why) {
  if (!file_exists(path))
    return "the module is missing from this install: it is built beside the plugin when CUDA "
           "is enabled (DSCORE_WITH_CUDA); install the plugin together with its cuda/ folder, "
           "or set \"device\": \"cpu\"";
  if (why.find("libcublas") != std::string::npos)
    return "cuBLAS is not on the library path: add the folder holding it (the CUDA toolkit's "
           "lib64, or PyTorch's site-packages nvidia/cublas/lib) to LD_LIBRARY_PATH, or set "
           "\"device\": \"cpu\"";
  return "`ldd " + path +
         "` shows which library is not found: add its folder to LD_LIBRARY_PATH, or set "
         "\"device\": \"cpu\"";
}

}  // namespace

std::string cuda_module_path(const char* file_name) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cuda_module_path), &info) == 0 ||
      info.dli_fname == nullptr)
    throw sdk::Error(DSCORE_INTERNAL, "dladdr found no shared object holding this code");
  const std::string self = info.dli_fname;
  const size_t slash = self.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : self.substr(0, slash);
  return folder + "/cuda/" + file_name;
}

CudaComputeFactory load_cuda_module(const char* model, const std::string& path,
                                    const char* symbol) {
  static std::mutex mutex;
  static std::map<std::string, void*> loaded;  // path -> handle, never closed
  std::lock_guard<std::mutex> lock(mutex);
  void*& handle = loaded[path];
  if (handle == nullptr) {
    dlerror();
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* text = dlerror();
      const std::string why = text != nullptr ? text : "unknown dlopen error";
      loaded.erase(path);
      throw sdk::Error(DSCORE_UNAVAILABLE,
                       std::string(model) + ": \"device\": \"cuda\" needs the CUDA module " + path +
                           ", which did not load: " + why + "; " + fix_for(path, why));
    }
  }
  dlerror();
  void* factory = dlsym(handle, symbol);
  if (factory == nullptr) {
    const char* text = dlerror();
    throw sdk::Error(DSCORE_UNAVAILABLE,
                     std::string(model) + ": the CUDA module " + path + " has no " + symbol +
                         (text != nullptr ? std::string(" (") + text + ")" : std::string()) +
                         ": it is not this plugin's module; install the plugin together with "
                         "its cuda/ folder from one build, or set \"device\": \"cpu\"");
  }
  return reinterpret_cast<CudaComputeFactory>(factory);
}

std::unique_ptr<Compute> call_cuda_module(CudaComputeFactory factory,
                                          const CudaModuleRequest& request) {
  char error[4096] = "";
  Compute* compute = nullptr;
  const dscore_status status = factory(&request, &compute, error, sizeof error);
  if (status != DSCORE_OK) throw sdk::Error(status, error);
  if (compute == nullptr)
    throw sdk::Error(DSCORE_INTERNAL, "the CUDA module's factory returned no compute");
  return std::unique_ptr<Compute>(compute);
}

}  // namespace dscore::transformer
