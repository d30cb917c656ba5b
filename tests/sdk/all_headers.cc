// Every sdk C header compiled as C++ with -Wall -Wextra -pedantic -Werror:
// C++ plugins and the host include them too.
#include <dscore/comm.h>
#include <dscore/model.h>
#include <dscore/monitor.h>
#include <dscore/offload.h>
#include <dscore/optimizer.h>
#include <dscore/plugin.h>
#include <dscore/scheduler.h>

size_t dscore_all_headers_sizes_cxx() {
  return sizeof(dscore_plugin_library) + sizeof(dscore_optimizer_vtable) +
         sizeof(dscore_scheduler_vtable) + sizeof(dscore_offload_vtable) +
         sizeof(dscore_comm_vtable) + sizeof(dscore_monitor_vtable) + sizeof(dscore_model_vtable);
}
