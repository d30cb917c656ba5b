# dscore_host_source(<file.cu> <file.cc>): writes the .cu source as C++ for
# the CPU emulation of CUDA (include/cuda_emulation.h), when it changed.
# Launches `kernel<<<config>>>(args)` become
# `LaunchConfig(config) | [=](auto&&... a) { kernel(a...); } | arguments(args)`
# (cuda_emulation.h, PendingLaunch), dynamic shared memory
# `extern __shared__ ... name[];` becomes a pointer to the block's, and
# static `__shared__` variables become thread_local function statics (one
# block runs at a time on a thread). The output starts with the emulation's header and a
# #line directive, so compiler messages name the .cu file.
function(dscore_host_source in out)
  file(READ "${in}" source)
  string(REGEX REPLACE "extern __shared__[^;]*[ *]([A-Za-z_][A-Za-z_0-9]*)\\[\\];"
         "unsigned char* \\1 = ::dscore::cuda_emulation::dynamic_shared_memory();" source "${source}")
  string(REPLACE "__shared__ " "thread_local " source "${source}")
  string(REGEX REPLACE
         "([A-Za-z_][A-Za-z_0-9]*(<[A-Za-z_0-9, :()]*>)?)[ \t\r\n]*<<<(([^>]|>[^>]|>>[^>])*)>>>"
         "::dscore::cuda_emulation::LaunchConfig(\\3) | [=](auto&&... dscore_arguments) { \\1(dscore_arguments...); } | ::dscore::cuda_emulation::arguments"
         source "${source}")
  file(WRITE "${out}.tmp" "#include \"cuda_emulation.h\"\n#line 1 \"${in}\"\n${source}")
  file(COPY_FILE "${out}.tmp" "${out}" ONLY_IF_DIFFERENT)
  file(REMOVE "${out}.tmp")
endfunction()
