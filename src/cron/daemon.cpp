// The cron daemon's loop (cron/daemon.hpp): the schedule, the runs it starts (one process
// of the same binary per slot, job/slot_run.hpp), their output said line by line, reloads,
// the drain.
#include "cron/daemon.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <optional>
#include <poll.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <climits>

#include "job/slot_run.hpp"
#include "monitor/sd_notify.hpp"
#include "util/duration.hpp"
#include "util/fd.hpp"
#include "util/file.hpp"
#include "util/format.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/sha256.hpp"
#include "util/text.hpp"

extern char** environ;

namespace redlock::cron {

using namespace std::chrono;
using Wall = system_clock;
namespace log = util::log;

milliseconds jitter_delay(const std::string& identity, Instant slot, milliseconds jitter) {
    if (jitter <= 0ms)
        return 0ms;
    const std::string digest =
        util::sha256_hex(util::format("{}\n{}", identity, slot.time_since_epoch().count()));
    const unsigned long long h = std::stoull(digest.substr(0, 15), nullptr, 16);
    return milliseconds(
        static_cast<long long>(h % static_cast<unsigned long long>(jitter.count())));
}

milliseconds catch_up_window(const Settings& settings) {
    return std::max(settings.catch_up.value_or(k_default_catch_up), k_on_time);
}

size_t runs_at_once(const Settings& settings) {
    if (settings.limit > 1)
        return settings.limit;
    return settings.overlap == Overlap::allow ? k_allow_limit : 1;
}

std::vector<Instant> fires_before(const Job& job, Instant at, size_t count) {
    // Back from `at` in windows that grow sixteenfold, until enough fires are in one (or
    // two years were looked at): as many steps as the schedule's period needs, not more.
    constexpr seconds k_farthest = days(800);
    for (seconds back = 64s;; back *= 16) {
        back = std::min(back, k_farthest);
        auto fires = job.fires_between(at - back, at, 1000000);
        if (fires.size() >= count || back == k_farthest) {
            if (fires.size() > count)
                fires.erase(fires.begin(), fires.end() - static_cast<ptrdiff_t>(count));
            return fires;
        }
    }
}

namespace {

constexpr size_t k_max_line = 8192;           // a longer line is said in pieces
constexpr milliseconds k_reload_settle{100};  // after a change in the file's directory
constexpr milliseconds k_linger{2000};        // output after a run's exit, at most
constexpr milliseconds k_keep_margin{600000}; // a slot's record, past what it needs
constexpr milliseconds k_retry_first{1000};   // a run the servers failed, again after
constexpr milliseconds k_retry_most{30000};
// After the grace, a run told to stop whose command ignores TERM is killed this much
// later (its watchdog then stops the command's tree, and its will frees the lock).
constexpr milliseconds k_kill_after{10000};

long long ms_of(Instant t) {
    return duration_cast<milliseconds>(t.time_since_epoch()).count();
}

Wall::time_point wall_of(Instant t) {
    return Wall::time_point(t.time_since_epoch());
}

// A stream of a run's output: bytes in, lines out. A line without its newline at the end
// is a line; one longer than k_max_line is said in pieces of that length.
class LineBuffer {
  public:
    void feed(std::string_view data, std::vector<std::string>& lines) {
        while (!data.empty()) {
            const size_t nl = data.find('\n');
            const size_t take = std::min(nl == std::string_view::npos ? data.size() : nl,
                                         k_max_line - m_partial.size());
            m_partial.append(data.substr(0, take));
            data.remove_prefix(take);
            if (!data.empty() && data.front() == '\n') {
                data.remove_prefix(1);
                lines.push_back(std::move(m_partial));
                m_partial.clear();
            } else if (m_partial.size() >= k_max_line) {
                lines.push_back(std::move(m_partial));
                m_partial.clear();
            }
        }
    }
    void finish(std::vector<std::string>& lines) {
        if (!m_partial.empty())
            lines.push_back(std::move(m_partial));
        m_partial.clear();
    }

