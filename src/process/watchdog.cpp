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
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "process/raw_syscall.hpp"
#include "util/format.hpp"

namespace redlock::process {

namespace {

// The watchdog is a copy of redlock (a clone without CLONE_VM): it must not share
// redlock's fate. The OOM killer kills every process that shares its victim's memory, and
// a process that shares it dies with a core-dumping redlock before Linux 5.16. Its name
// is not "redlock" either, so that `killall redlock` or `pkill -9 redlock` leave it to
// act. It makes its system calls itself (process/raw_syscall.hpp), as it did when it
// shared redlock's memory: it runs on a stack of its own from clone(), and touches no
// libc state. Everything below up to Watchdog::start runs in the watchdog.
#define WATCHDOG_CODE REDLOCK_RAW_CODE
using raw::arg;
using raw::sys;

// One message on the pipe: a kind and two times (ns on CLOCK_BOOTTIME) or a pid. Writes of
// this size to a pipe are atomic.
struct Message {
    char kind;
    long long a;
    long long b;
};
constexpr char k_deadlines = 'D'; // a = term_at, b = kill_at
constexpr char k_lost = 'L';      // b = kill_at; redlock sent TERM itself
constexpr char k_group = 'G';     // a = PROGRAM's process group, b = 1 if also its session
constexpr char k_done = 'd';

// How long after term_at the watchdog leaves to redlock, which signals at term_at itself
// when it is running: one TERM, not two.
constexpr long long k_term_grace_ns = 100'000'000;

// The process table the watchdog reads to find redlock's descendants, and the largest
// tree it signals in one pass (the rest the next pass, 50 ms later). Both are only touched
// when the watchdog has to act, so their size costs address space, not memory.
constexpr size_t k_max_processes = size_t{1} << 18;
constexpr size_t k_max_tree = 16384;

// How long the watchdog goes on killing once redlock is gone, for processes forked while
// it kills, before it removes PROGRAM's cgroup and exits.
constexpr int k_final_rounds = 200;                // of:
constexpr long long k_final_round_ns = 20'000'000; // 4 s in all, at most

struct ProcEntry {
    pid_t pid;
    pid_t ppid;
    pid_t session;
    long exit_signal; // 0 for a "clone child" (the watchdog itself, a hook's runner)
};

struct Watch {
    pid_t redlock = 0;
    pid_t self = 0;
    pid_t pgid = 0;
    bool session = false;  // pgid leads a session of its own: its members are PROGRAM's
    long long term_at = 0; // 0: no TERM to send
    long long kill_at = 0;
    bool killed = false;
};

// The watchdog's own memory, mapped by redlock before the clone and never unmapped.
struct Memory {
    int fd = -1;       // the read end of the pipe
    int write_fd = -1; // its write end, redlock's: closed first, or EOF would never come
    // PROGRAM's cgroup: its directory, and its parent's with its name there; -1 without.
    int cgroup_dir = -1;
    int cgroup_parent = -1;
    char cgroup_name[64] = {};
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

WATCHDOG_CODE void sleep_ns(long long ns) {
    timespec ts{ns / 1'000'000'000, ns % 1'000'000'000};
    sys(SYS_nanosleep, arg(&ts), 0);
}

// The decimal number at s (up to a non-digit), or -1 if there is none.
WATCHDOG_CODE long parse_number(const char*& s, const char* end) {
    long n = -1;
    for (; s < end && *s >= '0' && *s <= '9'; ++s)
        n = (n < 0 ? 0 : n * 10) + (*s - '0');
    return n;
}

// Process `name` (a /proc entry) from its stat line into `out`; false if it is gone or a
// zombie.
WATCHDOG_CODE bool read_entry(int proc, const char* name, ProcEntry& out) {
    char path[32];
    size_t len = 0;
    for (; name[len] && len < 16; ++len)
        path[len] = name[len];
    for (const char* s = "/stat"; *s; ++s)
        path[len++] = *s;
    path[len] = '\0';
    long fd = sys(SYS_openat, proc, arg(path), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[512];
    long n = sys(SYS_read, fd, arg(buf), sizeof buf);
    sys(SYS_close, fd);
    if (n <= 0)
        return false;
    // "pid (comm) S ppid pgrp session ...": comm may hold anything, so from the last ')'.
    const char* end = buf + n;
    const char* s = end;
    while (s > buf && s[-1] != ')')
        --s;
    if (s == buf || end - s < 4 || s[0] != ' ' || s[2] != ' ')
        return false;
    if (s[1] == 'Z' || s[1] == 'X')
        return false; // dead already: nothing to signal, and only its parent can reap it
    s += 3;           // " S "
    const long ppid = parse_number(s, end);
    if (ppid < 0 || s >= end || *s++ != ' ' || parse_number(s, end) < 0 || s >= end || *s++ != ' ')
        return false;
    const long session = parse_number(s, end);
    if (session < 0)
        return false;
    // On to the 38th field, the exit signal (the session is the 6th); -1 if cut short.
    out.exit_signal = -1;
    for (int field = 6; field < 38 && s < end; ++s)
        if (*s == ' ' && ++field == 38) {
            ++s;
            out.exit_signal = parse_number(s, end);
            break;
        }
    out.ppid = static_cast<pid_t>(ppid);
    out.session = static_cast<pid_t>(session);
    return true;
}

// Reads every process's parent and session into `out`; returns how many.
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
            out[count].pid = static_cast<pid_t>(pid);
            if (read_entry(static_cast<int>(proc), name, out[count]))
                ++count;
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

// PROGRAM's processes found in the process table, the watchdog excepted, into m.tree from
// m.tree[1]: redlock's descendants (m.tree[0] is redlock; it is a child subreaper, so while
// it lives they are all below it), and the members of PROGRAM's session when PROGRAM
// leads one (once redlock is gone, its descendants are re-parented out of reach, but
// they stay in that session unless they leave it with setsid). Returns how many.
WATCHDOG_CODE size_t program_processes(Memory& m) {
    const size_t procs = scan_processes(m.processes);
    size_t n = 1;
    m.tree[0] = m.watch.redlock;
    for (size_t i = 0; i < procs && n < k_max_tree; ++i) {
        const ProcEntry& p = m.processes[i];
        if (m.watch.session && p.session == m.watch.pgid && p.pid != m.watch.self)
            m.tree[n++] = p.pid;
    }
    for (bool grew = true; grew && n < k_max_tree;) {
        grew = false;
        for (size_t i = 0; i < procs && n < k_max_tree; ++i) {
            const ProcEntry& p = m.processes[i];
            // redlock's clone children (this watchdog, a hook's runner) are not PROGRAM's,
            // nor is anything below them.
            const bool helper = p.ppid == m.watch.redlock && p.exit_signal == 0;
            if (p.pid != m.watch.self && p.pid != m.watch.redlock && !helper &&
                contains(m.tree, n, p.ppid) && !contains(m.tree, n, p.pid)) {
                m.tree[n++] = p.pid;
                grew = true;
            }
        }
    }
    return n - 1;
}

// Every process in PROGRAM's cgroup gets `sig`; SIGKILL through cgroup.kill. Returns how
// many processes were signalled one by one (0 also when cgroup.kill did it, or without a
// cgroup).
WATCHDOG_CODE size_t signal_cgroup(Memory& m, int sig) {
    if (m.cgroup_dir < 0)
        return 0;
    if (sig == SIGKILL) {
        long fd = sys(SYS_openat, m.cgroup_dir, arg("cgroup.kill"), O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            const long written = sys(SYS_write, fd, arg("1"), 1);
            sys(SYS_close, fd);
            if (written == 1)
                return 0;
        }
    }
    long fd = sys(SYS_openat, m.cgroup_dir, arg("cgroup.procs"), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t signalled = 0;
    char buf[4096];
    long pid = -1;
    for (long n; (n = sys(SYS_read, fd, arg(buf), sizeof buf)) > 0;) {
        for (long i = 0; i < n; ++i) {
            if (buf[i] >= '0' && buf[i] <= '9') {
                pid = (pid < 0 ? 0 : pid * 10) + (buf[i] - '0');
            } else {
                if (pid > 0 && sys(SYS_kill, pid, sig) == 0)
                    ++signalled;
                pid = -1;
            }
        }
    }
    sys(SYS_close, fd);
    return signalled;
}

// Signals everything of PROGRAM's; returns how many live processes it found to signal
// besides the process group (whose zombies a kill still counts).
WATCHDOG_CODE size_t signal_tree(Memory& m, int sig) {
    size_t found = signal_cgroup(m, sig);
    if (m.watch.pgid > 0)
        sys(SYS_kill, -m.watch.pgid, sig);
    const size_t n = program_processes(m);
    for (size_t i = 1; i <= n; ++i)
        sys(SYS_kill, m.tree[i], sig);
    return found + n;
}

// Whether PROGRAM's cgroup still holds a process ("populated 1" in cgroup.events).
WATCHDOG_CODE bool cgroup_populated(Memory& m) {
    if (m.cgroup_dir < 0)
        return false;
    long fd = sys(SYS_openat, m.cgroup_dir, arg("cgroup.events"), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[256];
    long n = sys(SYS_read, fd, arg(buf), sizeof buf);
    sys(SYS_close, fd);
    const char* needle = "populated 1";
    for (long i = 0; i + 11 <= n; ++i) {
        long j = 0;
        while (j < 11 && buf[i + j] == needle[j])
            ++j;
        if (j == 11)
            return true;
    }
    return false;
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
    if (w.killed && (w.pgid <= 0 || sys(SYS_kill, -w.pgid, 0) != 0) && !cgroup_populated(m) &&
        program_processes(m) == 0) {
        w.killed = false;
        w.kill_at = 0;
    }
}

// Redlock is gone without saying "done": nothing renews the lease, so everything of
// PROGRAM's is killed now, again while anything is found (a fork races a kill), and
// PROGRAM's cgroup is removed once empty.
WATCHDOG_CODE void kill_everything(Memory& m) {
    for (int round = 0; round < k_final_rounds; ++round) {
        const size_t found = signal_tree(m, SIGKILL);
        const bool populated = cgroup_populated(m);
        // With any cgroup below it: a run nested in PROGRAM, whose watchdog died in the
        // cgroup.kill above.
        if (!populated && m.cgroup_parent >= 0 &&
            remove_cgroup_tree(m.cgroup_parent, m.cgroup_name))
            m.cgroup_parent = -1;
        if (found == 0 && !populated)
            return;
        sleep_ns(k_final_round_ns);
    }
}

// Takes one message from redlock into the watch; false for "done".
WATCHDOG_CODE bool apply(Watch& w, const Message& msg) {
    if (msg.kind == k_done)
        return false;
    if (msg.kind == k_deadlines) {
        w.term_at = msg.a;
        w.kill_at = msg.b;
    } else if (msg.kind == k_lost) {
        w.term_at = 0;
        w.kill_at = msg.b;
    } else if (msg.kind == k_group) {
        w.pgid = static_cast<pid_t>(msg.a);
        w.session = msg.b != 0;
    }
    return true;
}

enum class Drained { more, done, closed };

// Reads every message waiting on the pipe (non-blocking) before the watchdog acts: one
// that was stopped and continued finds a deadline per renewal queued, and only the latest
// counts (acting on the oldest would kill a healthy PROGRAM). `closed` once the pipe is at
// EOF: redlock died without saying "done". A Message is written in one atomic write and
// read in whole multiples of its size, so no read ends mid-message.
WATCHDOG_CODE Drained drain(int fd, Watch& w) {
    alignas(Message) char buf[sizeof(Message) * 64];
    for (;;) {
        const long n = sys(SYS_read, fd, arg(buf), sizeof buf);
        if (n == -EINTR)
            continue;
        if (n == -EAGAIN)
            return Drained::more;
        if (n <= 0)
            return Drained::closed;
        for (long at = 0; at + static_cast<long>(sizeof(Message)) <= n; at += sizeof(Message)) {
            Message msg{};
            std::memcpy(&msg, buf + at, sizeof msg);
            if (!apply(w, msg))
                return Drained::done;
        }
    }
}

// Closes every descriptor but the `n` in `keep` (sorted): a caller waiting for redlock's
// output must not wait for the watchdog, nor any file stay open in it.
WATCHDOG_CODE void close_all_but(const int* keep, int n) {
    long from = 0;
    long rc = 0;
    for (int i = 0; i <= n && rc != -ENOSYS; ++i) {
        const long to = i < n ? keep[i] - 1L : long{~0U}; // the last range: to the end
        if (to >= from)
            rc = sys(SYS_close_range, from, to, 0);
        if (i < n)
            from = keep[i] + 1L;
    }
    if (rc != -ENOSYS)
        return;
    // Before Linux 5.9: one by one, up to the descriptor limit.
    struct {
        std::uint64_t cur, max; // the kernel's struct rlimit64
    } limit{1024, 1024};
    sys(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, arg(&limit));
    const long last = limit.cur < 65536 ? static_cast<long>(limit.cur) : 65536;
    for (long fd = 0; fd < last; ++fd) {
        bool kept = false;
        for (int i = 0; i < n; ++i)
            kept |= keep[i] == fd;
        if (!kept)
            sys(SYS_close, fd);
    }
}

WATCHDOG_CODE int watch(void* memory) {
    Memory& m = *static_cast<Memory*>(memory);
    Watch& w = m.watch;
    w.self = static_cast<pid_t>(sys(SYS_getpid));
    // Own session: neither the terminal's signals nor a kill of redlock's process group
    // reach it. Every catchable signal blocked; no stdio held open for a caller to wait on.
    sys(SYS_setsid);
    sys(SYS_prctl, PR_SET_NAME, arg(k_watchdog_name));
    const std::uint64_t all = ~std::uint64_t{0};
    sys(SYS_rt_sigprocmask, SIG_SETMASK, arg(&all), 0, sizeof all);
    const int fd = m.fd;
    int keep[3] = {fd, m.cgroup_dir, m.cgroup_parent};
    int kept = 0;
    for (int k : keep) // sorted, without the -1s
        if (k >= 0) {
            int i = kept++;
            for (; i > 0 && keep[i - 1] > k; --i)
                keep[i] = keep[i - 1];
            keep[i] = k;
        }
    close_all_but(keep, kept);
    sys(SYS_fcntl, fd, F_SETFL, O_NONBLOCK); // see drain()
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
            const Drained drained = drain(fd, w);
            if (drained == Drained::done)
                sys(SYS_exit_group, 0);
            if (drained == Drained::closed)
                break; // the pipe closed: redlock died without saying so
        }
        if (timer >= 0 && fds[1].revents) {
            std::uint64_t expirations = 0;
            sys(SYS_read, timer, arg(&expirations), sizeof expirations);
        }
        act(m, now_ns());
    }
    kill_everything(m);
    sys(SYS_exit_group, 0);
    return 0;
}

#undef WATCHDOG_CODE

long long to_ns(Watchdog::Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

} // namespace

util::Expected<Watchdog> Watchdog::start(Clock::time_point term_at, Clock::time_point kill_at,
                                         const Cgroup* cgroup) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("pipe: {}", std::strerror(errno)));
    util::UniqueFd read_end(fds[0]);
    Watchdog dog;
    dog.m_pipe.reset(fds[1]);
    // Never unmapped: the watchdog's copy of it outlives redlock. Only the pages it
    // touches count.
    void* mapped = ::mmap(nullptr, sizeof(Memory), PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (mapped == MAP_FAILED)
        return util::fail(util::ErrorKind::internal,
                          util::format("mmap: {}", std::strerror(errno)));
    auto* memory = static_cast<Memory*>(mapped); // zero-filled: a valid Memory as it is
    memory->fd = read_end.get();
    memory->write_fd = dog.m_pipe.get();
    memory->cgroup_dir = -1;
    memory->cgroup_parent = -1;
    if (cgroup && cgroup->name().size() < sizeof memory->cgroup_name) {
        memory->cgroup_dir = cgroup->dir_fd();
        memory->cgroup_parent = cgroup->parent_fd();
        std::memcpy(memory->cgroup_name, cgroup->name().c_str(), cgroup->name().size() + 1);
    }
    memory->watch.redlock = ::getpid();
    memory->watch.term_at = to_ns(term_at);
    memory->watch.kill_at = to_ns(kill_at);
    // A copy (no CLONE_VM: see `sys` above) with no exit signal: a "clone child" that
    // waitpid(-1) never waits for (see the header).
    pid_t pid = ::clone(watch, memory->stack + sizeof memory->stack, 0, memory);
    const int clone_errno = errno;
    ::munmap(mapped, sizeof(Memory)); // redlock's mapping; the watchdog has its own copy
    if (pid < 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("clone: {}", std::strerror(clone_errno)));
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

void Watchdog::watch_group(pid_t pgid, bool session) {
    send(k_group, pgid, session ? 1 : 0);
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
