# kiln._C, the extension module of `import kiln` (pybind11, python/src), with
# the package's Python files (python/kiln) copied beside it, so that
# PYTHONPATH=build/python imports the build. `pip install .` builds the same
# through scikit-build-core (pyproject.toml), which sets SKBUILD.
if(NOT SKBUILD AND NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
  # Debian's Python, whose numpy and PyTorch the tests compare with; a venv
  # gets its own module from `pip install .`.
  set(Python_EXECUTABLE /usr/bin/python3)
endif()
set(PYBIND11_FINDPYTHON ON)
find_package(Python 3.9 COMPONENTS Interpreter Development.Module REQUIRED)
find_package(pybind11 2.10 CONFIG REQUIRED)
find_path(DLPACK_INCLUDE_DIR dlpack/dlpack.h)
if(NOT DLPACK_INCLUDE_DIR)
  message(FATAL_ERROR "dlpack/dlpack.h not found: sudo apt-get install libdlpack-dev")
endif()

# The static libraries the module links must be position-independent, as libkiln is.
set_target_properties(kiln_recipes kiln_plan PROPERTIES POSITION_INDEPENDENT_CODE ON)
file(GLOB KILN_PYTHON_SOURCES CONFIGURE_DEPENDS python/src/*.cpp)
# NO_EXTRAS: no link-time optimisation, which would only slow the build.
pybind11_add_module(kiln_python MODULE NO_EXTRAS ${KILN_PYTHON_SOURCES} apps/cli/train_command.cpp)
set_target_properties(kiln_python PROPERTIES OUTPUT_NAME _C LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python/kiln)
target_link_libraries(kiln_python PRIVATE kiln_plan kiln_recipes CLI11::CLI11)
target_include_directories(kiln_python PRIVATE ${DLPACK_INCLUDE_DIR})
# The bindings only call into the library, whose kernels keep -O3: optimised
# for size they compile in ~30% less time (api.cpp 44 -> 30 s on 2 cores),
# and `pip install .` compiles them every time (its own pybind11, out of
# ccache's reach).
target_compile_options(kiln_python PRIVATE -Os)

file(GLOB_RECURSE KILN_PYTHON_FILES CONFIGURE_DEPENDS RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}/python python/kiln/*.py)
foreach(file ${KILN_PYTHON_FILES})
  configure_file(python/${file} ${CMAKE_BINARY_DIR}/python/${file} COPYONLY)
endforeach()

if(SKBUILD)
  install(TARGETS kiln_python LIBRARY DESTINATION kiln)
endif()
