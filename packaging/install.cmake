# `cmake --install <build> --prefix <dir>` puts mixtape where another CMake
# project finds it:
#
#   <prefix>/include/mixtape/   mixtape.h and the layers' headers (core/, nn/, ...)
#   <prefix>/lib/               one static library per layer, the simulator
#   <prefix>/lib/cmake/mixtape/ mixtapeConfig.cmake, the exported targets
#
#   find_package(mixtape REQUIRED)                     # or COMPONENTS CUDA cuDNN MPI NCCL
#   target_link_libraries(app PRIVATE mixtape::mixtape)  # mixtape::tools: the trainer and datasets
#
# The components are the optional back ends this build was made with; asking
# for one it lacks fails at find_package, not at the first kernel launch.
include(CMakePackageConfigHelpers)

# Layer targets keep their names in this tree (mt_core, ...); users see mixtape::core, ...
set(MT_EXPORTED_TARGETS
    mt_settings:settings mt_fmt:fmt mt_spdlog:spdlog mixtape_sim:sim mt_core:core mt_kernels:kernels
    mt_autograd:autograd mt_autograd_tensor_methods:tensor_methods mt_nn:nn
    mt_optim:optim mt_amp:amp mt_distributed:distributed mt_models:models mt_library_link:library_link
    mixtape:mixtape mt_tools_data:tools_data mt_tools_train:tools_train mixtape_tools:tools)
set(MT_INSTALL_TARGETS "")
foreach(pair IN LISTS MT_EXPORTED_TARGETS)
  string(REPLACE ":" ";" pair "${pair}")
  list(GET pair 0 target)
  list(GET pair 1 exported)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${exported})
  list(APPEND MT_INSTALL_TARGETS ${target})
endforeach()
target_include_directories(mixtape_tools INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/mixtape>)

install(TARGETS ${MT_INSTALL_TARGETS} EXPORT mixtapeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mixtape)
install(FILES mixtape.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mixtape)
# Every header of the library's layers, in the tree's layout (the headers
# include each other as "core/tensor.h", ...).
install(DIRECTORY runtime core kernels amp autograd nn optim distributed models tools
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mixtape
        FILES_MATCHING PATTERN "*.h")

set(MT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mixtape)
install(EXPORT mixtapeTargets NAMESPACE mixtape:: DESTINATION ${MT_INSTALL_CMAKEDIR})
# What the config file needs to know of this build (recorded, not searched
# for again: a cuDNN other than the one these libraries were built against
# would be a different ABI).
set(MT_PACKAGE_CUDNN_LIBRARY "")
set(MT_PACKAGE_CUDNN_INCLUDE_DIR "")
if(MT_HAVE_CUDNN)
  set(MT_PACKAGE_CUDNN_LIBRARY "${MT_CUDNN_LIBRARY}")
  set(MT_PACKAGE_CUDNN_INCLUDE_DIR "${MT_CUDNN_INCLUDE_DIR}")
endif()
set(MT_PACKAGE_NCCL_INCLUDE_DIR "")
if(MT_HAVE_NCCL)
  set(MT_PACKAGE_NCCL_INCLUDE_DIR "${MT_NCCL_INCLUDE_DIR}")
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/mixtapeConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/packaging/mixtapeConfig.cmake
                              INSTALL_DESTINATION ${MT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/packaging/mixtapeConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/packaging/mixtapeConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/packaging/mixtapeConfigVersion.cmake
        DESTINATION ${MT_INSTALL_CMAKEDIR})
