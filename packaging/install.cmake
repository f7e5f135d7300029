# Install layout and packaging (CPack DEB), included once at the end of the top-level
# CMakeLists.txt, after install(TARGETS redlock). `cmake --install` honours --prefix and
# DESTDIR; everything below is relative to the prefix.
#
#   bin/redlock
#   share/man/man1/redlock.1.gz, share/man/man5/redlock.toml.5.gz,
#   share/man/man5/redlock-cron.5.gz
#   share/doc/redlock/copyright, share/doc/redlock/changelog.gz
#   share/bash-completion/completions/redlock     (loaded on demand by bash-completion)
#   share/zsh/vendor-completions/_redlock         (on Debian's default zsh fpath)
#   share/fish/vendor_completions.d/redlock.fish  (fish's vendor directory)
#   share/doc/redlock/config.example.toml, share/doc/redlock/examples/

# Man pages and the changelog are installed gzip'd (Debian policy 12.3 and 12.7; lintian
# checks both), compressed at build time with -n so that the bytes do not depend on when.
find_program(REDLOCK_GZIP gzip REQUIRED)
mark_as_advanced(REDLOCK_GZIP)
set(redlock_gzipped)
foreach(pair "man/redlock.1|redlock.1.gz" "man/redlock.toml.5|redlock.toml.5.gz"
             "man/redlock-cron.5|redlock-cron.5.gz"
             "packaging/debian/changelog|changelog.gz")
  string(REPLACE "|" ";" pair "${pair}")
  list(GET pair 0 source)
  list(GET pair 1 target)
  add_custom_command(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/gz/${target}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/gz
    COMMAND ${REDLOCK_GZIP} -9nc ${PROJECT_SOURCE_DIR}/${source} > ${CMAKE_CURRENT_BINARY_DIR}/gz/${target}
    DEPENDS ${PROJECT_SOURCE_DIR}/${source} VERBATIM)
  list(APPEND redlock_gzipped ${CMAKE_CURRENT_BINARY_DIR}/gz/${target})
endforeach()
add_custom_target(gzipped_docs ALL DEPENDS ${redlock_gzipped})

install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gz/redlock.1.gz
        DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gz/redlock.toml.5.gz ${CMAKE_CURRENT_BINARY_DIR}/gz/redlock-cron.5.gz
        DESTINATION ${CMAKE_INSTALL_MANDIR}/man5)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gz/changelog.gz
              ${PROJECT_SOURCE_DIR}/packaging/debian/copyright
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

install(FILES ${PROJECT_SOURCE_DIR}/completions/redlock.bash
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME redlock)
install(FILES ${PROJECT_SOURCE_DIR}/completions/_redlock
        DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions)
install(FILES ${PROJECT_SOURCE_DIR}/completions/redlock.fish
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fish/vendor_completions.d)

# The example config is documentation, not a live config: installing it as
# /etc/redlock/config.toml would change behaviour for every user of the machine.
install(FILES ${PROJECT_SOURCE_DIR}/config.example.toml
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/packaging/examples/
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# --- Debian package: `cpack -G DEB` in the build directory -----------------------------
set(CPACK_PACKAGE_NAME redlock)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "redlock developers")
# Placeholder until the project has a real maintainer address.
set(CPACK_PACKAGE_CONTACT "redlock maintainers <maintainers@redlock.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # redlock_0.4.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# libmicrohttpd12 is loaded only by `redlock exporter` (dlopen: src/http/server.hpp).
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "redis-server, libmicrohttpd12")
# The long description under the summary line; CPack indents it for the control file.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
"redlock runs a command while holding a lock in Redis, so that a cron job, a
systemd timer or a CI step started on several machines runs at most once at a
time: flock(1) across hosts. The lease is renewed while the command runs, and
the command is stopped before the lease can expire if the lock is lost. With
several independent Redis servers it uses the Redlock algorithm. It also shows
who holds a lock, releases locks by hand, locks from shell scripts and checks
that the servers are fit for locking.")
# Depends: computed from the binary's shared libraries by dpkg-shlibdeps on Debian, so it
# follows the link mode (static libstdc++, header-only toml++). The explicit list (Debian
# 12 names) is the fallback where dpkg-shlibdeps is missing; keep it in step with how
# the binary links.
find_program(REDLOCK_DPKG_SHLIBDEPS dpkg-shlibdeps)
mark_as_advanced(REDLOCK_DPKG_SHLIBDEPS)
if(REDLOCK_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  set(redlock_depends "libc6 (>= 2.36)")
  if(NOT REDLOCK_STATIC_HIREDIS)
    list(APPEND redlock_depends "libhiredis0.14 (>= 0.14.1)")
  endif()
  if(NOT REDLOCK_STATIC_LIBSTDCXX OR REDLOCK_SANITIZE)
    list(APPEND redlock_depends "libstdc++6 (>= 12)" "libgcc-s1 (>= 3.0)")
  endif()
  get_target_property(redlock_core_links redlock_core LINK_LIBRARIES)
  if("tomlplusplus::tomlplusplus" IN_LIST redlock_core_links)
    list(APPEND redlock_depends "libtomlplusplus3 (>= 3.3.0)")
  endif()
  list(JOIN redlock_depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
endif()
# libssl3 (or libssl1.1) is loaded only for rediss:// servers (dlopen: src/redis/tls.hpp),
# so dpkg-shlibdeps cannot see it; without it everything but TLS works.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libssl3 | libssl1.1")

# `cpack --config CPackSourceConfig.cmake`: a source tarball without build trees.
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "\\\\.configure\\\\.log$" "__pycache__")

include(CPack)

# The release packages' metadata (scripts/release.sh): the same names, version and
# description as above; release.sh fills in what depends on the architecture.
if(REDLOCK_PORTABLE)
  string(REPLACE "\n" "\n " REDLOCK_DEB_DESCRIPTION " ${CPACK_DEBIAN_PACKAGE_DESCRIPTION}")
  set(REDLOCK_RPM_DESCRIPTION "${CPACK_DEBIAN_PACKAGE_DESCRIPTION}")
  configure_file(${CMAKE_CURRENT_LIST_DIR}/release/control.in release/control @ONLY)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/release/redlock.spec.in release/redlock.spec @ONLY)
endif()

if(REDLOCK_BUILD_TESTS)
  include(${CMAKE_CURRENT_LIST_DIR}/tests.cmake)
endif()
