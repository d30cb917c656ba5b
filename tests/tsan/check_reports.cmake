# The tsan.clear_reports and tsan.reports tests (tests/CMakeLists.txt):
#   cmake -DDIR=<folder> -DCLEAR=ON -P check_reports.cmake  empties <folder>;
#   cmake -DDIR=<folder> -P check_reports.cmake  fails, printing them, if any
# process of the tsan-labelled tests wrote a ThreadSanitizer report there
# (TSAN_OPTIONS log_path=<folder>/report: one file per reporting process).
if(CLEAR)
  file(REMOVE_RECURSE "${DIR}")
  file(MAKE_DIRECTORY "${DIR}")
  return()
endif()
file(GLOB reports "${DIR}/report*")
if(reports)
  list(LENGTH reports count)
  foreach(report IN LISTS reports)
    file(READ "${report}" text)
    message("--- ${report}\n${text}")
  endforeach()
  message(FATAL_ERROR "ThreadSanitizer: ${count} process(es) reported (above). Fix the race in "
                      "dscore; only an uninstrumented third-party library may get a scoped entry "
                      "in tests/tsan/tsan.supp")
endif()
message(STATUS "ThreadSanitizer: no reports in ${DIR}")
