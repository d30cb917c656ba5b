// A damaged plugin library caught before the dynamic loader maps it. dlopen
// maps a library's segments straight from the file; when the file is shorter
// than its headers say (an interrupted copy, a full disk), touching a mapped
// page past the end faults with SIGBUS and kills the process. check_elf_file
// reads the headers with plain reads and checks that everything the loader
// would map or read lies inside the file.
#pragma once

#include <string>

#include "core/base/status.h"

namespace dscore::plugin_host {

// OK for an intact 64-bit ELF file of this host's byte order, and for any
// file the loader itself refuses without mapping it (not ELF, the other ELF
// class or byte order, unreadable): its own message says more. Otherwise
// FAILED_PRECONDITION saying what does not fit, without the path, e.g.
//   "truncated ELF: section headers end at byte 1640912 but the file has
//    3000 bytes; reinstall or rebuild it (an interrupted copy or a full disk
//    leaves a file like this)"
// or UNAVAILABLE when reading the file fails part-way.
Status check_elf_file(const std::string& path);

}  // namespace dscore::plugin_host
