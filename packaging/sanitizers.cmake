# Sanitizer and fuzzing builds (the `sanitize` preset, `make sanitize`).
#
#   MT_SANITIZE=address,undefined  every C++ object and program built with
#                                  ASan + UBSan; any report ends the program
#   MT_FUZZ=ON                     clang's coverage for libFuzzer on every
#                                  object, and the fuzz targets of tests/fuzz
#
# The simulator's race checker normally compiles simulator-built kernels with
# ThreadSanitizer's instrumentation (runtime/sim/CMakeLists.txt), which cannot
# share an object with ASan. Under MT_SANITIZE those kernels get ASan
# instead, so an out-of-bounds access in kernel code is reported, and the
# race check (tests tagged [racecheck]) runs in the default build only.
set(MT_SANITIZE "" CACHE STRING "Sanitizers for all C++ code, e.g. address,undefined (empty: none)")
option(MT_FUZZ "Build the libFuzzer targets of tests/fuzz (needs clang)" OFF)

if(MT_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${MT_SANITIZE}> $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${MT_SANITIZE})
  set(MT_SIM_RACECHECK_INSTRUMENT OFF CACHE BOOL "" FORCE)
  message(STATUS "mixtape: sanitizers ${MT_SANITIZE} (the simulator's race check is left to the default build)")
endif()

if(MT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MT_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
  message(STATUS "mixtape: libFuzzer targets (tests/fuzz)")
endif()
