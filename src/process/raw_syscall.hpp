#pragma once
// System calls made by hand, for code that must not touch libc's state: the watchdog (a
// copy of redlock on a stack of its own, process/watchdog.cpp) and what redlock shares with
// it. A failed call returns -errno; errno itself is never written.

#include <cerrno>
#include <sys/syscall.h>
#include <unistd.h>

// Code that may run in the watchdog: not instrumented, since the sanitizers' runtimes keep
// state of their own.
#define REDLOCK_RAW_CODE [[gnu::no_sanitize("address", "undefined", "thread")]]

namespace redlock::process::raw {

#if defined(__x86_64__)
[[gnu::always_inline]] inline long sys(long n, long a = 0, long b = 0, long c = 0, long d = 0,
                                       long e = 0) {
    long ret = 0;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    return ret;
}
#elif defined(__aarch64__)
[[gnu::always_inline]] inline long sys(long n, long a = 0, long b = 0, long c = 0, long d = 0,
                                       long e = 0) {
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4) : "memory");
    return x0;
}
#else
inline long sys(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
    long ret = ::syscall(n, a, b, c, d, e);
    return ret < 0 ? -errno : ret;
}
#endif

template <class T>
long arg(T* p) {
    return reinterpret_cast<long>(p);
}

} // namespace redlock::process::raw
