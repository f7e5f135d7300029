# Toolchain for release builds (scripts/release.sh): the host's g++ 12, native for x86_64
# or aarch64-linux-gnu-g++-12 for aarch64, against a Debian 11 sysroot made by
# packaging/release/sysroot.sh (glibc 2.31, hiredis 0.14.1, OpenSSL headers). Set
# REDLOCK_TARGET_ARCH (x86_64 or aarch64) and REDLOCK_SYSROOT on the cmake command line.
set(CMAKE_TRY_COMPILE_PLATFORM_VARIABLES REDLOCK_TARGET_ARCH REDLOCK_SYSROOT)
if(NOT REDLOCK_TARGET_ARCH MATCHES "^(x86_64|aarch64)$" OR NOT IS_DIRECTORY "${REDLOCK_SYSROOT}")
  message(FATAL_ERROR "release toolchain: set REDLOCK_TARGET_ARCH (x86_64 or aarch64) and "
                      "REDLOCK_SYSROOT (a directory made by packaging/release/sysroot.sh)")
endif()
set(triplet ${REDLOCK_TARGET_ARCH}-linux-gnu)

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR ${REDLOCK_TARGET_ARCH})
set(CMAKE_CXX_COMPILER ${triplet}-g++-12)
set(CMAKE_SYSROOT ${REDLOCK_SYSROOT})
set(CMAKE_FIND_ROOT_PATH ${REDLOCK_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
find_program(CMAKE_STRIP ${triplet}-strip REQUIRED)

# The compiler's own C++ and builtin headers, then the sysroot's C headers, and nothing
# else: a cross g++ also searches its build-time libc headers (/usr/aarch64-linux-gnu/
# include, glibc 2.36), which would come before the sysroot's and raise the symbols the
# binary binds. -nostdinc drops them all; the list is the compiler's own minus those.
execute_process(
  COMMAND ${CMAKE_CXX_COMPILER} --sysroot=/nonexistent -xc++ -E -v /dev/null
  ERROR_VARIABLE search OUTPUT_QUIET COMMAND_ERROR_IS_FATAL ANY)
string(REGEX REPLACE ".*#include <...> search starts here:\n(.*)End of search list.*" "\\1"
       search "${search}")
string(REPLACE "\n" ";" search "${search}")
set(include_flags "-nostdinc")
foreach(dir ${search})
  string(STRIP "${dir}" dir)
  if(dir MATCHES "/c\\+\\+/[0-9]+(/|$)|/gcc(-cross)?/${triplet}/[0-9]+/include$")
    get_filename_component(dir "${dir}" ABSOLUTE)
    string(APPEND include_flags " -isystem ${dir}")
  endif()
endforeach()
string(APPEND include_flags
       " -isystem ${REDLOCK_SYSROOT}/usr/include/${triplet} -isystem ${REDLOCK_SYSROOT}/usr/include")
set(CMAKE_CXX_FLAGS_INIT "${include_flags}")

# pkg-config (hiredis) reads the sysroot's .pc files only.
set(ENV{PKG_CONFIG_LIBDIR}
    "${REDLOCK_SYSROOT}/usr/lib/${triplet}/pkgconfig:${REDLOCK_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} ${REDLOCK_SYSROOT})

# The same for linking: g++ searches its own install's libc first (the host's for x86_64,
# /usr/aarch64-linux-gnu/lib for aarch64, both glibc 2.36). The sysroot's C start files
# (-B) and libraries (-L) come first; libstdc++.a and libgcc stay the compiler's.
set(CMAKE_EXE_LINKER_FLAGS_INIT
    "-B${REDLOCK_SYSROOT}/usr/lib/${triplet} -L${REDLOCK_SYSROOT}/usr/lib/${triplet} -L${REDLOCK_SYSROOT}/lib/${triplet}")
