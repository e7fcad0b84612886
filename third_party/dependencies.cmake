# Every dependency is a system package (tools/scripts/setup.sh installs them on Debian).
# This file only finds them; no third-party source is vendored.
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
# fmt and spdlog: Debian's compiled libraries (libfmt9, libspdlog1.10) by
# default. Header-only, each of mixtape's ~150 source files compiles fmt's
# and spdlog's implementation again: two thirds of an object file's code and
# a third of its compile time, so a first `make train` on 2 cores took
# minutes longer. MT_HEADER_ONLY_LOGGING=ON (tools/scripts/gpu_pack.sh)
# compiles them into the binary instead, which then needs no third-party
# shared library on a GPU machine that has none of these packages.
option(MT_HEADER_ONLY_LOGGING "Compile fmt and spdlog into each object instead of linking their libraries" OFF)
add_library(mt_fmt INTERFACE)
add_library(mt_spdlog INTERFACE)
if(NOT MT_HEADER_ONLY_LOGGING AND TARGET fmt::fmt AND TARGET spdlog::spdlog)
  target_link_libraries(mt_fmt INTERFACE fmt::fmt)
  target_link_libraries(mt_spdlog INTERFACE spdlog::spdlog mt_fmt)
else()
  target_link_libraries(mt_fmt INTERFACE fmt::fmt-header-only)
  get_target_property(MT_SPDLOG_INCLUDES spdlog::spdlog_header_only INTERFACE_INCLUDE_DIRECTORIES)
  target_include_directories(mt_spdlog INTERFACE ${MT_SPDLOG_INCLUDES})
  target_compile_definitions(mt_spdlog INTERFACE SPDLOG_FMT_EXTERNAL SPDLOG_HEADER_ONLY)
  target_link_libraries(mt_spdlog INTERFACE mt_fmt Threads::Threads)
endif()
set(Boost_USE_STATIC_LIBS ON)
# With MT_STATIC_RUNTIME the C++ runtime is linked in too (for carrying a
# build to a machine with an older libstdc++).
option(MT_STATIC_RUNTIME "Link libstdc++ and libgcc statically" OFF)
if(MT_STATIC_RUNTIME)
  add_link_options(-static-libstdc++ -static-libgcc)
endif()
find_package(nlohmann_json 3 REQUIRED)
find_package(ZLIB REQUIRED)
# PCRE2 (Debian's libpcre2-dev): GPT-2's pre-tokenizer regex, with Unicode
# properties and lookahead (tools/data/bpe.cpp).
find_library(MT_PCRE2_LIBRARY NAMES pcre2-8 REQUIRED)
find_path(MT_PCRE2_INCLUDE_DIR pcre2.h REQUIRED)
add_library(mt::pcre2 UNKNOWN IMPORTED)
set_target_properties(mt::pcre2 PROPERTIES IMPORTED_LOCATION "${MT_PCRE2_LIBRARY}"
                                           INTERFACE_INCLUDE_DIRECTORIES "${MT_PCRE2_INCLUDE_DIR}")
find_package(OpenMP REQUIRED)
find_package(CLI11 QUIET CONFIG)
if(NOT TARGET CLI11::CLI11)
  # Debian's libcli11-dev ships the header only in some versions.
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()

# MPI (OpenMPI from Debian's libopenmpi-dev): the launcher, bootstrap and CPU
# back end of distributed/. Optional, like CUDA: without it a run is a world
# of one. MT_MPI=AUTO uses it when found.
set(MT_MPI "AUTO" CACHE STRING "Build the MPI back end of distributed/: AUTO, ON or OFF")
set_property(CACHE MT_MPI PROPERTY STRINGS AUTO ON OFF)
set(MT_HAVE_MPI OFF)
set(MPI_CXX_SKIP_MPICXX ON)  # the C API only (the C++ bindings are deprecated)
if(NOT MT_MPI STREQUAL "OFF")
  if(MT_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS CXX)
  else()
    find_package(MPI QUIET COMPONENTS CXX)
  endif()
  if(MPI_CXX_FOUND)
    set(MT_HAVE_MPI ON)
    message(STATUS "mixtape: MPI back end (MPI ${MPI_CXX_VERSION})")
  else()
    message(STATUS "mixtape: no MPI found; distributed runs are a world of one")
  endif()
endif()

# mt_optional_library(NAME LIBRARY HEADER PACKAGE GIVES): a system library
# mixtape uses where found. MT_<NAME>=AUTO (the default) uses it when found,
# ON requires it, OFF leaves it out. Found by its library and header (not a
# CMake package); sets MT_HAVE_<NAME>, MT_<NAME>_LIBRARY, MT_<NAME>_INCLUDE_DIR
# and, when found, the imported target mt::<LIBRARY>.
macro(mt_optional_library name library header package gives)
  string(TOUPPER "${name}" _mt_upper)
  set(MT_${_mt_upper} "AUTO" CACHE STRING "Use ${name} (${gives}): AUTO (when found), ON or OFF")
  set_property(CACHE MT_${_mt_upper} PROPERTY STRINGS AUTO ON OFF)
  set(MT_HAVE_${_mt_upper} OFF)
  if(NOT MT_${_mt_upper} STREQUAL "OFF")
    find_library(MT_${_mt_upper}_LIBRARY NAMES ${library})
    find_path(MT_${_mt_upper}_INCLUDE_DIR ${header})
    if(MT_${_mt_upper}_LIBRARY AND MT_${_mt_upper}_INCLUDE_DIR)
      add_library(mt::${library} UNKNOWN IMPORTED)
      set_target_properties(mt::${library} PROPERTIES IMPORTED_LOCATION "${MT_${_mt_upper}_LIBRARY}"
                                                      INTERFACE_INCLUDE_DIRECTORIES "${MT_${_mt_upper}_INCLUDE_DIR}")
      set(MT_HAVE_${_mt_upper} ON)
      message(STATUS "mixtape: ${name} (${MT_${_mt_upper}_LIBRARY}): ${gives}")
    elseif(MT_${_mt_upper} STREQUAL "ON")
      message(FATAL_ERROR "MT_${_mt_upper}=ON but ${name} was not found (apt install ${package})")
    else()
      message(STATUS "mixtape: ${name} not found (apt install ${package}); without it: ${gives} not used")
    endif()
  endif()
endmacro()

# oneDNN (Debian's libdnnl-dev): the CPU back end of the f32 and bf16 GEMMs
# and convolutions (kernels/gemm/onednn.cpp, kernels/conv/onednn.cpp), the
# library PyTorch's CPU path uses; without it Eigen runs them. Found by its
# library and header because its CMake package drags in OpenCL for oneDNN's
# GPU runtime, which mixtape never uses.
mt_optional_library(oneDNN dnnl oneapi/dnnl/dnnl.hpp libdnnl-dev "f32/bf16 CPU GEMMs and convolutions run oneDNN")
# SLEEF (Debian's libsleef-dev): vectorised exp and erfc for the CPU kernels
# (kernels/common/vector_math.cpp), the library PyTorch's CPU kernels use for
# the same; without it they call libm's scalar functions.
mt_optional_library(SLEEF sleef sleef.h libsleef-dev "vectorised exp/erfc in the CPU kernels")
