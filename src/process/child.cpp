#include "process/child.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <unordered_map>

#include "process/cgroup.hpp"
#include "util/fd.hpp"
#include "util/format.hpp"

extern char** environ;

namespace redlock::process {

namespace {

// PROGRAM gets the terminal when redlock is the foreground job on it, and alone in that
// job: in `redlock run -- git log | less`, handing it over would stop `less` (SIGTTIN).
bool owns_foreground_terminal() {
    return ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp() &&
           alone_in_process_group();
}

// Whether redlock has a controlling terminal, which PROGRAM keeps (its own group in
// redlock's session): an editor, a password prompt or ssh opens /dev/tty. Without one
// (cron, CI, a service), PROGRAM leads a session of its own.
bool has_controlling_terminal() {
    const util::UniqueFd tty(::open("/dev/tty", O_RDONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
    return static_cast<bool>(tty);
}

// Environment for PROGRAM: ours, with `env` set (replacing any inherited values). The
// inherited entries are pointed to, not copied (a copy each is a malloc and free per
// variable on every run); the ones set are built into `set`, which must outlive the result.
std::vector<char*> build_environment(const SpawnOptions& options, std::vector<std::string>& set) {
    std::vector<char*> out;
    size_t inherited = 0;
    while (environ[inherited])
        ++inherited;
    out.reserve(inherited + options.env.size() + 1);
    for (char** e = environ; *e; ++e) {
        const std::string_view entry(*e);
        const std::string_view name = entry.substr(0, entry.find('='));
        const bool replaced = std::ranges::any_of(
            options.env, [name](const auto& variable) { return variable.first == name; });
        if (!replaced)
            out.push_back(*e);
    }
    set.reserve(options.env.size());
    for (const auto& [name, value] : options.env) {
        set.push_back(name + "=" + value);
        out.push_back(set.back().data());
    }
    out.push_back(nullptr);
    return out;
}

} // namespace

namespace {

// What the child needs between fork and exec, prepared before: it shares the parent's
// memory (vfork, or clone3 with CLONE_VM | CLONE_VFORK), so its results come back here,
// and it makes only system calls until exec or _exit.
struct ChildSetup {
    char** argv;
    char** envp;
    const sigset_t* mask;
    pid_t parent;
    bool session;
    bool terminal;
    int cgroup_procs; // join by writing "0" (when not started in the cgroup), or -1
    volatile int exec_errno;
    volatile int cgroup_errno;
};

[[noreturn]] [[gnu::no_sanitize("address", "undefined", "thread")]] void child_main(ChildSetup& c) {
    if (c.session)
        ::setsid();
    else
        ::setpgid(0, 0);
    // Before exec, so that nothing PROGRAM starts can be outside the cgroup.
    if (c.cgroup_procs >= 0 && ::write(c.cgroup_procs, "0", 1) != 1)
        c.cgroup_errno = errno;
    if (c.terminal)
        ::tcsetpgrp(STDIN_FILENO, ::getpid()); // SIGTTOU is still blocked here
    // If redlock dies: in a cgroup, PROGRAM is killed (the watchdog kills the rest through
    // the cgroup). Without one it is stopped instead: its children stay its children, where
    // the watchdog finds them (once PROGRAM is dead, those it forked since its last look at
    // the tree would go to init, out of reach), then it is killed with them.
    ::prctl(PR_SET_PDEATHSIG, c.cgroup_errno == 0 ? SIGKILL : SIGSTOP);
    if (::getppid() != c.parent)
        ::_exit(util::exit_code::internal); // redlock died before we got here
    if (c.mask)
        ::sigprocmask(SIG_SETMASK, c.mask, nullptr);
    ::execvpe(c.argv[0], c.argv, c.envp);
    c.exec_errno = errno;
    ::_exit(c.exec_errno == ENOENT ? util::exit_code::not_found : util::exit_code::cannot_execute);
}

// clone3 with CLONE_INTO_CGROUP starts PROGRAM in its cgroup: a migration afterwards (a
// write to cgroup.procs) waits for the kernel's cgroup lock, 60-250 us measured, a tenth
// of a `run -- true`. clone3 has no glibc wrapper: this one runs fn(arg) in the child on
// `args->stack` and exits with what it returns (it never does: exec or _exit).
#if defined(__x86_64__) || defined(__aarch64__)
extern "C" long redlock_clone3(clone_args* args, size_t size, int (*fn)(void*), void* arg);
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl redlock_clone3\n"
        ".type redlock_clone3,@function\n"
        "redlock_clone3:\n"
        "    mov %rdx, %r9\n"  // fn: r8 and r9 survive the syscall, rdx and rcx may not
        "    mov %rcx, %r8\n"  // arg
        "    mov $435, %eax\n" // SYS_clone3
        "    syscall\n"
        "    test %rax, %rax\n"
        "    jnz 1f\n"
        "    xor %ebp, %ebp\n" // the child, on its own stack: no frame above
        "    mov %r8, %rdi\n"
        "    call *%r9\n"
        "    mov %eax, %edi\n"
        "    mov $60, %eax\n" // SYS_exit
        "    syscall\n"
        "    hlt\n"
        "1:  ret\n"
        ".size redlock_clone3, .-redlock_clone3\n");
#else
__asm__(".text\n"
        ".globl redlock_clone3\n"
        ".type redlock_clone3,%function\n"
        "redlock_clone3:\n"
        "    mov x9, x2\n"   // fn: the kernel keeps x1-x30 across a syscall
        "    mov x10, x3\n"  // arg
        "    mov x8, #435\n" // SYS_clone3
        "    svc #0\n"
        "    cbnz x0, 1f\n"
        "    mov x29, xzr\n" // the child, on its own stack: no frame above
        "    mov x0, x10\n"
        "    blr x9\n"
        "    mov x8, #93\n" // SYS_exit
        "    svc #0\n"
        "1:  ret\n"
        ".size redlock_clone3, .-redlock_clone3\n");
#endif
constexpr bool k_has_clone3 = true;
#else
constexpr bool k_has_clone3 = false;
long redlock_clone3(clone_args*, size_t, int (*)(void*), void*) {
    return -ENOSYS;
}
#endif

// Not instrumented either: ASan would take the call of a function that does not return,
// on a stack it does not know, for a stack switch it must warn about.
[[gnu::no_sanitize("address", "undefined", "thread")]] int child_trampoline(void* setup) {
    child_main(*static_cast<ChildSetup*>(setup));
}

// The child's stack for clone3 (vfork's child uses the parent's).
alignas(64) char g_child_stack[64 * 1024];

// Starts the child in `cgroup_dir` with clone3; -errno when the kernel cannot (before
// Linux 5.7: ENOSYS, E2BIG) or will not (EACCES, EBUSY...), and the caller forks as usual.
pid_t clone_into_cgroup(ChildSetup& setup, int cgroup_dir) {
    if (!k_has_clone3)
        return -ENOSYS;
    clone_args args{};
    args.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.stack = reinterpret_cast<std::uintptr_t>(g_child_stack);
    args.stack_size = sizeof g_child_stack;
    args.cgroup = static_cast<std::uint64_t>(cgroup_dir);
    return static_cast<pid_t>(redlock_clone3(&args, sizeof args, child_trampoline, &setup));
}

} // namespace

util::Expected<Child> Child::spawn(const SpawnOptions& options) {
    // Everything the child needs is prepared before fork: after it, only async-signal-safe
    // calls until exec.
    std::vector<std::string> env_set;
    std::vector<char*> envp = build_environment(options, env_set);
    // execvpe does not write to its arguments (POSIX: the const is left out for C's sake).
    std::vector<char*> argv;
    argv.reserve(options.argv.size() + 1);
    for (const auto& s : options.argv)
        argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);

