# Use ccache when it is installed: CUDA and Eigen builds on a 2-core machine are slow.
find_program(MT_CCACHE ccache)
if(MT_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${MT_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${MT_CCACHE})
endif()
