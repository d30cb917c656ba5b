// Library-table validation (validate.h). Field coverage is computed from
// the v1.0 struct layouts: a struct_size must reach the end of the last
// field that existed in ABI 1.0 (or, for a vtable, the last REQUIRED
// function); fields added by later minors are read only when covered.
#include "core/plugin_host/validate.h"

#include <dscore/comm.h>
#include <dscore/model.h>
#include <dscore/monitor.h>
#include <dscore/offload.h>
#include <dscore/optimizer.h>
#include <dscore/scheduler.h>

#include <cstddef>
#include <cstring>

#include "core/config/schema.h"
#include "core/plugin_host/library.h"

namespace dscore::plugin_host {
namespace {

#define DSCORE_FIELD_END(type, field) (offsetof(type, field) + sizeof(((type*)nullptr)->field))

constexpr size_t kLibraryV10Size = DSCORE_FIELD_END(dscore_plugin_library, plugins);
constexpr size_t kDescriptorV10Size = DSCORE_FIELD_END(dscore_plugin_descriptor, vtable);
// Far more than any real library; a larger count means a garbage table.
constexpr size_t kMaxPluginsPerLibrary = 4096;

struct RequiredFunction {
  const char* name;
  size_t offset;
  size_t end;
};

#define DSCORE_REQUIRED(type, field) \
  RequiredFunction { #field, offsetof(type, field), DSCORE_FIELD_END(type, field) }

struct KindSpec {
  dscore_plugin_kind kind;
  const char* vtable_type;
  std::vector<RequiredFunction> required;  // in declaration order
};

const std::vector<KindSpec>& kind_specs() {
  static const std::vector<KindSpec> specs = {
      {DSCORE_KIND_OPTIMIZER,
       "dscore_optimizer_vtable",
       {DSCORE_REQUIRED(dscore_optimizer_vtable, create),
        DSCORE_REQUIRED(dscore_optimizer_vtable, destroy),
        DSCORE_REQUIRED(dscore_optimizer_vtable, state_slots),
        DSCORE_REQUIRED(dscore_optimizer_vtable, step)}},
      {DSCORE_KIND_SCHEDULER,
       "dscore_scheduler_vtable",
       {DSCORE_REQUIRED(dscore_scheduler_vtable, create),
        DSCORE_REQUIRED(dscore_scheduler_vtable, destroy),
        DSCORE_REQUIRED(dscore_scheduler_vtable, point_at)}},
      {DSCORE_KIND_OFFLOAD,
       "dscore_offload_vtable",
       {DSCORE_REQUIRED(dscore_offload_vtable, create),
        DSCORE_REQUIRED(dscore_offload_vtable, destroy),
        DSCORE_REQUIRED(dscore_offload_vtable, alignment),
        DSCORE_REQUIRED(dscore_offload_vtable, open_file),
        DSCORE_REQUIRED(dscore_offload_vtable, close_file),
        DSCORE_REQUIRED(dscore_offload_vtable, sync_file),
        DSCORE_REQUIRED(dscore_offload_vtable, submit),
        DSCORE_REQUIRED(dscore_offload_vtable, wait)}},
      {DSCORE_KIND_COMM,
       "dscore_comm_vtable",
       {DSCORE_REQUIRED(dscore_comm_vtable, create), DSCORE_REQUIRED(dscore_comm_vtable, destroy),
        DSCORE_REQUIRED(dscore_comm_vtable, allreduce),
        DSCORE_REQUIRED(dscore_comm_vtable, reduce_scatter),
        DSCORE_REQUIRED(dscore_comm_vtable, allgather),
        DSCORE_REQUIRED(dscore_comm_vtable, broadcast), DSCORE_REQUIRED(dscore_comm_vtable, send),
        DSCORE_REQUIRED(dscore_comm_vtable, recv), DSCORE_REQUIRED(dscore_comm_vtable, barrier),
        DSCORE_REQUIRED(dscore_comm_vtable, reduce)}},
      {DSCORE_KIND_MONITOR,
       "dscore_monitor_vtable",
       {DSCORE_REQUIRED(dscore_monitor_vtable, create),
        DSCORE_REQUIRED(dscore_monitor_vtable, destroy),
        DSCORE_REQUIRED(dscore_monitor_vtable, write_scalars)}},
      {DSCORE_KIND_MODEL,
       "dscore_model_vtable",
       {DSCORE_REQUIRED(dscore_model_vtable, create), DSCORE_REQUIRED(dscore_model_vtable, destroy),
        DSCORE_REQUIRED(dscore_model_vtable, describe),
        DSCORE_REQUIRED(dscore_model_vtable, init_param),
        DSCORE_REQUIRED(dscore_model_vtable, forward_backward)}},
  };
  return specs;
}

const KindSpec* find_kind(dscore_plugin_kind kind) {
  for (const KindSpec& spec : kind_specs())
    if (spec.kind == kind) return &spec;
  return nullptr;
}

Status fail(std::string message) { return Status(DSCORE_FAILED_PRECONDITION, std::move(message)); }

std::string text_or(const char* s, const char* fallback) { return s != nullptr ? s : fallback; }

std::string version_text(uint32_t major, uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace

std::optional<std::string> abi_version_problem(const std::string& library, uint32_t abi_major,
                                               uint32_t abi_minor, uint32_t min_host_minor,
                                               uint32_t host_minor) {
  const std::string host = version_text(DSCORE_ABI_VERSION_MAJOR, host_minor);
  if (abi_major != DSCORE_ABI_VERSION_MAJOR) {
    return library + " was built against dscore plugin ABI major " + std::to_string(abi_major) +
           " (" + version_text(abi_major, abi_minor) + "), but this dscore speaks ABI major " +
           std::to_string(DSCORE_ABI_VERSION_MAJOR) + " (" + host +
           "): rebuild the plugin against this dscore's sdk";
  }
  if (min_host_minor > abi_minor) {
    return library + " declares min_host_minor " + std::to_string(min_host_minor) +
           " above its own ABI minor " + std::to_string(abi_minor) +
           ": its library table is inconsistent; rebuild it against the dscore sdk";
  }
  if (abi_minor > host_minor && min_host_minor > host_minor) {
    return library + " was built against plugin ABI " + version_text(abi_major, abi_minor) +
           " and needs a host of ABI " + version_text(abi_major, min_host_minor) +
           " or later; this dscore is ABI " + host + ": upgrade dscore to ABI " +
           version_text(abi_major, min_host_minor) +
           " or later or rebuild the plugin against sdk " + host;
  }
  return std::nullopt;
}

Result<ValidatedLibrary> validate_library(const std::shared_ptr<LoadedLibrary>& library,
                                          uint32_t host_minor) {
  const dscore_plugin_library* table = library->table();
  const std::string& path = library->path();
  if (table->struct_size < DSCORE_FIELD_END(dscore_plugin_library, min_host_minor)) {
    return fail(path + ": its dscore_plugin_library table has struct_size " +
                std::to_string(table->struct_size) +
                ", too small to hold even the ABI version; the library is corrupt or was not "
                "built against the dscore sdk");
  }
  // The version comes first: a table from another major may be laid out
  // differently, so nothing past the version fields is trusted before this.
  std::string who = "library '" + library->display_name() + "' (" + path + ")";
  if (auto problem = abi_version_problem(who, table->abi_major, table->abi_minor,
                                         table->min_host_minor, host_minor)) {
    return fail(*problem);
  }
  if (table->struct_size < kLibraryV10Size) {
    return fail(who + ": dscore_plugin_library.struct_size is " +
                std::to_string(table->struct_size) + " but ABI 1.0 needs at least " +
                std::to_string(kLibraryV10Size) +
                "; set struct_size = sizeof(dscore_plugin_library) and rebuild");
  }
  if (table->plugin_count > 0 && table->plugins == nullptr)
    return fail(who + ": plugin_count is " + std::to_string(table->plugin_count) +
                " but the plugins array is NULL");
  if (table->plugin_count > kMaxPluginsPerLibrary)
    return fail(who + ": plugin_count " + std::to_string(table->plugin_count) +
                " is implausible (the table is corrupt)");
  if (table->plugin_count == 0) return fail(who + ": holds no plugins (plugin_count is 0)");

  ValidatedLibrary out;
  for (size_t i = 0; i < table->plugin_count; ++i) {
    const dscore_plugin_descriptor* d = table->plugins[i];
    const std::string slot = who + ": plugins[" + std::to_string(i) + "]";
    if (d == nullptr) return fail(slot + " is NULL");
    if (d->struct_size < kDescriptorV10Size)
      return fail(slot + ": dscore_plugin_descriptor.struct_size is " +
                  std::to_string(d->struct_size) + " but ABI 1.0 needs at least " +
                  std::to_string(kDescriptorV10Size));
    if (d->name == nullptr || d->name[0] == '\0') return fail(slot + " has an empty name");
    const KindSpec* kind = find_kind(d->kind);
    if (kind == nullptr) {
      std::string what = slot + " ('" + d->name + "') has kind " + std::to_string(d->kind) +
                         ", which this dscore (ABI " +
                         version_text(DSCORE_ABI_VERSION_MAJOR, host_minor) + ") does not know";
      // A kind added by a newer minor is expected in a newer library: skip
      // that plugin, keep the rest. In a library of our minor it is garbage.
      if (table->abi_minor > host_minor) {
        out.notes.push_back(what + "; skipped (it needs a newer dscore)");
        continue;
      }
      return fail(what);
    }

    PluginInfo info;
    info.kind = d->kind;
    info.name = d->name;
    info.version = text_or(d->version, "");
    info.description = text_or(d->description, "");
    info.capabilities = d->capabilities;
    info.params_schema = text_or(d->params_schema, "");
    info.descriptor = d;
    info.library = library;
    info.library_path = path;
    info.library_name = library->display_name();
    info.library_version = text_or(table->version, "");
    info.vendor = text_or(table->vendor, "");
    info.abi_major = table->abi_major;
    info.abi_minor = table->abi_minor;
    info.min_host_minor = table->min_host_minor;
    const std::string plugin = info.display();

    if (d->vtable == nullptr) return fail(plugin + ": vtable is NULL");
    uint32_t vtable_size;
    std::memcpy(&vtable_size, d->vtable, sizeof vtable_size);  // every vtable starts with it
    const size_t needed = kind->required.back().end;
    if (vtable_size < needed)
      return fail(plugin + ": " + kind->vtable_type + ".struct_size is " +
                  std::to_string(vtable_size) + " but its required functions need at least " +
                  std::to_string(needed) + " bytes; set struct_size = sizeof(" + kind->vtable_type +
                  ")");
    for (const RequiredFunction& f : kind->required) {
      void (*fn)() = nullptr;
      std::memcpy(&fn, static_cast<const char*>(d->vtable) + f.offset, sizeof fn);
      if (fn == nullptr)
        return fail(plugin + ": required function '" + f.name + "' is NULL (" + kind->vtable_type +
                    "." + f.name + " must be set)");
    }
    if (!info.params_schema.empty()) {
      Result<config::ObjectSpec> spec = config::parse_params_schema(info.params_schema);
      if (!spec.ok()) return fail(plugin + ": invalid params_schema: " + spec.status().message());
    }
    out.plugins.push_back(std::move(info));
  }
  return out;
}

}  // namespace dscore::plugin_host
