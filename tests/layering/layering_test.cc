// The layering rules of docs/architecture.md#layers, checked mechanically over the
// source tree:
//  - sdk/include/dscore/*.h include only <stdint.h>, <stddef.h> and each other;
//  - core/ never includes anything under plugins/ (or tests/);
//  - a plugin includes only sdk/ headers, its own files and system/third-party
//    headers, never core/;
//  - a core library includes another core library's headers only if it
//    declared that dependency (the manifest CMake writes from
//    dscore_core_library(... DEPS ...)).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kSource = DSCORE_SOURCE_DIR;

struct Include {
  std::string target;
  bool angle;
  int line;
};

std::vector<Include> includes_of(const fs::path& file) {
  static const std::regex re(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  std::vector<Include> out;
  std::ifstream in(file);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::smatch m;
    if (std::regex_search(line, m, re)) out.push_back({m[2].str(), m[1].str() == "<", n});
  }
  return out;
}

std::vector<fs::path> sources_under(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".h" || ext == ".hpp" || ext == ".c" || ext == ".cc" ||
                                ext == ".cpp" || ext == ".cu" || ext == ".cuh"))
      out.push_back(e.path());
  }
  return out;
}

std::string where(const fs::path& file, int line) {
  return fs::relative(file, kSource).string() + ":" + std::to_string(line);
}

TEST(Layering, SdkHeadersIncludeOnlyStdintStddefAndEachOther) {
  const fs::path dir = kSource / "sdk/include/dscore";
  std::set<std::string> sdk_headers;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".h") sdk_headers.insert(e.path().filename().string());
  ASSERT_FALSE(sdk_headers.empty());
  for (const std::string& h : sdk_headers) {
    for (const Include& inc : includes_of(dir / h)) {
      const bool std_ok = inc.angle && (inc.target == "stdint.h" || inc.target == "stddef.h");
      const bool sibling =
          sdk_headers.count(inc.target) ||
          (inc.target.rfind("dscore/", 0) == 0 && sdk_headers.count(inc.target.substr(7)));
      EXPECT_TRUE(std_ok || sibling)
          << where(dir / h, inc.line) << " includes " << inc.target
          << ": sdk headers may include only <stdint.h>, <stddef.h> and each other";
    }
  }
}

TEST(Layering, CoreNeverIncludesPluginsOrTests) {
  for (const fs::path& f : sources_under(kSource / "core"))
    for (const Include& inc : includes_of(f))
      EXPECT_TRUE(inc.target.rfind("plugins/", 0) != 0 && inc.target.rfind("tests/", 0) != 0)
          << where(f, inc.line) << " includes " << inc.target
          << ": core never depends on plugins or tests";
}

TEST(Layering, PluginsIncludeOnlySdkTheirOwnFilesAndSystemHeaders) {
  for (const fs::path& f : sources_under(kSource / "plugins")) {
    for (const Include& inc : includes_of(f)) {
      const bool core_or_tests =
          inc.target.rfind("core/", 0) == 0 || inc.target.rfind("tests/", 0) == 0;
      EXPECT_FALSE(core_or_tests) << where(f, inc.line) << " includes " << inc.target
                                  << ": a plugin includes only sdk/ (docs/architecture.md#layers)";
      if (!inc.angle) {
        // A quoted include must be a file of the plugin's own folder.
        const fs::path resolved = fs::weakly_canonical(f.parent_path() / inc.target);
        const fs::path plugins_root = fs::canonical(kSource / "plugins");
        const std::string rel = fs::relative(resolved, plugins_root).string();
        const std::string own = fs::relative(f, plugins_root).string();
        // plugins/<kind>/<name>/...: the first two components must match.
        auto head = [](const std::string& p) {
          auto first = p.find('/');
          auto second = p.find('/', first + 1);
          return p.substr(0, second);
        };
        // Or of a shared plugin-side folder of the same kind,
        // plugins/<kind>/<name>_common/ (itself held to these rules).
        auto kind = [](const std::string& p) { return p.substr(0, p.find('/')); };
        const std::string folder = head(rel).substr(head(rel).find('/') + 1);
        const bool shared = kind(rel) == kind(own) && folder.size() > 7 &&
                            folder.compare(folder.size() - 7, 7, "_common") == 0;
        EXPECT_TRUE(fs::exists(resolved) && (head(rel) == head(own) || shared))
            << where(f, inc.line) << " includes \"" << inc.target
            << "\", which is not a file of this plugin's folder nor of a plugins/<kind>/*_common/ "
               "folder";
      }
    }
  }
}

TEST(Layering, CoreLibrariesIncludeOnlyDeclaredDependencies) {
  std::ifstream manifest(fs::path(DSCORE_BUILD_DIR) / "layering_manifest.txt");
  ASSERT_TRUE(manifest.good()) << "layering_manifest.txt missing from the build tree";
  std::map<std::string, std::vector<std::string>> deps;
  std::string line;
  while (std::getline(manifest, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::vector<std::string>& d = deps[line.substr(0, colon)];
    std::stringstream list(line.substr(colon + 1));
    std::string dep;
    while (std::getline(list, dep, ','))
      if (!dep.empty()) d.push_back(dep);
  }
  ASSERT_FALSE(deps.empty());
  auto closure = [&](const std::string& lib) {
    std::set<std::string> seen = {lib};
    std::vector<std::string> todo = {lib};
    while (!todo.empty()) {
      std::string cur = todo.back();
      todo.pop_back();
      for (const std::string& d : deps[cur])
        if (seen.insert(d).second) todo.push_back(d);
    }
    return seen;
  };
  for (const auto& [lib, _] : deps) {
    const std::set<std::string> allowed = closure(lib);
    for (const fs::path& f : sources_under(kSource / "core" / lib)) {
      for (const Include& inc : includes_of(f)) {
        if (inc.target.rfind("core/", 0) != 0) continue;
        const std::string other = inc.target.substr(5, inc.target.find('/', 5) - 5);
        EXPECT_TRUE(allowed.count(other))
            << where(f, inc.line) << " includes " << inc.target << " but core/" << lib
            << " does not declare a dependency on " << other << " (dscore_core_library DEPS)";
      }
    }
  }
  // Every core folder with sources is a declared library.
  for (const auto& e : fs::directory_iterator(kSource / "core")) {
    if (e.is_directory() && !sources_under(e.path()).empty()) {
      EXPECT_TRUE(deps.count(e.path().filename().string()))
          << "core/" << e.path().filename().string() << " is not declared with dscore_core_library";
    }
  }
}

}  // namespace