  private:
    std::string m_partial;
};

// A line a job printed, made safe for the daemon's own output: one line (control
// characters and bytes that are not UTF-8 escaped, as util::printable does), tabs kept, a
// CR before the newline dropped.
std::string shown(std::string_view line) {
    if (!line.empty() && line.back() == '\r')
        line.remove_suffix(1);
    std::string out;
    for (size_t at = 0; at <= line.size();) {
        const size_t tab = std::min(line.find('\t', at), line.size());
        out += util::printable(line.substr(at, tab - at));
        if (tab < line.size())
            out += '\t';
        at = tab + 1;
    }
    return out;
}

// Writes all of `text` to `fd`; a reader gone (EPIPE) or a full disk drops it.
void write_all(int fd, std::string_view text) {
    while (!text.empty()) {
        const ssize_t n = ::write(fd, text.data(), text.size());
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        text.remove_prefix(static_cast<size_t>(n));
    }
}

std::string host_name() {
    std::array<char, HOST_NAME_MAX + 1> name{};
    if (::gethostname(name.data(), name.size() - 1) != 0)
        return "localhost";
    return name.data();
}

const char* signal_name(int sig) {
    switch (sig) {
    case SIGTERM:
        return "SIGTERM";
    case SIGINT:
        return "SIGINT";
    case SIGQUIT:
        return "SIGQUIT";
    default:
        return "a signal";
    }
}

job::SlotOverlap slot_overlap(Overlap overlap) {
    switch (overlap) {
    case Overlap::skip:
        return job::SlotOverlap::skip;
    case Overlap::allow:
        return job::SlotOverlap::allow;
    case Overlap::queue:
        return job::SlotOverlap::queue;
    case Overlap::replace:
        return job::SlotOverlap::replace;
    }
    return job::SlotOverlap::skip;
}

// The signals the daemon acts on, read from a signalfd; PIPE blocked too (a reader gone
// is a write's EPIPE).
class Signals {
  public:
    Signals() {
        sigemptyset(&m_set);
        for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGQUIT})
            sigaddset(&m_set, sig);
        sigset_t blocked = m_set;
        sigaddset(&blocked, SIGPIPE);
        ::sigprocmask(SIG_BLOCK, &blocked, &m_original);
        m_fd.reset(::signalfd(-1, &m_set, SFD_NONBLOCK | SFD_CLOEXEC));
    }
    [[nodiscard]] int fd() const { return m_fd.get(); }
    [[nodiscard]] std::vector<int> read() {
        std::vector<int> out;
        signalfd_siginfo info{};
        while (::read(m_fd.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info))
            out.push_back(static_cast<int>(info.ssi_signo));
        return out;
    }
    // What a child starts with: no signal blocked, each of ours back to its default.
    void prepare(posix_spawnattr_t& attr) const {
        sigset_t none;
        sigemptyset(&none);
        sigset_t defaults = m_set;
        sigaddset(&defaults, SIGPIPE);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setsigdefault(&attr, &defaults);
    }

  private:
    sigset_t m_set{};
    sigset_t m_original{};
    util::UniqueFd m_fd;
};

// What the daemon says: the jobs' lines (stdout and stderr, each with the job's name) and
// one line per slot; with --json, all of them as JSON objects on stdout.
class Output {
  public:
    Output(bool json, std::string host) : m_json(json), m_host(std::move(host)) {}

    void job_line(const std::string& job, Instant slot, bool err, std::string_view line) const {
        if (m_json) {
            util::JsonWriter w;
            w.begin_object()
                .field("job", job)
                .field("slot", slot_text(slot))
                .field("host", m_host)
                .field("stream", err ? "stderr" : "stdout")
                .field("line", line)
                .end_object();
            write_all(STDOUT_FILENO, w.str()); // its own newline
            return;
        }
        write_all(err ? STDERR_FILENO : STDOUT_FILENO, util::format("{}: {}\n", job, shown(line)));
    }

