// The host services table (dscore_host_api of sdk/include/dscore/plugin.h):
// one immutable table handed to every library's init(). Each function finds
// its state through the context argument (host_context.h): logging goes to
// core/base/logging with the plugin's name, memory to the context's ledger,
// errors to the context's slot for the calling thread, the communicator to
// whatever the context's engine installed, the key-value store to the
// context's store. A NULL context reaches no engine (see plugin.h).
#pragma once

#include <dscore/plugin.h>

#include "core/plugin_host/host_context.h"

namespace dscore::plugin_host {

// The table. Valid for the life of the process.
const dscore_host_api* host_api();

}  // namespace dscore::plugin_host
