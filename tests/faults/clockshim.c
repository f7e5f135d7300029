/* An LD_PRELOAD shim that shifts a process's wall clock (CLOCK_REALTIME, gettimeofday,
 * time) by an offset that the fault harness changes while the process runs: a stepped
 * clock, as a bad NTP correction or a VM restored from a snapshot would give.
 *
 * Why not libfaketime: redis-server links jemalloc statically, and libfaketime cannot
 * initialise inside a jemalloc process (wolfcw/libfaketime#130: jemalloc calls
 * clock_gettime while libfaketime resolves its symbols, and hangs or fails). This shim
 * needs no symbol lookup and no allocation: the real clocks come from the syscalls, and
 * the offset (a signed 64-bit count of nanoseconds, native byte order) is read from the
 * file named by $CLOCKSHIM_FILE, mapped shared, so a write by the harness applies at once.
 * CLOCK_MONOTONIC and the other clocks are left alone. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t* offset_map;
static int map_state; /* 0 not tried, 1 mapped or given up */

static int64_t offset_ns(void) {
    if (!__atomic_load_n(&map_state, __ATOMIC_ACQUIRE)) {
        const char* path = getenv("CLOCKSHIM_FILE");
        if (path) {
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                void* m = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
                close(fd);
                if (m != MAP_FAILED)
                    offset_map = (volatile int64_t*)m;
            }
        }
        __atomic_store_n(&map_state, 1, __ATOMIC_RELEASE);
    }
    return offset_map ? *offset_map : 0;
}

static void shift(struct timespec* ts) {
    int64_t off = offset_ns();
    if (!off)
        return;
    int64_t ns = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + off;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000LL;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clock, struct timespec* ts) {
    long r = syscall(SYS_clock_gettime, clock, ts);
    if (r == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
        shift(ts);
    return (int)r;
}

int gettimeofday(struct timeval* restrict tv, void* restrict tz) {
    struct timespec ts;
    if (syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts) != 0)
        return -1;
    shift(&ts);
    if (tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    if (tz)
        ((struct timezone*)tz)->tz_minuteswest = ((struct timezone*)tz)->tz_dsttime = 0;
    return 0;
}

time_t time(time_t* out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
