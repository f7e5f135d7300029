#include "process/watchdog.hpp"

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "util/format.hpp"

namespace redlock::process {

namespace {

// The watchdog shares redlock's memory (CLONE_VM): starting it copies no page tables and
// leaves redlock's pages writable, where a fork made every page redlock then wrote fault
// and be copied (a sixth of the time of `run -- true`). Sharing means the watchdog must
// never write what redlock uses: not errno (glibc's system-call wrappers set it, in the
// thread-local storage the two processes share), not the heap (no malloc), no lock. So the
// watchdog makes its system calls itself, keeps everything in memory of its own (mapped
// for it, never unmapped), and is not instrumented by the sanitizers, whose runtimes keep
// per-thread state it would share too. On other architectures it is an ordinary clone
// (memory copied) whose calls go through syscall(3).
#if defined(__x86_64__)
constexpr bool k_shares_memory = true;
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
constexpr bool k_shares_memory = true;
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
constexpr bool k_shares_memory = false;
inline long sys(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
    long ret = ::syscall(n, a, b, c, d, e);
    return ret < 0 ? -errno : ret;
}
#endif

// Everything below up to Watchdog::start runs in the watchdog, under the rules above.
#define WATCHDOG_CODE [[gnu::no_sanitize("address", "undefined", "thread")]]

template <class T>
long arg(T* p) {
    return reinterpret_cast<long>(p);
}

// One message on the pipe: a kind and two times (ns on CLOCK_BOOTTIME) or a pid. Writes of
// this size to a pipe are atomic.
struct Message {
    char kind;
    long long a;
    long long b;
};
constexpr char k_deadlines = 'D'; // a = term_at, b = kill_at
constexpr char k_lost = 'L';      // b = kill_at; redlock sent TERM itself
constexpr char k_group = 'G';     // a = PROGRAM's process group
constexpr char k_done = 'd';

// How long after term_at the watchdog leaves to redlock, which signals at term_at itself
// when it is running: one TERM, not two.
constexpr long long k_term_grace_ns = 100'000'000;

// The process table the watchdog reads to find redlock's descendants, and the largest
// tree it signals in one pass (the rest the next pass, 50 ms later). Both are only touched
// when the watchdog has to act, so their size costs address space, not memory.
constexpr size_t k_max_processes = size_t{1} << 18;
constexpr size_t k_max_tree = 16384;

struct ProcEntry {
    pid_t pid;
    pid_t ppid;
};

struct Watch {
    pid_t redlock = 0;
    pid_t self = 0;
    pid_t pgid = 0;
    long long term_at = 0; // 0: no TERM to send
    long long kill_at = 0;
    bool killed = false;
};

// The watchdog's own memory, mapped by redlock before the clone and never unmapped.
struct Memory {
    int fd = -1;       // the read end of the pipe
    int write_fd = -1; // its write end, redlock's: closed first, or EOF would never come
    Watch watch;
    ProcEntry processes[k_max_processes];
    pid_t tree[k_max_tree];
    alignas(16) char stack[64 * 1024];
};

WATCHDOG_CODE long long now_ns() {
    timespec ts{};
    sys(SYS_clock_gettime, CLOCK_BOOTTIME, arg(&ts));
    return static_cast<long long>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The decimal number at s (up to a non-digit), or -1 if there is none.
WATCHDOG_CODE long parse_number(const char*& s, const char* end) {
    long n = -1;
    for (; s < end && *s >= '0' && *s <= '9'; ++s)
        n = (n < 0 ? 0 : n * 10) + (*s - '0');
    return n;
}

// The parent of process `name` (a /proc entry) from its stat line, or -1.
WATCHDOG_CODE pid_t parent_of(int proc, const char* name) {
    char path[32];
    size_t len = 0;
    for (; name[len] && len < 16; ++len)
        path[len] = name[len];
    for (const char* s = "/stat"; *s; ++s)
        path[len++] = *s;
    path[len] = '\0';
    long fd = sys(SYS_openat, proc, arg(path), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[512];
    long n = sys(SYS_read, fd, arg(buf), sizeof buf);
    sys(SYS_close, fd);
    if (n <= 0)
        return -1;
    // "pid (comm) S ppid ...": comm may hold anything, so from the last ')'.
    const char* end = buf + n;
    const char* s = end;
    while (s > buf && s[-1] != ')')
        --s;
    if (s == buf || end - s < 4 || s[0] != ' ' || s[2] != ' ')
        return -1;
    s += 3; // " S "
    return static_cast<pid_t>(parse_number(s, end));
}

// Reads every process's parent into `out`; returns how many.
WATCHDOG_CODE size_t scan_processes(ProcEntry* out) {
    long proc = sys(SYS_openat, AT_FDCWD, arg("/proc"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (proc < 0)
        return 0;
    size_t count = 0;
    alignas(8) char buf[4096];
    long n = 0;
    while (count < k_max_processes && (n = sys(SYS_getdents64, proc, arg(buf), sizeof buf)) > 0) {
        for (long at = 0; at < n && count < k_max_processes;) {
            // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
            unsigned short reclen = 0;
            std::memcpy(&reclen, buf + at + 16, sizeof reclen);
            const char* name = buf + at + 19;
            at += reclen;
            const char* s = name;
            long pid = parse_number(s, name + 16);
            if (pid <= 0 || *s != '\0')
                continue;
            pid_t ppid = parent_of(static_cast<int>(proc), name);
            if (ppid >= 0)
                out[count++] = {static_cast<pid_t>(pid), ppid};
        }
    }
    sys(SYS_close, proc);
    return count;
}

WATCHDOG_CODE bool contains(const pid_t* set, size_t n, pid_t pid) {
    for (size_t i = 0; i < n; ++i)
        if (set[i] == pid)
            return true;
    return false;
}

// redlock's descendants, the watchdog excepted, into m.tree from m.tree[1] (m.tree[0] is
// redlock); returns how many.
WATCHDOG_CODE size_t descendants(Memory& m) {
    const size_t procs = scan_processes(m.processes);
    size_t n = 1;
    m.tree[0] = m.watch.redlock;
    for (bool grew = true; grew && n < k_max_tree;) {
        grew = false;
        for (size_t i = 0; i < procs && n < k_max_tree; ++i) {
            const ProcEntry& p = m.processes[i];
            if (p.pid != m.watch.self && contains(m.tree, n, p.ppid) &&
                !contains(m.tree, n, p.pid)) {
                m.tree[n++] = p.pid;
                grew = true;
            }
        }
    }
    return n - 1;
}

WATCHDOG_CODE void signal_tree(Memory& m, int sig) {
    if (m.watch.pgid > 0)
        sys(SYS_kill, -m.watch.pgid, sig);
    const size_t n = descendants(m);
    for (size_t i = 1; i <= n; ++i)
        sys(SYS_kill, m.tree[i], sig);
}

// The next time to act, 0 for none.
WATCHDOG_CODE long long next_action(const Watch& w) {
    if (w.killed)
        return now_ns() + 50'000'000; // again, for anything forked meanwhile
    if (w.term_at && (!w.kill_at || w.term_at + k_term_grace_ns < w.kill_at))
        return w.term_at + k_term_grace_ns;
    return w.kill_at;
}

WATCHDOG_CODE void act(Memory& m, long long now) {
    Watch& w = m.watch;
    if (w.term_at && now >= w.term_at + k_term_grace_ns) {
        signal_tree(m, SIGTERM);
        signal_tree(m, SIGCONT); // a stopped process acts on TERM only once continued
        w.term_at = 0;
    }
    if (w.kill_at && now >= w.kill_at) {
        signal_tree(m, SIGKILL);
        w.killed = true;
    }
    // Nothing left to kill (redlock stopped, PROGRAM gone): wait for redlock quietly.
    if (w.killed && (w.pgid <= 0 || sys(SYS_kill, -w.pgid, 0) != 0) && descendants(m) == 0) {
        w.killed = false;
        w.kill_at = 0;
    }
}

// Reads one whole message; false at EOF or on an error.
WATCHDOG_CODE bool read_message(int fd, Message& out) {
    char buf[sizeof(Message)];
    size_t got = 0;
    while (got < sizeof buf) {
        long n = sys(SYS_read, fd, arg(buf + got), static_cast<long>(sizeof buf - got));
        if (n == -EINTR)
            continue;
        if (n <= 0)
            return false;
        got += static_cast<size_t>(n);
    }
    std::memcpy(&out, buf, sizeof out);
    return true;
}

WATCHDOG_CODE int watch(void* memory) {
    Memory& m = *static_cast<Memory*>(memory);
    Watch& w = m.watch;
    w.self = static_cast<pid_t>(sys(SYS_getpid));
    // Own session: neither the terminal's signals nor a kill of redlock's process group
    // reach it. Every catchable signal blocked; no stdio held open for a caller to wait on.
    sys(SYS_setsid);
    const std::uint64_t all = ~std::uint64_t{0};
    sys(SYS_rt_sigprocmask, SIG_SETMASK, arg(&all), 0, sizeof all);
    const int fd = m.fd;
    sys(SYS_close, m.write_fd);
    long closed = fd > 0 ? sys(SYS_close_range, 0, fd - 1, 0) : 0;
    if (closed == 0)
        closed = sys(SYS_close_range, fd + 1, ~0U, 0);
    if (closed == -ENOSYS) { // before Linux 5.9: one by one, up to the descriptor limit
        struct {
            std::uint64_t cur, max; // the kernel's struct rlimit64
        } limit{1024, 1024};
        sys(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, arg(&limit));
        const long last = limit.cur < 65536 ? static_cast<long>(limit.cur) : 65536;
        for (long i = 0; i < last; ++i)
            if (i != fd)
                sys(SYS_close, i);
    }
    const long timer = sys(SYS_timerfd_create, CLOCK_BOOTTIME, TFD_CLOEXEC);
    for (;;) {
        const long long at = next_action(w);
        timespec timeout{};
        timespec* poll_timeout = nullptr;
        if (timer >= 0) {
            itimerspec spec{};
            spec.it_value.tv_sec = at / 1'000'000'000;
            spec.it_value.tv_nsec = at % 1'000'000'000;
            sys(SYS_timerfd_settime, timer, TFD_TIMER_ABSTIME, arg(&spec), 0); // 0: disarmed
        } else if (at) {
            // Without a timerfd, ppoll's own timeout (CLOCK_MONOTONIC) is the fallback.
            long long left = at - now_ns();
            left = left < 0 ? 0 : left;
            timeout.tv_sec = left / 1'000'000'000;
            timeout.tv_nsec = left % 1'000'000'000;
            poll_timeout = &timeout;
        }
        pollfd fds[2] = {{fd, POLLIN, 0}, {static_cast<int>(timer), POLLIN, 0}};
        long rc = sys(SYS_ppoll, arg(fds), timer >= 0 ? 2 : 1, arg(poll_timeout), 0, 8);
        if (rc < 0 && rc != -EINTR)
            break;
        if (fds[0].revents) {
            Message msg{};
            if (!read_message(fd, msg))
                break; // the pipe closed: redlock died without saying so
            if (msg.kind == k_done)
                sys(SYS_exit_group, 0);
            if (msg.kind == k_deadlines) {
                w.term_at = msg.a;
                w.kill_at = msg.b;
            } else if (msg.kind == k_lost) {
                w.term_at = 0;
                w.kill_at = msg.b;
            } else if (msg.kind == k_group) {
                w.pgid = static_cast<pid_t>(msg.a);
            }
        }
        if (timer >= 0 && fds[1].revents) {
            std::uint64_t expirations = 0;
            sys(SYS_read, timer, arg(&expirations), sizeof expirations);
        }
        act(m, now_ns());
    }
    if (w.pgid > 0)
        sys(SYS_kill, -w.pgid, SIGKILL);
    sys(SYS_exit_group, 0);
    return 0;
}

#undef WATCHDOG_CODE

// Whether the watchdog can share redlock's memory and still outlive it: not under
// valgrind, which runs no clone that shares memory without being a thread (it would stop
// redlock there; its preloaded libraries say it is there), and not on a kernel where a
// crashing redlock would take it along (kernel_spares_memory_sharers).
bool can_share_memory() {
    if (!k_shares_memory)
        return false;
    if (const char* preload = std::getenv("LD_PRELOAD");
        preload && std::strstr(preload, "/vgpreload_"))
        return false;
    utsname u{};
    return ::uname(&u) == 0 && kernel_spares_memory_sharers(u.release);
}

long long to_ns(Watchdog::Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

} // namespace

bool kernel_spares_memory_sharers(std::string_view release) {
    // "6.1.0-13-amd64", "5.15.0-91-generic", "4.18.0-513.el8_9.x86_64"
    int major = 0;
    int minor = 0;
    auto [end, ec] = std::from_chars(release.data(), release.data() + release.size(), major);
    if (ec != std::errc() || end == release.data() + release.size() || *end != '.')
        return false;
    if (std::from_chars(end + 1, release.data() + release.size(), minor).ec != std::errc())
        return false;
    return major > 5 || (major == 5 && minor >= 16);
}

util::Expected<Watchdog> Watchdog::start(Clock::time_point term_at, Clock::time_point kill_at) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("pipe: {}", std::strerror(errno)));
    util::UniqueFd read_end(fds[0]);
    Watchdog dog;
    dog.m_pipe.reset(fds[1]);
    // Never unmapped: the watchdog outlives redlock in it. Only the pages it touches count.
    void* mapped = ::mmap(nullptr, sizeof(Memory), PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (mapped == MAP_FAILED)
        return util::fail(util::ErrorKind::internal,
                          util::format("mmap: {}", std::strerror(errno)));
    auto* memory = static_cast<Memory*>(mapped); // zero-filled: a valid Memory as it is
    memory->fd = read_end.get();
    memory->write_fd = dog.m_pipe.get();
    memory->watch.redlock = ::getpid();
    memory->watch.term_at = to_ns(term_at);
    memory->watch.kill_at = to_ns(kill_at);
    // No exit signal: a "clone child" that waitpid(-1) never waits for (see the header).
    const int flags = can_share_memory() ? CLONE_VM : 0;
    pid_t pid = ::clone(watch, memory->stack + sizeof memory->stack, flags, memory);
    // A sandbox that refuses such a clone gets a copy.
    if (pid < 0 && flags != 0 && (errno == EINVAL || errno == ENOSYS))
        pid = ::clone(watch, memory->stack + sizeof memory->stack, 0, memory);
    if (pid < 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("clone: {}", std::strerror(errno)));
    dog.m_pid = pid;
    // A stopped or hung watchdog must never block redlock: a full pipe drops the message.
    ::fcntl(dog.m_pipe.get(), F_SETFL, O_NONBLOCK);
    return dog;
}

void Watchdog::send(char kind, long long a, long long b) {
    if (!m_pipe)
        return;
    Message m{kind, a, b};
    char buf[sizeof m];
    std::memcpy(buf, &m, sizeof m);
    (void)!::write(m_pipe.get(), buf, sizeof buf);
}

void Watchdog::watch_group(pid_t pgid) {
    send(k_group, pgid, 0);
}

void Watchdog::update(Clock::time_point term_at, Clock::time_point kill_at) {
    send(k_deadlines, to_ns(term_at), to_ns(kill_at));
}

void Watchdog::lost(Clock::time_point kill_at) {
    send(k_lost, 0, to_ns(kill_at));
}

void Watchdog::disarm() {
    send(k_done, 0, 0);
    m_pipe.reset();
}

} // namespace redlock::process
