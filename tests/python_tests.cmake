# import kiln, tested with pytest against the build (PYTHONPATH=build/python),
# one test per file so ctest runs them side by side.
foreach(suite tensor autograd training api)
  add_test(NAME python.${suite}
           COMMAND ${Python_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/tests/python/test_${suite}.py)
  set_tests_properties(python.${suite} PROPERTIES LABELS cpu TIMEOUT 300
                       ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python;KILN=$<TARGET_FILE:kiln_cli>;KILN_SOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}")
endforeach()

# pip install . in a fresh venv, then the same suite against the installed module.
add_test(NAME python.pip_install COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli/python_pip_install.sh)
set_tests_properties(python.pip_install PROPERTIES LABELS cpu TIMEOUT 1200 ENVIRONMENT "KILN=$<TARGET_FILE:kiln_cli>"
                     SKIP_REGULAR_EXPRESSION "SKIPPED: PyPI is not reachable")
