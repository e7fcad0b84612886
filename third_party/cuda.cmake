# CUDA is optional: MT_CUDA=AUTO enables it when nvcc is found (also in
# /usr/local/cuda, which is not on PATH on a fresh machine).
set(MT_HAVE_CUDA OFF)
set(MT_HAVE_CUDNN OFF)
if(NOT MT_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(MT_NVCC nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
    if(MT_NVCC)
      set(CMAKE_CUDA_COMPILER ${MT_NVCC})
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    # CMake 3.25 predates nvcc's C++20 support; teach it the flag.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(MT_HAVE_CUDA ON)
    message(STATUS "mixtape: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  elseif(MT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MT_CUDA=ON but no CUDA compiler (nvcc) was found")
  else()
    message(STATUS "mixtape: nvcc not found, building the CPU backend only")
  endif()
endif()

# cuDNN is optional, and only looked for when CUDA is enabled: it is the
# second back end of the CUDA-path conv2d (kernels/conv/cudnn.cu,
# MT_CONV=auto|own|cudnn). MT_CUDNN=AUTO uses it when found (cuDNN 8 or newer:
# the legacy convolution API with CUDNN_FMA_MATH), ON requires it, OFF leaves
# it out. Without it the own kernels run and MT_WITH_CUDNN is 0.
#
# Sets MT_HAVE_CUDNN and, when ON, the imported target mt::cudnn. The
# toolkit directory is searched first (cuDNN is often installed there), then
# CUDNN_HOME / CUDNN_PATH.
set(MT_CUDNN "AUTO" CACHE STRING "Build the cuDNN conv2d back end: AUTO (when found), ON or OFF")
set_property(CACHE MT_CUDNN PROPERTY STRINGS AUTO ON OFF)
if(MT_HAVE_CUDA AND NOT MT_CUDNN STREQUAL "OFF")
  find_library(MT_CUDNN_LIBRARY NAMES cudnn
    HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 ENV CUDNN_HOME ENV CUDNN_PATH
    PATH_SUFFIXES lib64 lib)
  find_path(MT_CUDNN_INCLUDE_DIR cudnn.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include ENV CUDNN_HOME ENV CUDNN_PATH
    PATH_SUFFIXES include)
  set(MT_CUDNN_VERSION_MAJOR 0)
  if(MT_CUDNN_INCLUDE_DIR)
    # cuDNN 8+ keeps its version in cudnn_version.h, older ones in cudnn.h.
    foreach(header cudnn_version.h cudnn.h)
      if(EXISTS "${MT_CUDNN_INCLUDE_DIR}/${header}" AND MT_CUDNN_VERSION_MAJOR EQUAL 0)
        file(STRINGS "${MT_CUDNN_INCLUDE_DIR}/${header}" major_line REGEX "^#define CUDNN_MAJOR +[0-9]+")
        if(major_line)
          string(REGEX REPLACE "^#define CUDNN_MAJOR +([0-9]+).*" "\\1" MT_CUDNN_VERSION_MAJOR "${major_line}")
        endif()
      endif()
    endforeach()
  endif()
  if(MT_CUDNN_LIBRARY AND MT_CUDNN_INCLUDE_DIR AND MT_CUDNN_VERSION_MAJOR GREATER_EQUAL 8)
    add_library(mt::cudnn UNKNOWN IMPORTED)
    set_target_properties(mt::cudnn PROPERTIES
      IMPORTED_LOCATION "${MT_CUDNN_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${MT_CUDNN_INCLUDE_DIR}")
    set(MT_HAVE_CUDNN ON)
    message(STATUS "mixtape: cuDNN ${MT_CUDNN_VERSION_MAJOR} (${MT_CUDNN_LIBRARY}): conv2d can run cuDNN")
  elseif(MT_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "MT_CUDNN=ON but cuDNN 8 or newer was not found (library: ${MT_CUDNN_LIBRARY}, "
                        "header: ${MT_CUDNN_INCLUDE_DIR}); set CUDNN_HOME or CMAKE_PREFIX_PATH")
  else()
    message(STATUS "mixtape: cuDNN 8+ not found: conv2d runs own kernels only (MT_WITH_CUDNN=0)")
  endif()
elseif(MT_HAVE_CUDA)
  message(STATUS "mixtape: MT_CUDNN=OFF: conv2d runs own kernels only (MT_WITH_CUDNN=0)")
endif()

# NCCL: the back end of distributed/ for CUDA tensors (distributed/nccl_group.cpp).
# Only its header is needed here: libnccl.so.2 is opened at run time, so
# mixtape's binaries start on machines without it. MT_HAVE_NCCL and mt::nccl.
set(MT_HAVE_NCCL OFF)
if(MT_HAVE_CUDA)
  find_path(MT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  if(MT_NCCL_INCLUDE_DIR)
    add_library(mt::nccl INTERFACE IMPORTED)
    set_target_properties(mt::nccl PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${MT_NCCL_INCLUDE_DIR}")
    target_link_libraries(mt::nccl INTERFACE ${CMAKE_DL_LIBS})
    set(MT_HAVE_NCCL ON)
    message(STATUS "mixtape: NCCL header in ${MT_NCCL_INCLUDE_DIR}: CUDA tensors reduce over NCCL (libnccl.so.2 at run time)")
  else()
    message(STATUS "mixtape: nccl.h not found: data parallel CUDA training is unavailable")
  endif()
endif()
