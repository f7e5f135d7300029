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
#include <sys/wait.h>
#include <unistd.h>

#include "process/raw_syscall.hpp"
#include "util/format.hpp"

extern char** environ;

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
constexpr char k_group = 'G';     // a = PROGRAM's process group, b = k_own_* flags
constexpr char k_spawning = 'S';  // PROGRAM is being started
constexpr char k_reaped = 'R';    // PROGRAM's tree is reaped: nothing of it is left
constexpr char k_done = 'd';
constexpr long long k_own_session = 1; // PROGRAM leads a session of its own
constexpr long long k_in_cgroup = 2;   // PROGRAM is in the cgroup the watchdog was given

// How long after term_at the watchdog leaves to redlock, which signals at term_at itself
// when it is running: one TERM, not two.
constexpr long long k_term_grace_ns = Watchdog::k_term_grace.count();

// The largest tree the watchdog follows (the rest, if a pass finds more, the next pass).
// The arrays are touched only as far as the tree goes, so their size costs address
// space, not memory.
constexpr size_t k_max_tree = 16384;
constexpr size_t k_seen_slots = 2 * k_max_tree; // a power of two

// How often the watchdog looks at PROGRAM's tree while redlock lives: what it finds is
// what it kills once redlock is gone, and with a cgroup, whether all of it is still in
// the cgroup. Every 20 ms while the tree changes;
// a tree that stayed the same is looked at half as often each time, down to every 160 ms.
// Processes seen before are not read again (only their children lists), but every 8th
// look, which catches a pid reused and a process that started threads.
constexpr long long k_snapshot_ns = 20'000'000;
constexpr long long k_stable_snapshot_ns = 160'000'000;
constexpr unsigned k_full_look_every = 8;

// How long the watchdog goes on killing once redlock is gone, for processes forked while
// it kills, before it removes PROGRAM's cgroup and exits: rounds 1 ms apart at first (a
// killed tree is gone within a few: the lock's release waits for it), then twice as far
// apart each time, up to 20 ms; 4 s in all, at most.
constexpr long long k_first_round_ns = 1'000'000;
constexpr long long k_final_round_ns = 20'000'000;
constexpr long long k_final_rounds_ns = 4'000'000'000;

// One process of PROGRAM's tree: its pid, and its start time (clock ticks since boot), so
// that a later process that took the pid is never taken for it.
struct Member {
    pid_t pid;
    long threads;
    unsigned long long start;
};

struct Watch {
    pid_t redlock = 0;
    pid_t self = 0;
    pid_t pgid = 0;
    bool session = false;   // pgid leads a session of its own: its members are PROGRAM's
    bool contained = false; // PROGRAM is in the cgroup: its tree, unless one leaves it
    // PROGRAM: not started yet (0), started (1), or its tree reaped by redlock (2). Only
    // a started one has a tree to kill and prove gone once redlock dies.
    int program = 0;
    // A process of PROGRAM's tree was seen outside both its group and its session (it
    // called setsid): without a cgroup, what such a process starts after the last look
    // cannot be found, so the tree cannot be proven gone (tree_verdict).
    bool escaped = false;
    // With a cgroup, a process of PROGRAM's tree was seen outside it (it wrote itself into
    // another cgroup's cgroup.procs, or a service manager moved it: systemd-run --scope, a
    // PAM session): cgroup.kill does not reach it, nor what it starts, so an empty cgroup
    // proves nothing (tree_verdict).
    bool left_cgroup = false;
    // Redlock said where PROGRAM runs (k_group). Before, PROGRAM may be a child that has
    // not joined the cgroup yet (vfork, without clone3): not a process that left it.
    bool placed = false;
    long long term_at = 0; // 0: no TERM to send
    long long kill_at = 0;
    bool killed = false;
    long long snapshot_at = 0;             // when the next look at the tree is due; 0: none
    long long snapshot_ns = k_snapshot_ns; // until the next one
    unsigned looks = 0;
};

