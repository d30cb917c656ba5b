# cmake -DIN=<file.cu> -DOUT=<file.cc> -P host_source.cmake: the .cu source
# as C++ for the CPU emulation of CUDA (host_source_function.cmake).
include(${CMAKE_CURRENT_LIST_DIR}/host_source_function.cmake)
dscore_host_source("${IN}" "${OUT}")
