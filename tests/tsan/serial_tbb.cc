// TSan builds only (DSCORE_SANITIZE=thread): TBB runs every parallel
// algorithm on the calling thread. Debian's libtbb is not instrumented, so
// TSan sees no happens-before between a thread that hands work to TBB's
// workers and the workers themselves, and reports every parallel_for as a
// race (thousands per run), burying the races between dscore's own threads
// (training, comm stream) that the TSan build is for. With parallelism 1
// there are no hand-offs. Linked into the test executables, the multi-rank
// workers and the CLI of a TSan build (dscore_tsan_runtime in
// cmake/DscoreOptions.cmake); libtbb is shared, so the limit also holds for
// the plugins they load. Never part of a release build.
#include <oneapi/tbb/global_control.h>

namespace {

const oneapi::tbb::global_control serial_tbb(oneapi::tbb::global_control::max_allowed_parallelism,
                                             1);

}  // namespace