    // How a slot went here. `end` nullopt: the run died without saying (`status`).
    void slot_line(const std::string& job, Instant slot, const std::optional<job::SlotEnd>& end,
                   int status, bool retried) const {
        const job::SlotEnd e =
            end.value_or(job::SlotEnd{.outcome = WIFSIGNALED(status) ? "killed" : "failed"});
        const bool here = e.fence > 0;
        if (m_json) {
            util::JsonWriter w;
            w.begin_object()
                .field("job", job)
                .field("slot", slot_text(slot))
                .field("host", here           ? std::optional<std::string>(m_host)
                               : e.by.empty() ? std::nullopt
                                              : std::optional<std::string>(e.by))
                .field("fence", here ? std::optional<long long>(e.fence) : std::nullopt)
                .field("outcome", e.outcome)
                .field("exit", e.status >= 0 ? std::optional<int>(e.status) : std::nullopt)
                .field("duration_ms", here ? std::optional<long long>(e.held_ms) : std::nullopt);
            if (e.missed > 0)
                w.field("missed", e.missed);
            if (retried)
                w.field("retry", true);
            w.end_object();
            write_all(STDOUT_FILENO, w.str()); // its own newline
            return;
        }
        std::string text = util::format("cron: {} {}: ", job, slot_text(slot));
        if (e.outcome == "skipped-slot")
            text += e.by.empty() ? "run by another host" : util::format("run by {}", e.by);
        else if (e.outcome == "skipped-overlap")
            text += "skipped-overlap: the run of an earlier slot still runs";
        else if (e.outcome == "missed")
            text += "missed: past its catch-up window";
        else if (!here && e.outcome == "interrupted")
            text += "interrupted before the slot was decided: not run here";
        else if (here)
            text += util::format("{} on {} (fence {}, exit {}, {})", e.outcome, m_host, e.fence,
                                 e.status, util::format_duration(milliseconds(e.held_ms)));
        else
            text += util::format("{} (exit {})", e.outcome, exit_of(status));
        if (e.missed > 0)
            text += util::format("; {} earlier slot{} recorded missed", e.missed,
                                 e.missed == 1 ? "" : "s");
        if (retried)
            text += "; trying again";
        if (e.outcome == "failed" || e.outcome == "killed")
            log::error("{}", text);
        else
            log::note("{}", text);
    }

  private:
    static int exit_of(int status) {
        return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    }

    bool m_json;
    std::string m_host;
};

// A job of the file, and the slot it starts next.
struct Scheduled {
    Job job;
    std::optional<Instant> next;
    Wall::time_point start_at = Wall::time_point::max(); // next, and its jitter
};

// A run the daemon started: one slot of one job.
struct Run {
    std::string job;
    Instant slot;
    int attempt = 1;
    std::array<util::UniqueFd, 3> fds; // its stdout, stderr and report pipe
    std::array<LineBuffer, 3> lines;
    std::optional<int> wait_status;
    Wall::time_point exited_at{};
    bool started = false; // PROGRAM runs
    std::optional<job::SlotEnd> end;
    bool stopped = false; // told to stop (a drain)
};

struct Retry {
    std::string job;
    Instant slot;
    int attempt = 1;
    Wall::time_point at;
};

class Daemon {
  public:
    Daemon(const DaemonOptions& options, const config::Config& config, std::string text,
           Crontab crontab)
        : m_options(options), m_config(config), m_output(options.json, host_name()),
          m_text(std::move(text)) {
        const auto now = floor<seconds>(Wall::now());
        for (auto& job : crontab.jobs)
            m_jobs.push_back(Scheduled{std::move(job), std::nullopt});
        for (auto& s : m_jobs) {
            say_scheduled(s.job, now);
            catch_up(s, now);
            plan(s, now);
        }
        watch_file();
        std::string why_not;
        m_notify = monitor::NotifySocket::from_environment(why_not);
        if (!why_not.empty())
            log::verbose("{}; systemd is not told how the daemon goes", why_not);
        std::string watchdog_why_not;
        m_watchdog = monitor::NotifySocket::watchdog_interval(watchdog_why_not);
        if (!watchdog_why_not.empty())
            log::verbose("{}", watchdog_why_not);
    }

    int run() {
        notify("READY=1\n" + status_text());
        std::vector<pollfd> fds;
        std::vector<std::pair<pid_t, size_t>> owners; // per pollfd past the first two
        for (;;) {
            auto now = Wall::now();
            if (!m_draining) {
                start_due(now);
                retry_due(now);
            }
            finish_runs(now);
            if (m_draining) {
                if (m_runs.empty())
                    break;
                if (now >= m_drain_until && !m_stopping)
                    stop_runs(false);
                if (m_stopping && now >= m_kill_at)
                    kill_runs();
            }
            ping_watchdog(now);
            if (m_reload_at && now >= *m_reload_at)
                reload("the file changed");

            fds.clear();
            owners.clear();
            fds.push_back({m_signals.fd(), POLLIN, 0});
            fds.push_back({m_inotify.get(), POLLIN, 0});
            for (auto& [pid, run] : m_runs)
                for (size_t i = 0; i < run.fds.size(); ++i)
                    if (run.fds[i]) {
                        fds.push_back({run.fds[i].get(), POLLIN, 0});
                        owners.emplace_back(pid, i);
                    }
            now = Wall::now();
            const int rc = ::poll(fds.data(), fds.size(), timeout_ms(now));
            if (rc < 0 && errno != EINTR) {
                log::error("cron: poll: {}", std::strerror(errno));
                return util::exit_code::internal;
            }
            if (rc <= 0)
                continue;
            if (fds[0].revents)
                on_signals();
            if (fds[1].revents)
                on_file_events();
            for (size_t i = 2; i < fds.size(); ++i)
                if (fds[i].revents)
                    if (auto it = m_runs.find(owners[i - 2].first); it != m_runs.end())
                        read_output(it->second, owners[i - 2].second);
        }
        log::note("cron: drained; exiting");
        return 0;
    }

