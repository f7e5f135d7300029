// `redlock cron --check FILE`: the crontab read as the daemon will read it (src/cron/),
// each job listed with its identity, zone, settings and next fires; what is legal but
// likely a mistake said on stderr.

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <climits>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/stderr_observer.hpp"
#include "cron/crontab.hpp"
#include "cron/daemon.hpp"
#include "job/slot_run.hpp"
#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

namespace redlock::cli {

namespace {

using namespace std::chrono;
namespace log = util::log;

std::string settings_text(const cron::Settings& s) {
    std::string out;
    auto add = [&out](std::string item) { out += (out.empty() ? "" : " ") + item; };
    if (s.catch_up)
        add("catch-up=" + util::format_duration(*s.catch_up));
    add("overlap=" + std::string(cron::overlap_name(s.overlap)));
    if (s.timeout)
        add("timeout=" + util::format_duration(*s.timeout));
    if (s.jitter > 0ms)
        add("jitter=" + util::format_duration(s.jitter));
    if (s.limit > 1)
        add(util::format("limit={}", s.limit));
    if (s.at_least_once)
        add("at-least-once");
    if (s.dir)
        add("dir=" + *s.dir);
    return out;
}

std::vector<cron::Instant> next_fires(const cron::Job& job, cron::Instant from, size_t count) {
    return job.fires_between(from, cron::Instant::max(), count);
}

std::string human_listing(const cron::Crontab& crontab, cron::Instant from, size_t count) {
    std::string out;
    for (const cron::Job& job : crontab.jobs) {
        out += util::format("{}{}  (line {}{})\n", out.empty() ? "" : "\n", job.identity, job.line,
                            job.named ? "" : ", identity derived from the line");
        out += util::format("  schedule  {}  ({})\n", job.schedule_text, job.zone.name());
        out += util::format("  command   {}\n", util::printable(job.command));
        out += util::format("  settings  {}\n", settings_text(job.settings));
        bool first = true;
        for (cron::Instant at : next_fires(job, from, count)) {
            out += util::format("  {:<8}  {}  {}\n", first ? "next" : "", cron::slot_text(at),
                                cron::local_text(job.zone, at));
            first = false;
        }
    }
    return out;
}

std::string json_listing(const std::string& file, const cron::Crontab& crontab, cron::Instant from,
                         size_t count) {
    util::JsonWriter json;
    json.begin_object().field("file", file).key("jobs").begin_array();
    for (const cron::Job& job : crontab.jobs) {
        const cron::Settings& s = job.settings;
        auto ms = [](std::optional<milliseconds> d) {
            return d ? std::optional<long long>(d->count()) : std::nullopt;
        };
        json.begin_object()
            .field("identity", job.identity)
            .field("named", job.named)
            .field("line", job.line)
            .field("schedule", job.schedule_text)
            .field("zone", job.zone.name())
            .field("command", job.command)
            .field("shell", job.shell);
        json.key("environment").begin_object();
        for (const auto& [name, value] : job.environment)
            json.field(name, value);
        json.end_object();
        json.key("settings")
            .begin_object()
            .field("catch_up_ms", ms(s.catch_up))
            .field("overlap", cron::overlap_name(s.overlap))
            .field("timeout_ms", ms(s.timeout))
            .field("jitter_ms", static_cast<long long>(s.jitter.count()))
            .field("limit", s.limit)
            .field("at_least_once", s.at_least_once)
            .field("dir", s.dir)
            .end_object();
        json.key("next").begin_array();
        for (cron::Instant at : next_fires(job, from, count))
            json.begin_object()
                .field("utc", cron::slot_text(at))
                .field("local", cron::local_text(job.zone, at))
                .end_object();
        json.end_array().end_object();
    }
    json.end_array().end_object();
    return json.str();
}

// This host's zone as $TZ or /etc/localtime name it; nullopt when it cannot be told.
std::optional<std::string> host_zone() {
    if (const char* tz = std::getenv("TZ"))
        return std::string(*tz == ':' ? tz + 1 : tz);
    std::array<char, PATH_MAX> target{};
    const ssize_t length = ::readlink("/etc/localtime", target.data(), target.size() - 1);
    if (length < 0)
        return errno == ENOENT ? std::optional<std::string>("UTC") : std::nullopt;
    const std::string_view path(target.data(), static_cast<size_t>(length));
    const size_t at = path.find("zoneinfo/");
    if (at == std::string_view::npos)
        return std::nullopt;
    return std::string(path.substr(at + 9));
}

bool is_utc_name(std::string_view zone) {
    const std::string_view last = zone.substr(zone.rfind('/') + 1);
    for (std::string_view utc :
         {"", "UTC", "UCT", "Universal", "Zulu", "GMT", "GMT0", "GMT+0", "GMT-0", "Greenwich"})
        if (last == utc)
            return true;
    return false;
}

// Whether `program` is an executable file in one of PATH's directories.
bool on_path(std::string_view program, std::string_view path) {
    for (size_t start = 0; start <= path.size();) {
        const size_t end = std::min(path.find(':', start), path.size());
        const std::string dir(path.substr(start, end - start));
        const std::string file = (dir.empty() ? "." : dir) + "/" + std::string(program);
        if (::access(file.c_str(), X_OK) == 0)
            return true;
        start = end + 1;
    }
    return false;
}

// The reader's warnings and those about this host, in the order of the lines.
void say_warnings(const std::string& file, const cron::Crontab& crontab) {
    std::vector<cron::Warning> warnings = crontab.warnings;
    auto warn = [&warnings](size_t line, std::string message) {
        warnings.push_back({line, std::move(message)});
    };
    const auto host = host_zone();
    bool zone_said = false;
    for (const cron::Job& job : crontab.jobs) {
        if (!job.named)
            warn(job.line,
                 util::format("job {} has no name= setting: its identity changes if any host's "
                              "copy of this line differs (schedule, zone or command)",
                              job.identity));
        if (!job.zone_set && job.schedule.every == 0s && host && !is_utc_name(*host) &&
            !zone_said) {
            warn(job.line,
                 util::format("this job runs in UTC, not in this host's zone ({}): every host "
                              "must agree, so set CRON_TZ= before it for local time",
                              *host));
            zone_said = true;
        }
        // /etc/crontab's user column, which this format does not have.
        const std::string first(job.command.substr(0, job.command.find_first_of(" \t")));
        auto path = std::ranges::find(job.environment, std::string("PATH"),
                                      &std::pair<std::string, std::string>::first);
        const char* own_path = std::getenv("PATH");
        // A string, not a view: the conditional's type is a temporary std::string.
        const std::string search = path != job.environment.end() ? path->second
                                   : own_path != nullptr         ? std::string(own_path)
                                                                 : std::string("/usr/bin:/bin");
        if (first.find('/') == std::string::npos && ::getpwnam(first.c_str()) != nullptr &&
            !on_path(first, search))
            warn(job.line,
                 util::format("the command starts with '{}', a user name: a redlock crontab has "
                              "no user column (as supercronic's); the job runs as the daemon's "
                              "user",
                              first));
    }
    std::ranges::stable_sort(warnings, {}, &cron::Warning::line);
    for (const cron::Warning& w : warnings)
        log::note("{}:{}: warning: {}", file, w.line, w.message);
}

// The run of one slot tells its daemon how it goes (job/slot_run.hpp), on k_report_fd; a
// daemon gone (EPIPE: SIGPIPE is blocked) changes nothing of the run.
class SlotReporter final : public job::Observer {
  public:
    void acquired(const job::Acquired& what) override { m_fence = what.fence; }
    void program_started(long /*pid*/) override {
        m_started = job::Clock::now();
        say(job::started_line(m_fence));
    }
    void ended(const job::RunResult& result, int status) {
        job::SlotEnd end;
        end.outcome = job::outcome_name(result.outcome);
        end.status = m_started ? status : -1;
        end.fence = m_started ? m_fence : 0;
        if (m_started)
            end.held_ms =
                std::chrono::duration_cast<job::Millis>(job::Clock::now() - *m_started).count();
        end.missed = result.slots_missed;
        end.by = result.slot_by;
        say(job::ended_line(end));
    }

