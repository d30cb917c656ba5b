// The per-device cache of measured "aio" settings: `dscore io-bench PATH`
// writes the best settings it found for the device holding PATH, and "auto"
// in the config's "aio" section reads them back for the device of the run's
// nvme_path. One small JSON file per device under
// $XDG_CACHE_HOME/dscore/aio/ (default ~/.cache/dscore/aio/), named after
// the device number and the file system type, written atomically.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/base/status.h"
#include "core/config/json.h"
#include "core/config/training_config.h"

namespace dscore::config {

// A file system: the device number (st_dev) and its type, so a device
// number reused by another file system after a reboot does not match.
struct DeviceId {
  uint32_t major = 0;
  uint32_t minor = 0;
  std::string fs_type;            // "ext4", "xfs", ... or "0x<statfs magic>" when unnamed
  std::string text() const;       // "259:1 ext4"
  std::string file_name() const;  // "259-1-ext4.json"
};

// The device of `path`, or of its nearest existing parent folder (an
// nvme_path that the run will create). A relative path is taken from the
// current directory.
Result<DeviceId> device_of(const std::string& path);

// $XDG_CACHE_HOME/dscore/aio when XDG_CACHE_HOME is set and absolute, else
// $HOME/.cache/dscore/aio; "" when neither is known.
std::string aio_cache_dir();

// What io-bench found for a device: the best "aio" settings
// (docs/deepspeed-reference.md#aio), and
struct MeasuredAio : AioConfig {
  // What they reached through the Swapper, and the disk probe's limit, GB/s.
  double read_gbps = 0;
  double write_gbps = 0;
  double probe_read_gbps = 0;
  double probe_write_gbps = 0;
  std::string path;         // the folder measured
  std::string measured_at;  // UTC, "2026-11-24T05:01:02Z"
};

// The cache file's contents, and back. from_json's error says which key is
// missing or wrong.
json::Value aio_cache_json(const DeviceId& device, const MeasuredAio& measured);
Result<MeasuredAio> aio_cache_from_json(const json::Value& value, const DeviceId& device);

struct AioCacheLookup {
  std::string file;                     // the device's cache file ("" when no cache folder)
  std::optional<MeasuredAio> measured;  // set when the file exists and is valid
  std::string warning;                  // the file exists but was ignored: names it and why
};
AioCacheLookup read_aio_cache(const DeviceId& device);

// Writes the device's cache file (creating the folders): a temporary file in
// the same folder, fsync, rename over the old one, so a reader sees the old
// or the new file, never a part. Returns the file's path.
Result<std::string> write_aio_cache(const DeviceId& device, const MeasuredAio& measured);

}  // namespace dscore::config
