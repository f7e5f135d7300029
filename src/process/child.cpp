#include "process/child.hpp"

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
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

// Environment for PROGRAM: ours, with `env` set (replacing any inherited values).
std::vector<std::string> build_environment(const SpawnOptions& options) {
    std::vector<std::string> out;
    for (char** e = environ; *e; ++e) {
        std::string_view entry(*e);
        bool replaced = false;
        for (const auto& [name, value] : options.env)
            replaced |=
                entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=';
        if (!replaced)
            out.emplace_back(entry);
    }
    for (const auto& [name, value] : options.env)
        out.push_back(name + "=" + value);
    return out;
}

} // namespace

util::Expected<Child> Child::spawn(const SpawnOptions& options) {
    // Everything the child needs is prepared before fork: after it, only async-signal-safe
    // calls until exec.
    std::vector<std::string> env_strings = build_environment(options);
    std::vector<char*> envp;
    for (auto& s : env_strings)
        envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_strings = options.argv;
    std::vector<char*> argv;
    for (auto& s : argv_strings)
        argv.push_back(s.data());
    argv.push_back(nullptr);

    Child child;
    child.m_terminal = owns_foreground_terminal();
    child.m_session = !child.m_terminal && !has_controlling_terminal();
    volatile const bool terminal = child.m_terminal; // volatile: read again after vfork
    volatile const bool session = child.m_session;
    const int cgroup_procs = options.cgroup_procs;
    const pid_t parent = ::getpid();
    char** const argv_data = argv.data();
    char** const envp_data = envp.data();
    // vfork: the parent sleeps until the child has exec'd or exited, and the child shares
    // our memory, so exec's errno comes back through this variable, with no pipe, and no
    // page tables are copied. The child makes only system calls before exec or _exit.
    volatile int exec_errno = 0;
    volatile int cgroup_errno = cgroup_procs >= 0 ? 0 : -1;
    pid_t pid = ::vfork();
    if (pid < 0)
        return util::fail(util::ErrorKind::internal,
                          util::format("fork: {}", std::strerror(errno)));
    if (pid == 0) {
        if (session)
            ::setsid();
        else
            ::setpgid(0, 0);
        // Before exec, so that nothing PROGRAM starts can be outside the cgroup.
        if (cgroup_procs >= 0 && ::write(cgroup_procs, "0", 1) != 1)
            cgroup_errno = errno;
        if (terminal)
            ::tcsetpgrp(STDIN_FILENO, ::getpid()); // SIGTTOU is still blocked here
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent)
            ::_exit(util::exit_code::internal); // redlock died before we got here
        if (options.child_mask)
            ::sigprocmask(SIG_SETMASK, options.child_mask, nullptr);
        ::execvpe(argv_data[0], argv_data, envp_data);
        exec_errno = errno;
        ::_exit(exec_errno == ENOENT ? util::exit_code::not_found
                                     : util::exit_code::cannot_execute);
    }
    if (!session)
        ::setpgid(pid, pid); // done by the child already (vfork); harmless again
    if (terminal)
        ::tcsetpgrp(STDIN_FILENO, pid);
    child.m_pid = pid;
    child.m_cgroup_error = cgroup_errno;
    if (terminal)
        child.m_tty = STDIN_FILENO;

    if (int err = exec_errno; err != 0) {
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
};

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
        out.push_back(
            {static_cast<pid_t>(pid), static_cast<pid_t>(ppid), static_cast<pid_t>(pgrp)});
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
    std::unordered_multimap<pid_t, pid_t> children_of;
    for (const auto& p : scan_processes())
        children_of.emplace(p.ppid, p.pid);
    std::vector<pid_t> out;
    std::vector<pid_t> queue{root > 0 ? root : ::getpid()};
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