// The watchdog's own memory, mapped by redlock before the clone and never unmapped.
struct Memory {
    int fd = -1;       // the read end of the pipe
    int write_fd = -1; // its write end, redlock's: closed first, or EOF would never come
    int proc = -1;     // /proc
    // The run's will (job/will.hpp), or -1: once redlock is gone and PROGRAM's tree with
    // it, the watchdog becomes the releaser it names (become_releaser). The environment
    // is redlock's, as it was at the clone.
    int will_fd = -1;
    char** envp = nullptr;
    // PROGRAM's cgroup: its directory, and its parent's with its name there; -1 without.
    int cgroup_dir = -1;
    int cgroup_parent = -1;
    char cgroup_name[64] = {};
    // Its path in the hierarchy, as /proc/PID/cgroup shows it ("/a/redlock-N"); empty
    // when it did not fit, and then a process is inside only as cgroup.threads lists it.
    char cgroup_path[4096] = {};
    char cgroup_text[8192]; // a /proc/PID/cgroup file being read
    Watch watch;
    // The last look at PROGRAM's tree (snapshot[current]), and the next one being taken.
    Member snapshot[2][k_max_tree];
    size_t snapshot_size[2];
    bool snapshot_partial[2]; // larger than k_max_tree, or parts of /proc unreadable
    int current;
    // The processes of one pass, and a set of pids with an index each (open addressing; a
    // slot is taken when its generation is the set's).
    Member found[k_max_tree];
    pid_t children[k_max_tree];
    pid_t seen_pid[k_seen_slots];
    size_t seen_index[k_seen_slots];
    unsigned seen_generation[k_seen_slots];
    unsigned generation;
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

// The decimal number at s (up to a non-digit), or -1 if there is none. Numbers past 2^63
// (RLIM_INFINITY in a stat line) wrap: only small fields are used.
WATCHDOG_CODE long long parse_number(const char*& s, const char* end) {
    unsigned long long n = 0;
    bool any = false;
    for (; s < end && *s >= '0' && *s <= '9'; ++s, any = true)
        n = n * 10 + static_cast<unsigned long long>(*s - '0');
    return any ? static_cast<long long>(n & ~(1ULL << 63)) : -1;
}

// Appends `text`, then returns the end.
WATCHDOG_CODE char* put(char* at, const char* text) {
    while (*text)
        *at++ = *text++;
    return at;
}

// Appends the decimal `n`, then returns the end.
WATCHDOG_CODE char* put(char* at, unsigned long long n) {
    char digits[24];
    int count = 0;
    do {
        digits[count++] = static_cast<char>('0' + n % 10);
        n /= 10;
    } while (n);
    while (count)
        *at++ = digits[--count];
    return at;
}

// What the watchdog reads of a process's stat line.
struct Stat {
    pid_t session = 0;
    bool zombie = false; // its leader thread has ended; its other threads live on
    long threads = 1;
    unsigned long long start = 0;
    long long exit_signal = -1; // 0 for a "clone child" (the watchdog itself, a hook's runner)
};

// Process `pid`'s stat line ("pid (comm) S ppid pgrp session ... num_threads (20) ...
// starttime (22) ... exit_signal (38)"; comm may hold anything, so the fields are counted
// from the last ')'). False if it is gone, or dead already: a zombie whose threads have
// all ended has nothing left to signal, and no children. A zombie leader with threads
// left (its main thread called pthread_exit) is alive: those threads work on, fork, and
// are reached by a signal to its pid, and the threads it counts include the leader.
WATCHDOG_CODE bool read_stat(int proc, pid_t pid, Stat& out) {
    char path[32];
    *put(put(path, static_cast<unsigned long long>(pid)), "/stat") = '\0';
    const long fd = sys(SYS_openat, proc, arg(path), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[1024];
    const long n = sys(SYS_read, fd, arg(buf), sizeof buf);
    sys(SYS_close, fd);
    if (n <= 0)
        return false;
    const char* end = buf + n;
    const char* s = end;
    while (s > buf && s[-1] != ')')
        --s;
    if (s == buf || end - s < 4 || s[0] != ' ' || s[2] != ' ')
        return false;
    if (s[1] == 'X')
        return false;
    out.zombie = s[1] == 'Z';
    s += 3; // " S ": at field 4
    bool started = false;
    for (int field = 4; field <= 38 && s < end; ++field) {
        const long long value = *s == '-' ? (++s, -parse_number(s, end)) : parse_number(s, end);
        if (field == 6)
            out.session = static_cast<pid_t>(value);
        else if (field == 20)
            out.threads = static_cast<long>(value);
        else if (field == 22)
            out.start = static_cast<unsigned long long>(value), started = value >= 0;
        else if (field == 38)
            out.exit_signal = value;
        if (s >= end || *s != ' ')
            break;
        ++s;
    }
    return started && (!out.zombie || out.threads > 1);
}

// Appends to `out` (from `n`, up to `max`) the pids in /proc/<path> (a children file:
// "12 345 "); returns the new count. False in `complete` if it could not be read whole.
WATCHDOG_CODE size_t read_pids(int proc, const char* path, pid_t* out, size_t n, size_t max,
                               bool& complete) {
    const long fd = sys(SYS_openat, proc, arg(path), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        complete = false;
        return n;
    }
    char buf[4096];
    long long pid = -1;
    for (long got; (got = sys(SYS_read, fd, arg(buf), sizeof buf)) != 0;) {
        if (got < 0) {
            complete = false;
            break;
        }
        for (long i = 0; i < got; ++i) {
            if (buf[i] >= '0' && buf[i] <= '9') {
                pid = (pid < 0 ? 0 : pid * 10) + (buf[i] - '0');
                continue;
            }
            if (pid > 0 && n < max)
                out[n++] = static_cast<pid_t>(pid);
            else if (pid > 0)
                complete = false;
            pid = -1;
        }
    }
    if (pid > 0 && n < max)
        out[n++] = static_cast<pid_t>(pid);
    sys(SYS_close, fd);
    return n;
}

// Calls visit.entry(n) for each entry of the directory `dir` whose name is a number (a
// pid in /proc, a thread id in /proc/PID/task).
template <class Visit>
WATCHDOG_CODE void for_each_numbered(long dir, Visit& visit) {
    alignas(8) char buf[4096];
    for (long got; (got = sys(SYS_getdents64, dir, arg(buf), sizeof buf)) > 0;) {
        for (long at = 0; at < got;) {
            // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
            unsigned short reclen = 0;
            std::memcpy(&reclen, buf + at + 16, sizeof reclen);
            const char* name = buf + at + 19;
            at += reclen;
            const char* s = name;
            const long long n = parse_number(s, name + 16);
            if (n > 0 && *s == '\0')
                visit.entry(static_cast<pid_t>(n));
        }
    }
}

// Reads the children of each thread of a process into m.children (from n).
struct ThreadChildren {
    Memory& m;
    char* path; // "PID/task/"
    char* tail; // where the thread id goes in it
    bool& complete;
    size_t n = 0;
    WATCHDOG_CODE void entry(pid_t tid) {
        *put(put(tail, static_cast<unsigned long long>(tid)), "/children") = '\0';
        n = read_pids(m.proc, path, m.children, n, k_max_tree, complete);
    }
};

// The children of process `pid` into m.children; how many. Each thread has its own
// (/proc/PID/task/TID/children): the one that forked them.
WATCHDOG_CODE size_t children_of(Memory& m, pid_t pid, long threads, bool& complete) {
    char path[64];
    char* tail = put(put(path, static_cast<unsigned long long>(pid)), "/task/");
    if (threads <= 1) {
        *put(put(tail, static_cast<unsigned long long>(pid)), "/children") = '\0';
        return read_pids(m.proc, path, m.children, 0, k_max_tree, complete);
    }
    *tail = '\0';
    const long dir = sys(SYS_openat, m.proc, arg(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) {
        complete = false;
        return 0;
    }
    ThreadChildren each{m, path, tail, complete};
    for_each_numbered(dir, each);
    sys(SYS_close, dir);
    return each.n;
}

// The pid set of Memory: emptied in O(1) by a new generation.
WATCHDOG_CODE void clear_set(Memory& m) {
    ++m.generation;
}

WATCHDOG_CODE size_t slot_of(Memory& m, pid_t pid) {
    size_t slot = (static_cast<size_t>(pid) * 2654435761u) & (k_seen_slots - 1);
    while (m.seen_generation[slot] == m.generation && m.seen_pid[slot] != pid)
        slot = (slot + 1) & (k_seen_slots - 1);
    return slot;
}

// The index stored with `pid`, or -1 when it is not in the set.
WATCHDOG_CODE long find_in_set(Memory& m, pid_t pid) {
    const size_t slot = slot_of(m, pid);
    return m.seen_generation[slot] == m.generation ? static_cast<long>(m.seen_index[slot]) : -1;
}

// Adds `pid` with `index`; false when it was there already.
WATCHDOG_CODE bool add_to_set(Memory& m, pid_t pid, size_t index) {
    const size_t slot = slot_of(m, pid);
    if (m.seen_generation[slot] == m.generation)
        return false;
    m.seen_generation[slot] = m.generation;
    m.seen_pid[slot] = pid;
    m.seen_index[slot] = index;
    return true;
}

// A process of PROGRAM's tree in session `session`: outside PROGRAM's own, it left both
// its group and its session (Watch::escaped).
WATCHDOG_CODE void note_session(Watch& w, pid_t session) {
    if (w.session && w.pgid > 0 && session != w.pgid)
        w.escaped = true;
}

// Whether the cgroup file /proc/<path> (a process's or a thread's) puts it in PROGRAM's
// cgroup or below it (a run nested in PROGRAM makes its own there): 1 inside, 0 outside,
// -1 when it is gone. Its cgroup v2 is the "0::" line, after any v1 lines (hybrid).
WATCHDOG_CODE int cgroup_file_inside(Memory& m, const char* path) {
    const long fd = sys(SYS_openat, m.proc, arg(path), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char* const text = m.cgroup_text;
    long n = 0;
    for (long got; n < static_cast<long>(sizeof m.cgroup_text) &&
                   (got = sys(SYS_read, fd, arg(text + n), sizeof m.cgroup_text - n)) > 0;)
        n += got;
    sys(SYS_close, fd);
    if (n <= 0)
        return -1;
    const char* ours = m.cgroup_path;
    for (long line = 0; line < n;) {
        if (n - line > 3 && text[line] == '0' && text[line + 1] == ':' && text[line + 2] == ':') {
            long at = line + 3;
            long i = 0;
            while (ours[i] && at < n && text[at] == ours[i])
                ++at, ++i;
            // All of our path matched, and the line ends there or goes on below it.
            return ours[i] == '\0' && i > 0 && at < n && (text[at] == '\n' || text[at] == '/');
        }
        while (line < n && text[line] != '\n')
            ++line;
        ++line;
    }
    return 0; // no cgroup v2 line: not in ours
}

// Asks each thread of a zombie leader but the leader (whose line keeps the cgroup it
// ended in) whether it is in PROGRAM's cgroup.
struct ThreadCgroups {
    Memory& m;
    pid_t leader;
    char* path; // "PID/task/"
    char* tail; // where the thread id goes in it
    bool outside = false;
    WATCHDOG_CODE void entry(pid_t tid) {
        if (tid == leader)
            return;
        *put(put(tail, static_cast<unsigned long long>(tid)), "/cgroup") = '\0';
        outside |= cgroup_file_inside(m, path) == 0;
    }
};

// Whether process `pid` of PROGRAM's tree runs outside its cgroup; false once it is gone.
// Moving a process moves all its threads, so its leader's line says where it is; but a
// zombie leader's line keeps the cgroup it ended in, and then its threads are asked.
WATCHDOG_CODE bool outside_cgroup(Memory& m, pid_t pid) {
    char path[64];
    char* tail = put(put(path, static_cast<unsigned long long>(pid)), "/");
    *put(tail, "cgroup") = '\0';
    const int inside = cgroup_file_inside(m, path);
    Stat st{};
    if (inside != 1 || !read_stat(m.proc, pid, st) || !st.zombie)
        return inside == 0;
    tail = put(tail, "task/");
    *tail = '\0';
    const long dir = sys(SYS_openat, m.proc, arg(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return false;
    ThreadCgroups each{m, pid, path, tail};
    for_each_numbered(dir, each);
    sys(SYS_close, dir);
    return each.outside;
}

// With a cgroup: whether each of `members` (of a look at PROGRAM's tree, or of the last
// pass once redlock is gone) is still in it, marking Watch::left_cgroup when one is not.
// cgroup.threads lists the live threads in PROGRAM's cgroup itself, each process's
// leader among them: one read per look, and only a process it does not list (in a
// cgroup below, a zombie leader, or gone elsewhere) is asked on its own.
WATCHDOG_CODE void note_cgroup(Memory& m, const Member* members, size_t n) {
    if (!m.watch.contained || !m.watch.placed || m.cgroup_dir < 0 || n == 0 || m.watch.left_cgroup)
        return;
    clear_set(m);
    bool complete = true;
    const size_t listed =
        read_pids(m.cgroup_dir, "cgroup.threads", m.children, 0, k_max_tree, complete);
    for (size_t i = 0; i < listed; ++i)
        add_to_set(m, m.children[i], i);
    for (size_t i = 0; i < n && !m.watch.left_cgroup; ++i)
        if (find_in_set(m, members[i].pid) < 0 && outside_cgroup(m, members[i].pid))
            m.watch.left_cgroup = true;
}

// PROGRAM's tree below redlock into `out`: redlock is a child subreaper, so while it lives
// every process PROGRAM started is below it, whatever group or session it moved to.
// redlock's "clone children" (this watchdog, a hook's runner) and what is below them are
// not PROGRAM's. Returns how many; `complete` false when some could not be read or there
// were more than k_max_tree. With `known` (the set holding the indexes of a previous
// look), a process found there is taken from it unread.
WATCHDOG_CODE size_t walk_tree(Memory& m, Member* out, bool& complete,
                               const Member* known = nullptr) {
    Stat root{};
    if (!read_stat(m.proc, m.watch.redlock, root))
        return 0;
    size_t n = 0;
    pid_t parent = m.watch.redlock;
    long threads = root.threads;
    for (size_t next = 0;; ++next) {
        const size_t count = children_of(m, parent, threads, complete);
        for (size_t i = 0; i < count; ++i) {
            Stat child{};
            const pid_t pid = m.children[i];
            const long seen = known ? find_in_set(m, pid) : -1;
            if (seen >= 0 && n < k_max_tree) {
                out[n++] = known[seen];
                continue;
            }
            if (pid == m.watch.self || !read_stat(m.proc, pid, child))
                continue;
            if (parent == m.watch.redlock && child.exit_signal == 0)
                continue;
            note_session(m.watch, child.session);
            if (n == k_max_tree) {
                complete = false;
                return n;
            }
            out[n++] = {pid, child.threads, child.start};
        }
        if (next == n)
            return n;
        parent = out[next].pid;
        threads = out[next].threads;
    }
}

// Takes a new look at PROGRAM's tree while redlock lives. One taken while redlock died
// may have missed processes re-parented away meanwhile: the last one stays. Returns
// whether the tree is the same as at the last look.
WATCHDOG_CODE bool take_snapshot(Memory& m) {
    const int last = m.current;
    const int next = 1 - last;
    const Member* known = nullptr;
    if (++m.watch.looks % k_full_look_every != 0) {
        clear_set(m);
        for (size_t i = 0; i < m.snapshot_size[last]; ++i)
            add_to_set(m, m.snapshot[last][i].pid, i);
        known = m.snapshot[last];
    }
    bool complete = m.proc >= 0;
    const size_t n = walk_tree(m, m.snapshot[next], complete, known);
    m.snapshot_size[next] = n;
    m.snapshot_partial[next] = !complete;
    note_cgroup(m, m.snapshot[next], n);
    Stat redlock{};
    if (!read_stat(m.proc, m.watch.redlock, redlock))
        return false;
    m.current = next;
    bool same = n == m.snapshot_size[last];
    for (size_t i = 0; same && i < n; ++i)
        same = m.snapshot[next][i].pid == m.snapshot[last][i].pid &&
               m.snapshot[next][i].start == m.snapshot[last][i].start;
    return same;
}

// Whether `member` is still that process, alive (not a later one with its pid).
WATCHDOG_CODE bool still_alive(Memory& m, const Member& member, Stat& now) {
    return read_stat(m.proc, member.pid, now) && now.start == member.start;
}

// Passes on to each.add(pid, threads) the processes of PROGRAM's session.
template <class Each>
struct SessionMembers {
    Memory& m;
    Each& each;
    size_t count = 0;
    WATCHDOG_CODE void entry(pid_t pid) {
        Stat st{};
        if (pid != m.watch.self && read_stat(m.proc, pid, st) && st.session == m.watch.pgid) {
            each.add(pid, st.threads);
            ++count;
        }
    }
};

// Calls each.add(pid, threads) for every process of PROGRAM's session (when it leads one:
// its members are PROGRAM's, found even once redlock is gone, unless they left it with
// setsid), by a pass over /proc. Returns how many.
template <class Each>
WATCHDOG_CODE size_t for_each_in_session(Memory& m, Each& each) {
    if (!m.watch.session || m.watch.pgid <= 0)
        return 0;
    const long dir = sys(SYS_openat, m.proc, arg("."), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return 0;
    SessionMembers<Each> members{m, each};
    for_each_numbered(dir, members);
    sys(SYS_close, dir);
    return members.count;
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
    bool complete = true;
    const size_t n = read_pids(m.cgroup_dir, "cgroup.procs", m.children, 0, k_max_tree, complete);
    size_t signalled = 0;
    for (size_t i = 0; i < n; ++i)
        if (sys(SYS_kill, m.children[i], sig) == 0)
            ++signalled;
    return signalled;
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

// Sends a signal to each process added.
struct Signaller {
    int sig;
    WATCHDOG_CODE void add(pid_t pid, long) { sys(SYS_kill, pid, sig); }
};

// While redlock lives (it is stopped or starved: the lease ran out): signals everything of
// PROGRAM's; returns how many live processes it found to signal besides the process group
// (whose zombies a kill still counts).
WATCHDOG_CODE size_t signal_tree(Memory& m, int sig) {
    size_t found = signal_cgroup(m, sig);
    if (m.watch.pgid > 0)
        sys(SYS_kill, -m.watch.pgid, sig);
    bool complete = true;
    const size_t n = walk_tree(m, m.found, complete);
    for (size_t i = 0; i < n; ++i)
        sys(SYS_kill, m.found[i].pid, sig);
    Signaller signaller{sig};
    return found + n + for_each_in_session(m, signaller);
}

// The processes of one pass once redlock is gone, each stopped (SIGSTOP) as it is found:
// a stopped process forks no more, and keeps its children below it (a killed one would
// leave them to init, out of reach), so that they are found in turn.
struct Freezer {
    Memory& m;
    size_t n = 0;
    WATCHDOG_CODE void add(pid_t pid, long threads) {
        if (pid <= 0 || pid == m.watch.self || pid == m.watch.redlock || n == k_max_tree ||
            !add_to_set(m, pid, n))
            return;
        sys(SYS_kill, pid, SIGSTOP);
        m.found[n++] = {pid, threads, 0};
    }
};

// Redlock is gone: kills everything of PROGRAM's. Finds the processes of the last look at
// the tree still alive (same start time), everything now below them, the process group
// and the session, freezing each as it is found (with a cgroup too: one that left it is
// found only so, and noted), then kills them all, and the cgroup at once. Returns how
// many processes it signalled one by one.
WATCHDOG_CODE size_t freeze_and_kill(Memory& m) {
    clear_set(m);
    Freezer frozen{m};
    if (m.watch.pgid > 0)
        sys(SYS_kill, -m.watch.pgid, SIGSTOP);
    const int last = m.current;
    for (size_t i = 0; i < m.snapshot_size[last]; ++i) {
        Stat now{};
        if (still_alive(m, m.snapshot[last][i], now)) {
            note_session(m.watch, now.session);
            frozen.add(m.snapshot[last][i].pid, now.threads);
        }
    }
    for_each_in_session(m, frozen);
    for (size_t i = 0; i < frozen.n; ++i) {
        bool complete = true;
        const size_t count = children_of(m, m.found[i].pid, m.found[i].threads, complete);
        for (size_t c = 0; c < count; ++c) {
            Stat child{};
            if (read_stat(m.proc, m.children[c], child)) {
                note_session(m.watch, child.session);
                frozen.add(m.children[c], child.threads);
            }
        }
    }
    note_cgroup(m, m.found, frozen.n);
    for (size_t i = 0; i < frozen.n; ++i)
        sys(SYS_kill, m.found[i].pid, SIGKILL);
    if (m.watch.pgid > 0)
        sys(SYS_kill, -m.watch.pgid, SIGKILL);
    return frozen.n + signal_cgroup(m, SIGKILL);
}

enum class TreeState { empty, alive, unprovable };
struct TreeVerdict {
    TreeState state;
    const char* why;
};

// Counts the processes added.
struct Counter {
    size_t n = 0;
    WATCHDOG_CODE void add(pid_t, long) { ++n; }
};

// Once redlock is gone, whether PROGRAM's tree is proven gone: the one place that decides
// it, and so whether the lock may be released at once (become_releaser). With a cgroup, it
// is gone when the cgroup is empty and no process of the last look at the tree is alive;
// without one, when no process of the last look is alive and PROGRAM's process group and
// session (when it led one) are empty. A process that left the cgroup (with one) or both
// group and session (without) after that look, whose parent exited, cannot be found. So
// when a process of the tree was seen to leave them, when the look was partial, or
// without a cgroup when PROGRAM kept the terminal's session, the tree cannot be proven
// gone.
WATCHDOG_CODE TreeVerdict tree_verdict(Memory& m) {
    const Watch& w = m.watch;
    if (w.program == 0)
        return {TreeState::empty, "PROGRAM had not been started"};
    if (w.program == 2)
        return {TreeState::empty, "PROGRAM's tree had been reaped"};
    if (w.contained && cgroup_populated(m))
        return {TreeState::alive, "its cgroup is populated"};
    const int last = m.current;
    for (size_t i = 0; i < m.snapshot_size[last]; ++i) {
        Stat now{};
        if (still_alive(m, m.snapshot[last][i], now))
            return {TreeState::alive, "a process of its tree is alive"};
    }
    Counter counter;
    // With a session of its own, its group is in it, and the look at the session (unlike
    // kill(2)) does not count the zombies that nobody has reaped yet.
    if (!w.contained && !w.session && w.pgid > 0 && sys(SYS_kill, -w.pgid, 0) == 0)
        return {TreeState::alive, "its process group is not empty"};
    if (!w.contained && for_each_in_session(m, counter) > 0)
        return {TreeState::alive, "its session is not empty"};
    if (m.snapshot_partial[last])
        return {TreeState::unprovable, "its tree was too large, or /proc unreadable, to follow"};
    if (w.contained)
        return w.left_cgroup ? TreeVerdict{TreeState::unprovable,
                                           "a process of its tree left its cgroup (moved to "
                                           "another, as systemd-run --scope does): what such a "
                                           "process starts cannot be followed"}
                             : TreeVerdict{TreeState::empty, "its cgroup is empty"};
    if (!w.session)
        return {TreeState::unprovable, "it had no cgroup and shared the terminal's session, in "
                                       "which a process that left its group cannot be told "
                                       "apart"};
    if (w.escaped)
        return {TreeState::unprovable, "it had no cgroup and a process of its tree left its "
                                       "group and session (setsid): what such a process starts "
                                       "cannot be followed"};
    return {TreeState::empty, "its process group and session are empty"};
}

// The earlier of two times, 0 standing for none.
WATCHDOG_CODE long long earlier(long long a, long long b) {
    return !a ? b : !b ? a : a < b ? a : b;
}

// The next time to act, 0 for none.
WATCHDOG_CODE long long next_action(const Watch& w) {
    long long action = w.kill_at;
    if (w.killed)
        action = now_ns() + 50'000'000; // again, for anything forked meanwhile
    else if (w.term_at && (!w.kill_at || w.term_at + k_term_grace_ns < w.kill_at))
        action = w.term_at + k_term_grace_ns;
    return earlier(w.snapshot_at, action);
}

WATCHDOG_CODE void act(Memory& m, long long now) {
    Watch& w = m.watch;
    if (w.snapshot_at && now >= w.snapshot_at) {
        const long long twice = w.snapshot_ns * 2;
        w.snapshot_ns = !take_snapshot(m)              ? k_snapshot_ns
                        : twice < k_stable_snapshot_ns ? twice
                                                       : k_stable_snapshot_ns;
        w.snapshot_at = now_ns() + w.snapshot_ns;
    }
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
    if (w.killed && (w.pgid <= 0 || sys(SYS_kill, -w.pgid, 0) != 0) && !cgroup_populated(m)) {
        bool complete = true;
        Counter counter;
        if (walk_tree(m, m.found, complete) == 0 && for_each_in_session(m, counter) == 0) {
            w.killed = false;
            w.kill_at = 0;
        }
    }
}

// Redlock is gone without saying "done": nothing renews the lease, so everything of
// PROGRAM's is killed now, again while anything is found (a fork races a kill), and
// PROGRAM's cgroup is removed once empty. Returns whether the tree was proven gone.
WATCHDOG_CODE TreeVerdict kill_everything(Memory& m) {
    if (m.watch.program != 1) { // nothing of PROGRAM's can be left
        // Its cgroup, made before the first attempt, is empty: removed all the same.
        if (m.cgroup_parent >= 0 && remove_cgroup_tree(m.cgroup_parent, m.cgroup_name))
            m.cgroup_parent = -1;
        return tree_verdict(m);
    }
    TreeVerdict verdict{TreeState::alive, ""};
    long long pause = k_first_round_ns;
    for (long long spent = 0;; spent += pause) {
        const size_t found = freeze_and_kill(m);
        verdict = tree_verdict(m);
        // With any cgroup below it: a run nested in PROGRAM, whose watchdog died in the
        // cgroup.kill above.
        if (!cgroup_populated(m) && m.cgroup_parent >= 0 &&
            remove_cgroup_tree(m.cgroup_parent, m.cgroup_name))
            m.cgroup_parent = -1;
        if (found == 0 && verdict.state != TreeState::alive)
            return verdict;
        if (spent >= k_final_rounds_ns)
            return verdict.state == TreeState::alive
                       ? TreeVerdict{TreeState::alive, "processes of its tree were still alive "
                                                       "after 4 s of SIGKILL"}
                       : verdict;
        sleep_ns(pause);
        pause = pause * 2 < k_final_round_ns ? pause * 2 : k_final_round_ns;
    }
}

// Copies `text` into `out` (`size` bytes, NUL-terminated), cut if it must be.
WATCHDOG_CODE void copy_text(char* out, size_t size, const char* text) {
    size_t i = 0;
    for (; i + 1 < size && text[i]; ++i)
        out[i] = text[i];
    out[i] = '\0';
}

// Redlock is gone and the watchdog has done its work on PROGRAM's tree: it becomes the
// releaser (a fresh redlock, `redlock __release-dead-run`, job/dead_run.hpp), which reads
// the will on its stdin and releases the lock with the run's token, or, when the tree was
// not proven gone, leaves the lock to its TTL and says why. The verdict goes into the will
// first (TreeReport). The binary is the one redlock ran from (/proc/self/exe: this copy of
// redlock was never exec'd), even if it was replaced or deleted since. Returns only if the
// exec failed: the lock then keeps its TTL.
WATCHDOG_CODE void become_releaser(Memory& m, const TreeVerdict& verdict) {
    TreeReport report{};
    copy_text(report.magic, sizeof report.magic, k_tree_report_magic);
    report.proven = verdict.state == TreeState::empty ? 1 : 0;
    copy_text(report.why, sizeof report.why, verdict.why);
    if (sys(SYS_pwrite64, m.will_fd, arg(&report), sizeof report, k_tree_report_offset) !=
        static_cast<long>(sizeof report))
        return;
    // stdin: the will; stdout and stderr: /dev/null (nobody reads them any more).
    if (m.will_fd != 0 && sys(SYS_dup3, m.will_fd, 0, 0) < 0)
        return;
    sys(SYS_fcntl, 0, F_SETFD, 0);
    const long null = sys(SYS_openat, AT_FDCWD, arg("/dev/null"), O_RDWR);
    for (int fd = 1; fd <= 2 && null >= 0; ++fd)
        if (null != fd)
            sys(SYS_dup3, null, fd, 0);
    if (null > 2)
        sys(SYS_close, null);
    // An ordinary process again: signals are no longer blocked.
    const std::uint64_t none = 0;
    sys(SYS_rt_sigprocmask, SIG_SETMASK, arg(&none), 0, sizeof none);
    const char* argv[] = {"redlock", k_release_command, nullptr};
    if (m.proc >= 0)
        sys(SYS_execveat, m.proc, arg("self/exe"), arg(argv), arg(m.envp), 0);
    sys(SYS_execve, arg("/proc/self/exe"), arg(argv), arg(m.envp));
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
    } else if (msg.kind == k_spawning) {
        // From now on PROGRAM may run; until redlock says where (k_group), in the cgroup if
        // there is one, else the watchdog looks at redlock's tree.
        w.program = 1;
        w.snapshot_at = now_ns();
    } else if (msg.kind == k_group) {
        w.pgid = static_cast<pid_t>(msg.a);
        w.session = (msg.b & k_own_session) != 0;
        w.contained = (msg.b & k_in_cgroup) != 0;
        w.placed = true;
        // PROGRAM is there now: a look at once, then the usual ones.
        w.snapshot_at = now_ns();
        w.snapshot_ns = k_snapshot_ns;
    } else if (msg.kind == k_reaped) {
        w.program = 2;
        w.snapshot_at = 0;
        w.term_at = w.kill_at = 0;
        w.killed = false;
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
    int keep[4] = {fd, m.cgroup_dir, m.cgroup_parent, m.will_fd};
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
    m.proc = static_cast<int>(
        sys(SYS_openat, AT_FDCWD, arg("/proc"), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
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
    // The lock is released once the tree is proven gone, by what the watchdog becomes.
    const TreeVerdict verdict = kill_everything(m);
    if (m.will_fd >= 0)
        become_releaser(m, verdict);
    sys(SYS_exit_group, 0);
    return 0;
}

#undef WATCHDOG_CODE

long long to_ns(Watchdog::Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The watchdog as a grandchild, for where a clone with no exit signal is refused (EINVAL):
// qemu-user, which runs arm64 containers on x86_64 hosts, supports only SIGCHLD there. A
// middle process clones it with SIGCHLD and exits at once, so it is re-parented away from
// redlock (not yet a subreaper: run() makes it one after this), and waitpid(-1) never sees
// it either. Its pid, or -1 with `error` set.
pid_t start_as_grandchild(Memory* memory, int& error) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        error = errno;
        return -1;
    }
    const pid_t middle = ::fork();
    if (middle == 0) {
        const pid_t pid = ::clone(watch, memory->stack + sizeof memory->stack, SIGCHLD, memory);
        const int reply[2] = {pid, pid < 0 ? errno : 0};
        (void)!::write(fds[1], reply, sizeof reply);
        ::_exit(0);
    }
    error = errno;
    ::close(fds[1]);
    int reply[2] = {-1, EIO};
    ssize_t n = -1;
    if (middle > 0) {
        while ((n = ::read(fds[0], reply, sizeof reply)) < 0 && errno == EINTR) {
        }
        while (::waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
        }
        error = n == static_cast<ssize_t>(sizeof reply) ? reply[1] : EIO;
    }
    ::close(fds[0]);
    return middle > 0 && n == static_cast<ssize_t>(sizeof reply) ? reply[0] : -1;
}

} // namespace

util::Expected<Watchdog> Watchdog::start(const Cgroup* cgroup, int will_fd) {
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
        const std::string& path = cgroup->hierarchy_path();
        if (path.size() < sizeof memory->cgroup_path)
            std::memcpy(memory->cgroup_path, path.c_str(), path.size() + 1);
    }
    memory->watch.redlock = ::getpid();
    // Until redlock says where PROGRAM runs (watch_group): in the cgroup if there is one.
    // No deadlines until the lock is acquired (update()).
    memory->watch.contained = memory->cgroup_dir >= 0;
    memory->will_fd = will_fd;
    memory->envp = environ;
    // A copy (no CLONE_VM: see `sys` above) with no exit signal: a "clone child" that
    // waitpid(-1) never waits for (see the header).
    pid_t pid = ::clone(watch, memory->stack + sizeof memory->stack, 0, memory);
    int clone_errno = errno;
    if (pid < 0 && clone_errno == EINVAL)
        pid = start_as_grandchild(memory, clone_errno);
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

void Watchdog::spawning() {
    send(k_spawning, 0, 0);
}

void Watchdog::reaped() {
    send(k_reaped, 0, 0);
}

void Watchdog::watch_group(pid_t pgid, bool session, bool in_cgroup) {
    send(k_group, pgid, (session ? k_own_session : 0) | (in_cgroup ? k_in_cgroup : 0));
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