    Child child;
    child.m_terminal = owns_foreground_terminal();
    child.m_session = !child.m_terminal && !has_controlling_terminal();
    ChildSetup setup{argv.data(),
                     envp.data(),
                     options.child_mask,
                     ::getpid(),
                     child.m_session,
                     child.m_terminal,
                     -1,
                     0,
                     options.cgroup ? 0 : -1};
    pid_t pid = -ENOSYS;
    if (options.cgroup)
        pid = clone_into_cgroup(setup, options.cgroup->dir_fd());
    if (pid < 0) {
        // vfork: the parent sleeps until the child has exec'd or exited, and the child
        // shares our memory, so its results come back in `setup`, with no pipe, and no
        // page tables are copied. Without clone3 it joins the cgroup itself.
        setup.cgroup_procs = options.cgroup ? options.cgroup->procs_fd() : -1;
        pid = ::vfork();
        if (pid == 0)
            child_main(setup);
    }
    if (pid < 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("fork: {}", std::strerror(errno)));
    if (!child.m_session)
        ::setpgid(pid, pid); // done by the child already (vfork); harmless again
    if (child.m_terminal)
        ::tcsetpgrp(STDIN_FILENO, pid);
    child.m_pid = pid;
    child.m_cgroup_error = setup.cgroup_errno;
    if (child.in_cgroup())
        child.m_cgroup = options.cgroup;
    if (child.m_terminal)
        child.m_tty = STDIN_FILENO;

