# `cmake --install build --prefix P`: the library (Kiln::kiln), its headers
# under include/kiln, the kiln command, KilnConfig.cmake with its version
# file and exported targets, and kiln.pc for pkg-config.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS kiln EXPORT KilnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET kiln_cli)
  install(TARGETS kiln_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
# The library's headers: kiln/... and models/... (include/kiln/models).
foreach(layer kiln models)
  set(destination ${CMAKE_INSTALL_INCLUDEDIR}/kiln)
  if(layer STREQUAL "kiln")
    set(destination ${CMAKE_INSTALL_INCLUDEDIR})
  endif()
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${layer} DESTINATION ${destination}
          FILES_MATCHING PATTERN "*.h")
endforeach()

install(EXPORT KilnTargets NAMESPACE Kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
configure_package_config_file(cmake/KilnConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/KilnConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/KilnConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/KilnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/KilnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)

# pkg-config: the same library, its flags and what it links.
set(KILN_PC_LIBS "${OPENBLAS_LIBRARY} -lsentencepiece_train")
if(KILN_DNNL)
  string(APPEND KILN_PC_LIBS " ${DNNL_LIBRARY}")
endif()
if(KILN_HAVE_GLOO)
  string(APPEND KILN_PC_LIBS " ${GLOO_LIBRARY}")
endif()
if(MPI_C_FOUND)
  list(JOIN MPI_C_LIBRARIES " " KILN_PC_MPI)
  string(APPEND KILN_PC_LIBS " ${KILN_PC_MPI}")
endif()
if(KILN_WITH_CUDA)
  string(APPEND KILN_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -ldl")  # cuBLAS: loaded at run time
endif()
set(KILN_PC_REQUIRES "sentencepiece libpcre2-8 libutf8proc zlib")
configure_file(cmake/kiln.pc.in ${CMAKE_CURRENT_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
