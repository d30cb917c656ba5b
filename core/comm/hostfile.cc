// The hostfile and its filters (hostfile.h).
#include "core/comm/hostfile.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace dscore::comm {
namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

// "host1@host2:0,2" -> {host1: {} (whole), host2: {0, 2}}, in order.
Result<std::vector<std::pair<std::string, std::vector<int>>>> parse_filter(const std::string& text,
                                                                           const char* flag) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, '@')) {
    item = trim(item);
    if (item.empty()) return invalid_argument(std::string(flag) + " '" + text + "': an empty host");
    const size_t colon = item.find(':');
    std::pair<std::string, std::vector<int>> entry{item.substr(0, colon), {}};
    if (colon != std::string::npos) {
      std::stringstream slots(item.substr(colon + 1));
      std::string slot;
      while (std::getline(slots, slot, ',')) {
        slot = trim(slot);
        if (slot.empty() || slot.size() > 6 ||
            slot.find_first_not_of("0123456789") != std::string::npos)
          return invalid_argument(std::string(flag) + " '" + text + "': '" + slot +
                                  "' is not a slot number (host:0,1@host2)");
        entry.second.push_back(std::stoi(slot));
      }
      if (entry.second.empty())
        return invalid_argument(std::string(flag) + " '" + text + "': no slots after ':'");
    }
    out.push_back(std::move(entry));
  }
  return out;
}

const HostSlots* find_host(const std::vector<HostSlots>& pool, const std::string& host) {
  for (const HostSlots& h : pool)
    if (h.host == host) return &h;
  return nullptr;
}

}  // namespace

Result<std::vector<HostSlots>> parse_hostfile(const std::string& text, const std::string& path) {
  std::vector<HostSlots> hosts;
  std::stringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    std::stringstream words(line);
    std::string host, slots, extra;
    words >> host >> slots;
    const std::string where = path + ":" + std::to_string(number);
    if (slots.rfind("slots=", 0) != 0 || slots.size() == 6 || slots.size() > 12 ||
        slots.find_first_not_of("0123456789", 6) != std::string::npos || (words >> extra))
      return invalid_argument(where + ": '" + line +
                              "' is not a hostfile entry: write '<host> slots=<N>' (DeepSpeed's "
                              "hostfile format)");
    if (find_host(hosts, host) != nullptr)
      return invalid_argument(where + ": host " + host + " is listed twice");
    const int n = std::stoi(slots.substr(6));
    if (n < 1) return invalid_argument(where + ": host " + host + " has slots=0");
    HostSlots h{host, {}};
    for (int s = 0; s < n; ++s) h.slots.push_back(s);
    hosts.push_back(std::move(h));
  }
  if (hosts.empty())
    return invalid_argument(path + " lists no hosts: write one '<host> slots=<N>' per line");
  return hosts;
}

Result<std::vector<HostSlots>> select_hosts(const std::vector<HostSlots>& pool,
                                            const HostFilter& filter) {
  if (!filter.include.empty() && !filter.exclude.empty())
    return invalid_argument("--include and --exclude are mutually exclusive (as in DeepSpeed)");
  const bool counted = filter.num_nodes >= 0 || filter.num_slots >= 0;
  if (counted && (!filter.include.empty() || !filter.exclude.empty()))
    return invalid_argument(
        "--num_nodes and --num_gpus cannot be combined with --include/--exclude (as in "
        "DeepSpeed): choose hosts one way");
  std::vector<HostSlots> out;
  if (!filter.include.empty() || !filter.exclude.empty()) {
    const bool include = !filter.include.empty();
    DSCORE_ASSIGN_OR_RETURN(auto entries, parse_filter(include ? filter.include : filter.exclude,
                                                       include ? "--include" : "--exclude"));
    std::map<std::string, std::vector<int>> chosen;  // host -> slots named ({} = whole host)
    for (const auto& [host, slots] : entries) {
      const HostSlots* h = find_host(pool, host);
      if (h == nullptr) return invalid_argument("host " + host + " is not in the hostfile");
      for (int s : slots)
        if (std::find(h->slots.begin(), h->slots.end(), s) == h->slots.end())
          return invalid_argument("host " + host + " has no slot " + std::to_string(s) +
                                  " (it has " + std::to_string(h->slots.size()) + ")");
      chosen[host] = slots;
    }
    for (const HostSlots& h : pool) {
      auto it = chosen.find(h.host);
      HostSlots kept{h.host, {}};
      for (int s : h.slots) {
        const bool named = it != chosen.end() &&
                           (it->second.empty() ||
                            std::find(it->second.begin(), it->second.end(), s) != it->second.end());
        if (named == include) kept.slots.push_back(s);
      }
      if (!kept.slots.empty()) out.push_back(std::move(kept));
    }
    if (out.empty()) return invalid_argument("the host filter leaves no slots to run on");
    return out;
  }
  out = pool;
  if (filter.num_nodes >= 0) {
    if (filter.num_nodes < 1 || static_cast<size_t>(filter.num_nodes) > pool.size())
      return invalid_argument("--num_nodes " + std::to_string(filter.num_nodes) +
                              ": the hostfile lists " + std::to_string(pool.size()) + " host(s)");
    out.resize(static_cast<size_t>(filter.num_nodes));
  }
  if (filter.num_slots >= 0) {
    for (HostSlots& h : out) {
      if (filter.num_slots < 1 || static_cast<size_t>(filter.num_slots) > h.slots.size())
        return invalid_argument("--num_gpus " + std::to_string(filter.num_slots) + ": host " +
                                h.host + " has " + std::to_string(h.slots.size()) + " slot(s)");
      h.slots.resize(static_cast<size_t>(filter.num_slots));
    }
  }
  return out;
}

}  // namespace dscore::comm