    if (int err = setup.exec_errno; err != 0) {
        int status = 0;
        ::waitpid(pid, &status, 0);
        child.reclaim_terminal();
        auto kind = err == ENOENT ? util::ErrorKind::not_found : util::ErrorKind::cannot_execute;
        return util::fail(kind,
                          util::format("cannot run '{}': {}", options.argv[0], std::strerror(err)));
    }
    return child;
}

util::Error exec_in_place(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& s : argv)
        args.push_back(const_cast<char*>(s.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    const int err = errno;
    return {err == ENOENT ? util::ErrorKind::not_found : util::ErrorKind::cannot_execute,
            util::format("cannot run '{}': {}", argv[0], std::strerror(err))};
}

void Child::signal_group(int sig) const {
    if (m_pid > 0)
        ::kill(-m_pid, sig);
}

void Child::signal_tree(int sig) const {
    if (m_cgroup)
        m_cgroup->signal(sig);
    signal_group(sig);
    for (pid_t p : descendants())
        if (p != m_ignored)
            ::kill(p, sig);
}

void Child::reclaim_terminal() const {
    // Only from PROGRAM: after Ctrl-Z and bg, the shell may have given it to another job.
    if (m_terminal && m_tty >= 0 && ::tcgetpgrp(m_tty) == m_pid)
        ::tcsetpgrp(m_tty, ::getpgrp()); // SIGTTOU is blocked in redlock
}

void Child::suspend_with_program() const {
    if (!m_terminal)
        return;
    reclaim_terminal();
    ::kill(::getpid(), SIGSTOP);
    // Resumed (fg or bg): give PROGRAM the terminal again if we are in the foreground. The
    // caller decides whether PROGRAM may continue.
    if (::tcgetpgrp(m_tty) == ::getpgrp())
        ::tcsetpgrp(m_tty, m_pid);
}

util::Expected<bool> Child::hand_terminal_on_demand() {
    if (m_tty < 0) {
        // PROGRAM's stdin may be a pipe while it opened /dev/tty itself (less, ssh, sudo).
        if (::isatty(STDIN_FILENO)) {
            m_tty = STDIN_FILENO;
        } else {
            m_tty_owner.reset(::open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC));
            if (!m_tty_owner)
                return util::fail(util::ErrorKind::internal,
                                  util::format("/dev/tty: {}", std::strerror(errno)));
            m_tty = m_tty_owner.get();
        }
    }
    bool suspended = false;
    if (::tcgetpgrp(m_tty) != ::getpgrp()) {
        ::kill(::getpid(), SIGSTOP); // resumed here by fg or bg
        suspended = true;
    }
    if (::tcgetpgrp(m_tty) == ::getpgrp() && ::tcsetpgrp(m_tty, m_pid) == 0)
        m_terminal = true;
    return suspended;
}

ReapResult reap_children(pid_t program, std::optional<int>& program_status) {
    ReapResult result;
    for (;;) {
        int status = 0;
        pid_t pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED);
        if (pid == 0) {
            result.children_remain = true;
            return result;
        }
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            return result; // ECHILD: the whole tree is gone
        }
        if (pid != program)
            continue;
        if (WIFSTOPPED(status)) {
            int sig = WSTOPSIG(status);
            if (sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU)
                result.program_stopped_by = sig;
        } else if (WIFEXITED(status) || WIFSIGNALED(status)) {
            program_status = status;
        }
    }
}

