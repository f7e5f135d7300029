#pragma once
// Force-included (-include) in every file of a release build (REDLOCK_PORTABLE), which
// compiles against Debian 11's glibc 2.31 headers: declarations of the functions redlock
// calls that glibc added later, defined in glibc_compat.cpp without raising the glibc
// version the binary needs.

#include <sys/syscall.h>

// glibc 2.31's <sys/syscall.h> predates close_range (Linux 5.9); the kernel headers know it.
#ifndef SYS_close_range
#define SYS_close_range __NR_close_range
#endif

#ifdef __cplusplus
extern "C" {
#endif

// glibc 2.34; the kernel's close_range(2) since Linux 5.9 (ENOSYS before, as glibc's).
int close_range(unsigned int first, unsigned int last, int flags) noexcept;

#ifdef __cplusplus
}
#endif