  private:
    // The first slot due after `after`, and when to start it.
    void plan(Scheduled& s, Instant after) {
        s.next = s.job.next_fire(after);
        time(s);
    }

    // When to start the slot `s.next`: at its instant and its jitter, on the servers'
    // clock as far as the runs measured it (a host whose clock runs ahead starts later,
    // not early: its runs would only wait).
    void time(Scheduled& s) const {
        s.start_at = s.next ? wall_of(*s.next) +
                                  jitter_delay(s.job.identity, *s.next, s.job.settings.jitter) +
                                  m_ahead
                            : Wall::time_point::max();
    }

    // A run measured the servers' clock `offset` ms ahead of this host's (negative:
    // behind). The median of the last few, so that one run descheduled at the wrong
    // moment does not move every start.
    void on_clock(long long offset) {
        m_offsets.push_back(offset);
        if (m_offsets.size() > 5)
            m_offsets.erase(m_offsets.begin());
        auto sorted = m_offsets;
        std::ranges::sort(sorted);
        const milliseconds ahead(std::clamp<long long>(-sorted[sorted.size() / 2], 0, 3600000));
        if (std::chrono::abs(ahead - m_ahead) < 20ms)
            return;
        log::verbose("cron: this host's clock is {} ahead of the servers'; slots start that "
                     "much later",
                     util::format_duration(ahead));
        m_ahead = ahead;
        for (auto& s : m_jobs)
            time(s);
    }

    // At the start: the job's latest slot, if it is still within its window, is run now
    // when no host ran it (its run finds out); never more than that one.
    void catch_up(Scheduled& s, Instant now) {
        const auto latest = fires_before(s.job, now, 1);
        if (latest.empty())
            return;
        const Instant slot = latest.back();
        const auto window = catch_up_window(s.job.settings) +
                            jitter_delay(s.job.identity, slot, s.job.settings.jitter);
        if (now - slot <= window)
            spawn(s.job, slot, 1);
    }

    void start_due(Wall::time_point now) {
        const Instant today = floor<seconds>(now - m_ahead); // on the servers' clock
        for (auto& s : m_jobs) {
            if (!s.next || now < s.start_at)
                continue;
            // Behind (the daemon stopped, the clock set forward): only the latest slot due
            // starts; its run records the others missed.
            Instant slot = *s.next;
            if (const auto latest = fires_before(s.job, today, 1);
                !latest.empty() && latest.back() > slot)
                slot = latest.back();
            spawn(s.job, slot, 1);
            plan(s, slot);
        }
    }

    void retry_due(Wall::time_point now) {
        for (auto it = m_retries.begin(); it != m_retries.end();) {
            if (now < it->at) {
                ++it;
                continue;
            }
            const Retry retry = *it;
            it = m_retries.erase(it);
            if (const auto* s = find(retry.job))
                spawn(s->job, retry.slot, retry.attempt);
        }
    }

    [[nodiscard]] const Scheduled* find(const std::string& identity) const {
        for (const auto& s : m_jobs)
            if (s.job.identity == identity)
                return &s;
        return nullptr;
    }