int exit_status_of(int wait_status) {
    if (WIFEXITED(wait_status))
        return WEXITSTATUS(wait_status);
    if (WIFSIGNALED(wait_status))
        return 128 + WTERMSIG(wait_status);
    return util::exit_code::internal;
}

void become_subreaper() {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
}

namespace {

struct ProcEntry {
    pid_t pid;
    pid_t ppid;
    pid_t pgrp;
    int exit_signal; // what its parent gets when it ends: 0 for a "clone child"
};

// The 38th field of a stat line, counted from the state (the 3rd) at `fields`: the exit
// signal; -1 when the line is too short.
int exit_signal_field(const char* fields) {
    const char* s = fields;
    for (int field = 3; field < 38; ++field) {
        s = std::strchr(s, ' ');
        if (!s)
            return -1;
        ++s;
    }
    return static_cast<int>(std::strtol(s, nullptr, 10));
}

// Every process's pid, parent and process group, from /proc/<pid>/stat
// ("pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses, so parse from
// the last ')').
std::vector<ProcEntry> scan_processes() {
    std::vector<ProcEntry> out;
    DIR* dir = ::opendir("/proc");
    if (!dir)
        return out;
    while (dirent* entry = ::readdir(dir)) {
        char* end = nullptr;
        long pid = std::strtol(entry->d_name, &end, 10);
        if (pid <= 0 || *end != '\0')
            continue;
        char path[64];
        (void)std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        util::UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
        if (!fd)
            continue;
        char buf[512];
        ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        char* close_paren = std::strrchr(buf, ')');
        if (!close_paren)
            continue;
        char state = 0;
        long ppid = 0;
        long pgrp = 0;
        // The kernel writes this line; the count check is all the validation it needs.
        if (std::sscanf(close_paren + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) // NOLINT
            continue;
        const char* fields = close_paren + 2; // the state
        out.push_back({static_cast<pid_t>(pid), static_cast<pid_t>(ppid), static_cast<pid_t>(pgrp),
                       fields < buf + n ? exit_signal_field(fields) : -1});
    }
    ::closedir(dir);
    return out;
}

} // namespace

bool alone_in_process_group() {
    pid_t self = ::getpid();
    pid_t group = ::getpgrp();
    for (const auto& p : scan_processes())
        if (p.pgrp == group && p.pid != self)
            return false;
    return true;
}

std::vector<pid_t> descendants(pid_t root) {
    if (root <= 0)
        root = ::getpid();
    std::unordered_multimap<pid_t, pid_t> children_of;
    for (const auto& p : scan_processes())
        // A child of the root with no exit signal is a helper the root made with clone()
        // (the watchdog, an --on-lost hook's runner): PROGRAM cannot make one (orphans
        // re-parented to the root get SIGCHLD as their exit signal), and its tree is not
        // PROGRAM's.
        if (p.ppid != root || p.exit_signal != 0)
            children_of.emplace(p.ppid, p.pid);
    std::vector<pid_t> out;
    std::vector<pid_t> queue{root};
    while (!queue.empty()) {
        pid_t parent = queue.back();
        queue.pop_back();
        auto [first, last] = children_of.equal_range(parent);
        for (auto it = first; it != last; ++it) {
            out.push_back(it->second);
            queue.push_back(it->second);
        }
    }
    return out;
}

} // namespace redlock::process
