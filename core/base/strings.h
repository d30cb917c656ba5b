// Small string utilities shared by core: case-insensitive matching (plugin
// names), "did you mean" suggestions (config keys, plugin names), joining
// and number formatting for messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dscore {

std::string to_lower(std::string_view s);
bool iequals(std::string_view a, std::string_view b);

// Levenshtein distance (insert, delete, substitute, and adjacent swap).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` if it is close enough to be a plausible
// typo (distance <= max(2, len/3), case-insensitive), else nullopt.
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

// "; did you mean \"x\"?" or "" — ready to append to a message.
std::string did_you_mean_suffix(std::string_view word, const std::vector<std::string>& candidates);

std::string join(const std::vector<std::string>& parts, std::string_view separator);

// Shortest text that parses back to the same double ("0.001", "1e-08", "5e+08").
std::string format_double(double v);

// 1536 -> "1.50 KiB".
std::string format_bytes(uint64_t bytes);

// `text` with every byte that is not part of a well-formed UTF-8 sequence
// replaced by U+FFFD (as Python's decode(errors="replace") per byte), so
// JSON written from it is valid.
std::string valid_utf8(std::string_view text);

}  // namespace dscore
