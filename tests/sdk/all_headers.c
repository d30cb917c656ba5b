/* Every sdk header, included together in one C11 translation unit compiled
 * with -Wall -Wextra -pedantic -Werror: the ABI is plain C and must stay so. */
#include <dscore/comm.h>
#include <dscore/model.h>
#include <dscore/monitor.h>
#include <dscore/offload.h>
#include <dscore/optimizer.h>
#include <dscore/plugin.h>
#include <dscore/scheduler.h>

/* Each header again, alone first in its own order, is covered by the
 * include guards; referencing one type per header keeps the unit non-empty. */
size_t dscore_all_headers_sizes(void) {
  return sizeof(dscore_plugin_library) + sizeof(dscore_optimizer_vtable) +
         sizeof(dscore_scheduler_vtable) + sizeof(dscore_offload_vtable) +
         sizeof(dscore_comm_vtable) + sizeof(dscore_monitor_vtable) + sizeof(dscore_model_vtable);
}