  private:
    static void say(const std::string& line) {
        (void)!::write(job::k_report_fd, line.data(), line.size());
    }
    long long m_fence = 0;
    std::optional<job::Clock::time_point> m_started;
};

std::string read_all(int fd) {
    std::string out;
    std::array<char, 4096> buffer{};
    for (;;) {
        const ssize_t n = ::read(fd, buffer.data(), buffer.size());
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || out.size() > (size_t{16} << 20))
            return out;
        out.append(buffer.data(), static_cast<size_t>(n));
    }
}

} // namespace

int cron_daemon_command(const CronDaemonOptions& options, const config::Config& config) {
    cron::DaemonOptions daemon;
    daemon.file = options.file;
    daemon.json = options.json;
    if (options.grace)
        daemon.grace = *options.grace;
    daemon.verbosity = options.verbosity;
    return cron::run_daemon(daemon, config);
}

int cron_slot_command() {
    auto slot = job::decode_slot_run(read_all(STDIN_FILENO));
    if (!slot)
        return report(slot.error());
    // Dies with its daemon, as a run's PROGRAM dies with it: its watchdog then stops
    // PROGRAM's tree and its will frees what it held.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != slot->daemon)
        return util::exit_code::internal;
    util::log::set_level(slot->verbosity == 0   ? util::log::Level::quiet
                         : slot->verbosity == 2 ? util::log::Level::verbose
                                                : util::log::Level::normal);
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) {
        ::dup2(null, STDIN_FILENO); // PROGRAM reads nothing, as under cron
        ::close(null);
    }
    if (!slot->dir.empty() && ::chdir(slot->dir.c_str()) != 0)
        return report({util::ErrorKind::cannot_execute,
                       util::format("cannot run '{}' in {}: {}", slot->run.name, slot->dir,
                                    std::strerror(errno))});
    slot->run.cron->report_fd = job::k_report_fd;
    SlotReporter reporter;
    StderrObserver stderr_observer(slot->run.name);
    job::Observers observers;
    observers.add(stderr_observer);
    observers.add(reporter);
    const auto result = job::run(slot->run, slot->config, observers);
    const int status = exit_status(result, util::exit_code::conflict);
    reporter.ended(result, status);
    return status;
}

int cron_command(const CronOptions& options) {
    auto crontab = cron::read_crontab(options.file);
    if (!crontab)
        return report(crontab.error());
    say_warnings(options.file, *crontab);
    const cron::Instant from = options.from.value_or(floor<seconds>(system_clock::now()));
    const std::string text = options.json
                                 ? json_listing(options.file, *crontab, from, options.count)
                                 : human_listing(*crontab, from, options.count);
    return print_stdout(text) ? 0 : util::exit_code::internal;
}

} // namespace redlock::cli