    [[nodiscard]] int timeout_ms(Wall::time_point now) const {
        auto until = Wall::time_point::max();
        if (!m_draining) {
            for (const auto& s : m_jobs)
                until = std::min(until, s.start_at);
            for (const auto& r : m_retries)
                until = std::min(until, r.at);
        } else if (!m_stopping) {
            until = m_drain_until;
        } else if (!m_killed) {
            until = m_kill_at;
        }
        for (const auto& [pid, run] : m_runs)
            if (run.wait_status)
                until = std::min(until, run.exited_at + k_linger);
        if (m_reload_at)
            until = std::min(until, *m_reload_at);
        if (m_watchdog)
            until = std::min(until, m_next_ping);
        if (until <= now)
            return 0;
        // Rounded up: a slot is never started before its time. At most a minute: a clock
        // set meanwhile is seen within one.
        return static_cast<int>(
            std::min<long long>(ceil<milliseconds>(until - now).count(), 60000));
    }

    // Starts the run of `slot` of `job`.
    void spawn(const Job& job, Instant slot, int attempt) {
        for (const auto& [pid, run] : m_runs)
            if (run.job == job.identity && run.slot == slot)
                return; // under way here already
        job::SlotRun spec;
        spec.config = m_config;
        spec.run.name = job.identity;
        spec.run.ttl = m_config.ttl;
        spec.run.program = {job.shell, "-c", job.command};
        spec.run.max_hold = job.settings.timeout;
        spec.run.limit = runs_at_once(job.settings);
        job::CronSlot c;
        c.instant_ms = ms_of(slot);
        for (Instant f : fires_before(job, slot - seconds(1), job::CronSlot::k_previous_fires))
            c.previous_ms.push_back(ms_of(f));
        const auto next = job.next_fire(slot);
        c.next_ms = next ? ms_of(*next) : 0;
        c.schedule = job.schedule_text;
        c.zone = job.zone.name();
        c.overlap = slot_overlap(job.settings.overlap);
        c.at_least_once = job.settings.at_least_once;
        c.window =
            jitter_delay(job.identity, slot, job.settings.jitter) + catch_up_window(job.settings);
        const milliseconds until_next = next ? duration_cast<milliseconds>(*next - slot) : 0ms;
        c.keep = std::max(c.window, std::min(until_next, m_config.history_max_age)) + k_keep_margin;
        spec.run.cron = std::move(c);
        spec.dir = job.settings.dir.value_or("");
        spec.daemon = ::getpid();
        spec.verbosity = m_options.verbosity;

        util::UniqueFd input(::memfd_create("redlock-slot", MFD_CLOEXEC));
        const std::string bytes = job::encode_slot_run(spec);
        if (!input ||
            ::write(input.get(), bytes.data(), bytes.size()) !=
                static_cast<ssize_t>(bytes.size()) ||
            ::lseek(input.get(), 0, SEEK_SET) != 0) {
            log::error("cron: {} {}: cannot start its run: {}", job.identity, slot_text(slot),
                       std::strerror(errno));
            return;
        }
        std::array<util::UniqueFd, 3> reads;
        std::array<util::UniqueFd, 3> writes;
        for (size_t i = 0; i < 3; ++i) {
            int p[2];
            if (::pipe2(p, O_CLOEXEC) != 0) {
                log::error("cron: {} {}: cannot start its run: pipe: {}", job.identity,
                           slot_text(slot), std::strerror(errno));
                return;
            }
            reads[i].reset(p[0]);
            writes[i].reset(p[1]);
            ::fcntl(p[0], F_SETFL, O_NONBLOCK);
        }
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, input.get(), STDIN_FILENO);
        posix_spawn_file_actions_adddup2(&actions, writes[0].get(), STDOUT_FILENO);
        posix_spawn_file_actions_adddup2(&actions, writes[1].get(), STDERR_FILENO);
        posix_spawn_file_actions_adddup2(&actions, writes[2].get(), job::k_report_fd);
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        // Its own process group: a Ctrl-C on the daemon's terminal is the daemon's to
        // drain, not every run's at once.
        posix_spawnattr_setpgroup(&attr, 0);
        m_signals.prepare(attr);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                            POSIX_SPAWN_SETPGROUP);
        const std::string text = slot_text(slot);
        std::vector<std::string> args{"redlock", job::k_slot_command, job.identity, text};
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        auto env = environment(job, text);
        std::vector<char*> envp;
        for (auto& e : env)
            envp.push_back(e.data());
        envp.push_back(nullptr);
        pid_t pid = -1;
        const int rc =
            ::posix_spawn(&pid, "/proc/self/exe", &actions, &attr, argv.data(), envp.data());
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
        if (rc != 0) {
            log::error("cron: {} {}: cannot start its run: {}", job.identity, text,
                       std::strerror(rc));
            return;
        }
        Run run;
        run.job = job.identity;
        run.slot = slot;
        run.attempt = attempt;
        run.fds = std::move(reads);
        log::verbose("cron: {} {}: run {} started", job.identity, text, pid);
        m_runs.emplace(pid, std::move(run));
    }

    // The run's environment: the daemon's (without systemd's notification and socket
    // variables, which are the daemon's own), the job's variables, and REDLOCK_SLOT.
    std::vector<std::string> environment(const Job& job, const std::string& slot) const {
        std::map<std::string, std::string> vars;
        for (char** e = environ; *e; ++e) {
            std::string_view entry(*e);
            const size_t eq = entry.find('=');
            if (eq == std::string_view::npos)
                continue;
            const std::string name(entry.substr(0, eq));
            if (name == "NOTIFY_SOCKET" || name.starts_with("WATCHDOG_") ||
                name.starts_with("LISTEN_"))
                continue;
            vars[name] = std::string(entry.substr(eq + 1));
        }
        for (const auto& [name, value] : job.environment)
            vars[name] = value;
        vars["REDLOCK_SLOT"] = slot;
        std::vector<std::string> out;
        out.reserve(vars.size());
        for (const auto& [name, value] : vars)
            out.push_back(name + "=" + value);
        return out;
    }

    // Reads what is there on one of a run's pipes; false when nothing was.
    bool read_output(Run& run, size_t which) {
        std::array<char, 16384> buffer{};
        std::vector<std::string> lines;
        const ssize_t n = ::read(run.fds[which].get(), buffer.data(), buffer.size());
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return false;
        if (n <= 0) {
            run.lines[which].finish(lines);
            run.fds[which].reset();
        } else {
            run.lines[which].feed({buffer.data(), static_cast<size_t>(n)}, lines);
        }
        for (const auto& line : lines) {
            if (which < 2) {
                m_output.job_line(run.job, run.slot, which == 1, line);
                continue;
            }
            const auto report = job::parse_report_line(line);
            if (report && report->clock) {
                on_clock(*report->clock);
            } else if (report && report->started) {
                run.started = true;
                log::verbose("cron: {} {}: started here (fence {})", run.job, slot_text(run.slot),
                             *report->started);
            } else if (report && report->ended) {
                run.end = report->ended;
            }
        }
        return n > 0;
    }

    void on_signals() {
        for (int sig : m_signals.read()) {
            if (sig == SIGCHLD) {
                reap();
            } else if (sig == SIGHUP) {
                reload("SIGHUP");
            } else if (m_draining) { // a second TERM: the grace is over
                m_drain_until = Wall::now();
            } else {
                drain(sig);
            }
        }
    }

    // Every child that ended (an orphan of a run's tree too: the daemon is their
    // subreaper, or PID 1).
    void reap() {
        for (;;) {
            int status = 0;
            const pid_t pid = ::waitpid(-1, &status, WNOHANG);
            if (pid <= 0)
                return;
            if (auto it = m_runs.find(pid); it != m_runs.end()) {
                it->second.wait_status = status;
                it->second.exited_at = Wall::now();
            }
        }
    }

    // Runs that exited and said all they had (or lingered past k_linger): their slot line,
    // and a retry when the servers failed them within the slot's window.
    void finish_runs(Wall::time_point now) {
        for (auto it = m_runs.begin(); it != m_runs.end();) {
            Run& run = it->second;
            const bool open = std::ranges::any_of(run.fds, [](const auto& fd) { return !!fd; });
            if (!run.wait_status || (open && now < run.exited_at + k_linger)) {
                ++it;
                continue;
            }
            for (size_t i = 0; i < run.fds.size(); ++i) {
                while (run.fds[i] && read_output(run, i)) {
                }
                if (run.fds[i]) { // left open by what the run left behind
                    std::vector<std::string> rest;
                    run.lines[i].finish(rest);
                    for (const auto& line : rest)
                        if (i < 2)
                            m_output.job_line(run.job, run.slot, i == 1, line);
                    run.fds[i].reset();
                }
            }
            const bool again = should_retry(run, now);
            // A run the drain stopped before its slot was decided: interrupted, not killed
            // (nothing ran; another host, or this one at its next start, may run the slot).
            const auto end =
                run.end || !run.stopped || run.started
                    ? run.end
                    : std::optional<job::SlotEnd>(job::SlotEnd{.outcome = "interrupted"});
            m_output.slot_line(run.job, run.slot, end, *run.wait_status, again);
            if (again)
                m_retries.push_back(
                    {run.job, run.slot, run.attempt + 1,
                     now + std::min(k_retry_first * (1 << std::min(run.attempt - 1, 5)),
                                    k_retry_most)});
            it = m_runs.erase(it);
        }
    }

    // Servers out of reach (69) while the slot can still be run, and no later slot of the
    // job has started here since.
    [[nodiscard]] bool should_retry(const Run& run, Wall::time_point now) const {
        const int status = *run.wait_status;
        if (m_draining || !WIFEXITED(status) || WEXITSTATUS(status) != util::exit_code::unavailable)
            return false;
        const Scheduled* s = find(run.job);
        if (s == nullptr || (s->next && *s->next <= run.slot))
            return false;
        if (s->next && s->job.next_fire(run.slot) != s->next)
            return false; // a later slot came meanwhile: it is the one to run
        const auto window = catch_up_window(s->job.settings) +
                            jitter_delay(run.job, run.slot, s->job.settings.jitter);
        return now < wall_of(run.slot) + window;
    }

    void drain(int sig) {
        m_draining = true;
        m_retries.clear();
        m_drain_until = Wall::now() + m_options.grace;
        notify("STOPPING=1\nSTATUS=draining");
        log::note("cron: {}: no new slots; {} run{} finishing (at most {})", signal_name(sig),
                  m_runs.size(), m_runs.size() == 1 ? "" : "s",
                  util::format_duration(m_options.grace));
        stop_runs(true);
    }

    // Tells runs to stop (TERM: a run passes it on to PROGRAM, and records its slot
    // interrupted): those still deciding, or all of them once the grace is over.
    void stop_runs(bool undecided_only) {
        for (auto& [pid, run] : m_runs) {
            if (run.stopped || run.wait_status || (undecided_only && run.started))
                continue;
            run.stopped = true;
            ::kill(pid, SIGTERM);
        }
        if (!undecided_only) {
            m_stopping = true;
            m_kill_at = Wall::now() + k_kill_after;
        }
    }

    void kill_runs() {
        if (m_killed)
            return;
        m_killed = true;
        for (auto& [pid, run] : m_runs)
            if (!run.wait_status) {
                log::note("cron: {} {}: its run did not stop; killed", run.job,
                          slot_text(run.slot));
                ::kill(pid, SIGKILL);
            }
    }

    void watch_file() {
        m_inotify.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
        if (!m_inotify)
            return;
        const auto dir = std::filesystem::path(m_options.file).parent_path();
        const std::string where = dir.empty() ? "." : dir.string();
        if (::inotify_add_watch(m_inotify.get(), where.c_str(),
                                IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                                    IN_DELETE | IN_ATTRIB) < 0) {
            log::note("cron: changes to {} are not watched ({}): send SIGHUP after one",
                      m_options.file, std::strerror(errno));
            m_inotify.reset();
        }
    }

    // Something changed in the file's directory: read it again once things settle (an
    // editor writes, renames, sets modes), and only if its text changed.
    void on_file_events() {
        std::array<char, 8192> buffer{};
        while (::read(m_inotify.get(), buffer.data(), buffer.size()) > 0) {
        }
        m_reload_at = Wall::now() + k_reload_settle;
    }

    void reload(std::string_view why) {
        m_reload_at.reset();
        int error = 0;
        auto content = util::read_file(m_options.file.c_str(), size_t{4} << 20, error);
        if (content && content->text == m_text)
            return;
        std::optional<std::string> text = content ? std::optional(content->text) : std::nullopt;
        auto parsed = text ? parse_crontab(*text, m_options.file)
                           : util::Expected<Crontab>(util::fail(
                                 util::ErrorKind::config,
                                 util::format("cannot read crontab '{}': {}", m_options.file,
                                              util::read_error_text(error))));
        if (!parsed) {
            if (text != m_refused) // said once per text
                log::error("cron: {}; keeping the {} job{} read before", parsed.error().message,
                           m_jobs.size(), m_jobs.size() == 1 ? "" : "s");
            m_refused = text;
            return;
        }
        m_text = *text;
        m_refused.reset();
        const auto now = floor<seconds>(Wall::now());
        std::vector<Scheduled> jobs;
        size_t added = 0;
        for (auto& job : parsed->jobs) {
            const Scheduled* before = find(job.identity);
            const bool same = before != nullptr && before->job.schedule == job.schedule &&
                              before->job.zone == job.zone &&
                              before->job.settings.jitter == job.settings.jitter;
            Scheduled s{std::move(job), std::nullopt};
            if (same) {
                s.next = before->next;
                time(s);
            } else {
                plan(s, now);
            }
            if (before == nullptr) {
                ++added;
                say_scheduled(s.job, now);
            }
            jobs.push_back(std::move(s));
        }
        const size_t gone = m_jobs.size() + added - jobs.size();
        m_jobs = std::move(jobs);
        std::erase_if(m_retries, [&](const Retry& r) { return find(r.job) == nullptr; });
        log::note("cron: {} ({}): {} job{}, {} new, {} gone", m_options.file, why, m_jobs.size(),
                  m_jobs.size() == 1 ? "" : "s", added, gone);
        notify(status_text());
    }

    void say_scheduled(const Job& job, Instant now) const {
        const auto next = job.next_fire(now);
        log::note(
            "cron: {}: {} ({}){}: {}", job.identity, job.schedule_text, job.zone.name(),
            next ? util::format(", next at {} ({})", slot_text(*next), local_text(job.zone, *next))
                 : std::string(", never again"),
            util::printable(job.command));
    }

    [[nodiscard]] std::string status_text() const {
        const Scheduled* soonest = nullptr;
        for (const auto& s : m_jobs)
            if (s.next && (soonest == nullptr || s.start_at < soonest->start_at))
                soonest = &s;
        return util::format("STATUS={} job{}{}", m_jobs.size(), m_jobs.size() == 1 ? "" : "s",
                            soonest ? util::format("; next: {} at {}", soonest->job.identity,
                                                   slot_text(*soonest->next))
                                    : std::string());
    }

    void notify(const std::string& message) {
        if (!m_notify)
            return;
        std::string error;
        if (!m_notify->send(message, error))
            log::verbose("cron: systemd not told: {}", error);
    }

    void ping_watchdog(Wall::time_point now) {
        if (!m_watchdog || now < m_next_ping)
            return;
        notify("WATCHDOG=1");
        m_next_ping = now + duration_cast<Wall::duration>(*m_watchdog) / 2;
    }

    const DaemonOptions& m_options;
    const config::Config& m_config;
    Output m_output;
    Signals m_signals;
    util::UniqueFd m_inotify;
    std::optional<monitor::NotifySocket> m_notify;
    std::optional<microseconds> m_watchdog;
    Wall::time_point m_next_ping{};
    std::string m_text;                   // the file as last read
    std::optional<std::string> m_refused; // the text last refused, said once
    std::vector<Scheduled> m_jobs;
    std::map<pid_t, Run> m_runs;
    std::vector<Retry> m_retries;
    std::optional<Wall::time_point> m_reload_at;
    std::vector<long long> m_offsets; // the servers' clock, as the last runs measured it
    milliseconds m_ahead{0};          // how far this host's clock runs ahead of it
    bool m_draining = false;
    bool m_stopping = false; // the grace is over: every run told to stop
    bool m_killed = false;   // and later killed
    Wall::time_point m_kill_at = Wall::time_point::max();
    Wall::time_point m_drain_until = Wall::time_point::max();
};

} // namespace

int run_daemon(const DaemonOptions& options, const config::Config& config) {
    int error = 0;
    auto content = util::read_file(options.file.c_str(), size_t{4} << 20, error);
    if (!content) {
        log::error("cannot read crontab '{}': {}", options.file, util::read_error_text(error));
        return util::exit_code::config;
    }
    auto crontab = parse_crontab(content->text, options.file);
    if (!crontab) {
        log::error("{}", crontab.error().message);
        return util::exit_code::config;
    }
    for (const auto& w : crontab->warnings)
        log::note("{}:{}: warning: {}", options.file, w.line, w.message);
    // The runs' orphans come to the daemon (PID 1 in a container is their reaper anyway).
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    Daemon daemon(options, config, std::move(content->text), std::move(*crontab));
    return daemon.run();
}

} // namespace redlock::cron
