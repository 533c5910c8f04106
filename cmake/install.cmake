# `cmake --install`: the public headers, the runtime, compiler and code generator
# libraries, kilnc and vmrun, the Python module, and a CMake package, so that an
# app says `find_package(kiln)` and links `kiln::runtime` (load and run
# executables) or `kiln::compiler` (also compile Relay text).
#
# Layout under the prefix: include/kiln/*.h; lib/libkiln_{runtime,compiler,codegen}.so
# (the runtime opens the code generator beside itself); bin/{kilnc,vmrun};
# lib/cmake/kiln/; the Python package in KILN_PYTHON_INSTALL_DIR. Every binary
# finds the libraries relative to itself (RUNPATH $ORIGIN...), so the tree can be
# moved as a whole.
include(CMakePackageConfigHelpers)

set_target_properties(kiln_runtime kiln kiln_onnx kiln_codegen PROPERTIES INSTALL_RPATH "$ORIGIN")
file(RELATIVE_PATH _kiln_bin_to_lib "${CMAKE_INSTALL_FULL_BINDIR}" "${CMAKE_INSTALL_FULL_LIBDIR}")
set_target_properties(kilnc vmrun PROPERTIES INSTALL_RPATH "$ORIGIN/${_kiln_bin_to_lib}")

install(TARGETS kiln_runtime kiln kiln_onnx EXPORT kilnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Opened with dlopen, never linked: installed, not exported.
install(TARGETS kiln_codegen LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS kilnc vmrun RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Only include/kiln: the internal headers (base/, vm/, ...) are not part of the package.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kilnConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
