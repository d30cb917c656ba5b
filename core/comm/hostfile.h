// DeepSpeed's hostfile and its resource filters, as `deepspeed --hostfile`
// reads them (launcher/runner.py): one "<host> slots=<N>" per line ('#'
// comments, blank lines), then --include / --exclude ("host1@host2:0,2":
// whole hosts, or slot indices on a host; not both flags), or --num_nodes
// (the first N hosts) and --num_gpus (the first N slots of each host). The
// result is the hosts in file order with the slot indices each keeps.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"

namespace dscore::comm {

struct HostSlots {
  std::string host;
  std::vector<int> slots;  // slot indices kept, ascending
};

// `text` is the file's contents, `path` names it in errors
// (INVALID_ARGUMENT: a bad line with its number, a host listed twice, no hosts).
Result<std::vector<HostSlots>> parse_hostfile(const std::string& text, const std::string& path);

struct HostFilter {
  std::string include, exclude;  // "" = not given
  int num_nodes = -1;            // -1 = all
  int num_slots = -1;            // --num_gpus / --slots; -1 = all
};

// The hosts and slots `filter` keeps of `pool`, with DeepSpeed's rules and
// errors (an unknown host or slot is named; include with exclude, and
// num_nodes/num_gpus with either, are refused).
Result<std::vector<HostSlots>> select_hosts(const std::vector<HostSlots>& pool,
                                            const HostFilter& filter);

}  // namespace dscore::comm
