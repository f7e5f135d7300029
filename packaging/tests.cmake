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
    # scripts/test.sh runs them once, with the -Werror build: they test the docs and the
    # packages, which a sanitizer has nothing to say about.
    LABELS packaging
    ENVIRONMENT "REDLOCK_BIN=$<TARGET_FILE:redlock>;REDLOCK_SOURCE_DIR=${PROJECT_SOURCE_DIR};REDLOCK_BUILD_DIR=${PROJECT_BINARY_DIR};CMAKE_COMMAND=${CMAKE_COMMAND};CPACK_COMMAND=${CMAKE_CPACK_COMMAND};PYTHONDONTWRITEBYTECODE=1")
endforeach()

# Release artifacts (CTest label `release`; scripts/test.sh runs them in a stage of their
# own, and leaves them out of the other ctest runs). The fixture `release: build` runs
# scripts/release.sh into the build tree; the tests check its artifacts: tests/packaging/
# release_*.py and test_deb.ReleaseDebianPackages. Sysroots and debootstrapped Debian
# roots are cached in release-cache/ of the build tree (a clean machine fetches them).
set(redlock_release_dir ${PROJECT_BINARY_DIR}/release-test)
set(redlock_release_env
  "REDLOCK_BIN=$<TARGET_FILE:redlock>;REDLOCK_SOURCE_DIR=${PROJECT_SOURCE_DIR};REDLOCK_BUILD_DIR=${PROJECT_BINARY_DIR};CMAKE_COMMAND=${CMAKE_COMMAND};REDLOCK_RELEASE_DIST=${redlock_release_dir}/dist;REDLOCK_RELEASE_CACHE=${PROJECT_BINARY_DIR}/release-cache;PYTHONDONTWRITEBYTECODE=1")
add_test(NAME "release: build"
         COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/release.sh --dist ${redlock_release_dir}/dist
                 --work ${redlock_release_dir}/work --cache ${PROJECT_BINARY_DIR}/release-cache)
set_tests_properties("release: build" PROPERTIES
  FIXTURES_SETUP redlock_release LABELS release TIMEOUT 2400)
# debootstrap is mostly waiting for the network: it runs beside the build.
add_test(NAME "release: roots" COMMAND ${Python3_EXECUTABLE} runtests.py release_roots
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/packaging)
set_tests_properties("release: roots" PROPERTIES
  FIXTURES_SETUP redlock_roots LABELS release TIMEOUT 2400 SKIP_RETURN_CODE 77
  ENVIRONMENT "${redlock_release_env}")
foreach(pair "artifacts|release_artifacts" "deb|test_deb.ReleaseDebianPackages"
             "portability|release_portability" "reproducible|release_reproducible")
  string(REPLACE "|" ";" pair "${pair}")
  list(GET pair 0 name)
  list(GET pair 1 module)
  add_test(NAME "release: ${name}"
           COMMAND ${Python3_EXECUTABLE} runtests.py ${module}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/packaging)
  set(fixtures redlock_release)
  if(name STREQUAL "portability")
    list(APPEND fixtures redlock_roots)
  endif()
  set_tests_properties("release: ${name}" PROPERTIES
    FIXTURES_REQUIRED "${fixtures}" LABELS release TIMEOUT 2400 SKIP_RETURN_CODE 77
    ENVIRONMENT "${redlock_release_env}")
endforeach()
