# Packaging tests (tests/packaging/test_*.py), one CTest test per file, named
# "packaging: test_...". They check the man pages against --help, the completions in
# their shells, `cmake --install` and the .deb; see tests/packaging/README.md.
find_package(Python3 REQUIRED COMPONENTS Interpreter)

file(GLOB redlock_packaging_tests CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/tests/packaging/test_*.py)
foreach(test_file ${redlock_packaging_tests})
  get_filename_component(test_name ${test_file} NAME_WE)
  add_test(NAME "packaging: ${test_name}"
           COMMAND ${Python3_EXECUTABLE} runtests.py ${test_name}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/packaging)
  set_tests_properties("packaging: ${test_name}" PROPERTIES
    TIMEOUT 300
    # Skipped tests (a tool that cannot be installed) show as skipped, not passed.
    SKIP_RETURN_CODE 77
    ENVIRONMENT "REDLOCK_BIN=$<TARGET_FILE:redlock>;REDLOCK_SOURCE_DIR=${PROJECT_SOURCE_DIR};REDLOCK_BUILD_DIR=${PROJECT_BINARY_DIR};CMAKE_COMMAND=${CMAKE_COMMAND};CPACK_COMMAND=${CMAKE_CPACK_COMMAND};PYTHONDONTWRITEBYTECODE=1")
endforeach()
