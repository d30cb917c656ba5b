// Pieces every instance kind shares (internal to core/plugin_host): the
// pre-create checks (right kind, library initialised), the create()
// arguments, the NULL-handle error and the extra-state byte sink.
#pragma once

#include <dscore/plugin.h>

#include <string>

#include "core/base/status.h"
#include "core/plugin_host/instances.h"

namespace dscore::plugin_host::detail {

// The plugin is of `kind` and its library's init() succeeded (run now if
// this is the library's first create()).
Status prepare_create(const PluginInfo& info, dscore_plugin_kind kind);

// The context's host, or a new one when it names none.
std::shared_ptr<HostContext> host_of(const InstanceContext& context);

dscore_create_args make_create_args(const ValidatedParams& params, const InstanceContext& context,
                                    HostContext& host);

// INTERNAL: create() returned OK but left the handle NULL.
Status null_handle_error(const PluginInfo& info);

// A dscore_write_fn appending to the std::string at ctx.
dscore_status append_to_string(void* ctx, const void* data, size_t size);

template <typename Vtable>
const Vtable* vtable_of(const PluginInfo& info) {
  return static_cast<const Vtable*>(info.descriptor->vtable);
}

}  // namespace dscore::plugin_host::detail
