#include "cli/help.hpp"

#include <array>

namespace redlock::cli {

namespace {

using namespace std::string_view_literals;

constexpr std::array k_commands = {"run"sv,     "status"sv,   "list"sv,    "history"sv,
                                   "watch"sv,   "exporter"sv, "acquire"sv, "extend"sv,
                                   "release"sv, "reap"sv,     "doctor"sv,  "cron"sv};

// Every help but redlock's own ends with this.
#define GLOBAL_OPTIONS                                                                             \
    "\nGlobal options (before or after the command):\n"                                            \
    "  -c, --config FILE   -s, --server URL   -v, --verbose   -q, --quiet\n"

// The options of run and acquire that decide how the lock is waited for.
#define WAIT_OPTIONS                                                                               \
    "  -w, --wait DURATION\n"                                                                      \
    "                      wait at most this long for the lock (default: forever;\n"               \
    "                      -w 0 is -n; --timeout is the same option)\n"                            \
    "  -n, --no-wait       give up at once if the lock is held (also --nonblock)\n"                \
    "      --fair          wait in line: first come, first served among --fair\n"                  \
    "                      waiters (not with -n)\n"                                                \
    "  -E, --conflict-exit-code N\n"                                                               \
    "                      exit status when the lock is not acquired (default 75)\n"

#define COMMON_STATUS                                                                              \
    "64 usage; 69 servers unavailable; 70 internal error;\n"                                       \
    "77 refused by the server (password, ACL); 78 config error.\n"

constexpr std::string_view k_main = R"(Usage: redlock [OPTIONS] COMMAND [ARG]...
Run a command under a distributed lock held in Redis.

Commands:
  run       run PROGRAM while holding a lock
  status    show whether locks are held, by whom, for how long
  list      list the held locks
  history   show the runs of a lock: who ran, waited, skipped, and how it ended
  watch     follow the locks live: holders, waiters, what happens to them
  exporter  serve the fleet to Prometheus and a web page: every lock, every run
  acquire   take a lock for a script and print its token
  extend    extend a lock taken with acquire
  release   release a lock (--token) or remove it (--force)
  reap      release the locks this machine held under an earlier boot
  doctor    check that the servers are fit for locking
  cron      run a crontab on every host, each slot once over the fleet

Options:
  -c, --config FILE   the config file (default: $REDLOCK_CONFIG, else
                      ~/.config/redlock/config.toml, else
                      /etc/redlock/config.toml)
  -s, --server URL    a Redis server, in place of the config's; give -s once per
                      server for Redlock over several
  -v, --verbose       say what happens: acquire, renew, release
  -q, --quiet         silence redlock's notes (errors still print)
  -h, --help          show this help (redlock COMMAND --help: that command's)
      --version       show the version and whether TLS is built in

Exit status: 0 done; 1 doctor found a risk; 64 usage; 69 servers unavailable;
70 internal error; 75 lock not acquired; 77 refused by the server; 78 config
error; 79 lease lost; 124 --max-hold ran out; 126/127 PROGRAM not runnable;
run: PROGRAM's own.
See redlock(1) and each command's --help.
)";

constexpr std::string_view k_run = R"(Usage: redlock run -k NAME [OPTIONS] [--] PROGRAM [ARG]...
Run PROGRAM while holding the lock NAME: the lease is renewed while PROGRAM
runs, PROGRAM is stopped if the lease is lost, and the lock is released when
PROGRAM ends.

Options:
  -k, --key NAME      the lock's name (required)
  -t, --ttl DURATION  lease length, renewed while PROGRAM runs (default 30s)
)" WAIT_OPTIONS R"(      --max-hold DURATION
                      stop PROGRAM once it has run this long (TERM, then KILL
                      after the grace) and exit 124, as timeout(1)
      --min-validity DURATION
                      start PROGRAM only with at least this much of the lease
                      left after acquiring; otherwise it counts as not acquired
      --min-hold DURATION
                      keep the lock at least this long after acquiring, even
                      when PROGRAM ends sooner (cron hosts whose clocks differ)
      --once-per DURATION
                      run at most once in each slot of this length, counted on
                      the servers' clock (1h: on the hour, UTC); a later run in
                      the slot exits 75 (or -E) without running PROGRAM
      --limit N       a semaphore: up to N holders at once, each with its own
                      permit (REDLOCK_PERMIT), lease and fence
      --metrics FILE  write the run's Prometheus metrics to FILE (a directory:
                      one redlock_NAME.prom per lock name there), replaced
                      atomically, for node_exporter's textfile collector
      --events FILE   append one JSON object per line per event of the run to
                      FILE (fd:N: to the inherited descriptor N)
      --on-lost CMD   run CMD with /bin/sh -c once if the lease is lost, the
                      lock is force-released or --max-hold stops PROGRAM
                      (REDLOCK_EVENT, REDLOCK_KEY, REDLOCK_FENCE,
                      REDLOCK_HELD_MS)
      --notify-passthrough
                      with $NOTIFY_SOCKET (systemd Type=notify): PROGRAM gets
                      the socket and says READY=1 itself
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: PROGRAM's own (128+N when killed by signal N); 75 (or -E) lock not
acquired; 79 lease lost, PROGRAM stopped; 124 --max-hold ran out, PROGRAM
stopped; 126/127 PROGRAM not runnable;
)" COMMON_STATUS;

constexpr std::string_view k_status = R"(Usage: redlock status [--json] NAME...
Show whether each lock NAME is held, by whom (host, pid, command), since when,
its remaining lease and its last fence.

Options:
  -k, --key NAME      a lock's name, the same as NAME (may be repeated)
      --json          print one JSON document (see redlock(1))
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: 0 shown (held or free);
)" COMMON_STATUS;

constexpr std::string_view k_history =
    R"(Usage: redlock history [-n N] [--since DURATION] [--json] NAME
Show the runs of the lock NAME, newest first, as the servers recorded them: when
each started (servers' clock), where, who, what, how it ended (ran and its exit
status, lease lost, stopped by --max-hold, skipped while held by another, slot
already run, gave up waiting, force-released), how long it waited and held the
lock, and its fence. On a terminal, a timeline shows overlaps and gaps.

Options:
  -k, --key NAME      the lock's name, the same as NAME
  -n, --count N       the newest N runs (default 20)
      --since DURATION
                      only runs that started at most this long ago
      --json          print one JSON document (see redlock(1))
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: 0 shown (also when none is recorded);
)" COMMON_STATUS;

constexpr std::string_view k_watch = R"(Usage: redlock watch [-p GLOB] [--json]
Follow the locks matching GLOB live: who holds each, for how long, its lease,
its fence, how many wait, and what just happened to them. Updated when the
servers announce a change (a release, an acquisition, a run recorded), not by
polling. On a terminal, redrawn in place; otherwise one JSON line per change.
Ends on Ctrl-C (INT) or TERM.

Options:
  -p, --pattern GLOB  only names matching GLOB (default *)
      --json          one JSON object per line per change (see redlock(1))
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: 0 ended by INT, TERM or HUP;
)" COMMON_STATUS;

constexpr std::string_view k_exporter = R"(Usage: redlock exporter [--listen ADDR:PORT] [-p GLOB]
Serve the locks matching GLOB, over the configured servers, to Prometheus and
to a browser, until interrupted: /metrics (holders, waiters, runs by outcome,
last success, durations, --once-per slots, servers up), / (a page of every
lock, live while open) and /api/locks (the same as JSON). Read-only.

Options:
      --listen ADDR:PORT
                      where to listen (default 127.0.0.1:21379; [::1]:PORT for
                      IPv6, 0.0.0.0:PORT for every interface)
  -p, --pattern GLOB  only names matching GLOB (default *)
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: 0 ended by INT, TERM or HUP; 69 also when the address is taken or
libmicrohttpd (Debian package libmicrohttpd12) is missing;
)" COMMON_STATUS;

constexpr std::string_view k_list = R"(Usage: redlock list [-p GLOB] [--json]
List the held locks: their names, remaining lease, holder and command.

Options:
  -p, --pattern GLOB  only names matching GLOB (default *)
      --json          print one JSON document (see redlock(1))
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: 0 listed (also when none is held);
)" COMMON_STATUS;

constexpr std::string_view k_acquire = R"(Usage: redlock acquire [OPTIONS] NAME
Take the lock NAME for a shell script and print its token (and fence); the
script releases it with release --token, or extends it with extend.

Options:
  -k, --key NAME      the lock's name, the same as NAME
  -t, --ttl DURATION  lease length; the lock expires after it (default 30s)
)" WAIT_OPTIONS R"(      --json          print one JSON document (see redlock(1))
      --shell         print REDLOCK_KEY, REDLOCK_TOKEN, REDLOCK_FENCE and
                      REDLOCK_NEST_SECRET assignments for eval
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: 0 acquired; 75 (or -E) not acquired;
)" COMMON_STATUS;

constexpr std::string_view k_extend = R"(Usage: redlock extend --token TOKEN [-t DURATION] NAME
Give a lock taken with acquire a new remaining lease.

Options:
  -k, --key NAME      the lock's name, the same as NAME
      --token TOKEN   the token acquire printed (required)
  -t, --ttl DURATION  the new remaining lease (default 30s)
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: 0 extended; 75 the token no longer holds the lock;
)" COMMON_STATUS;

constexpr std::string_view k_release = R"(Usage: redlock release --token TOKEN NAME
       redlock release --force [--yes] NAME
Release a lock taken with acquire, or remove a lock whoever holds it.

Options:
  -k, --key NAME      the lock's name, the same as NAME
      --token TOKEN   release only if the lock holds this token
  -f, --force         remove the lock whoever holds it; a running holder
                      stops its command and exits 79; asks first on a
                      terminal
  -y, --yes           do not ask with --force
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: 0 released; 75 the token no longer holds the lock, or --force
declined at its prompt;
)" COMMON_STATUS;

constexpr std::string_view k_reap = R"(Usage: redlock reap [-p GLOB] [--dry-run] [--json]
Release the locks (and --limit permits) that this machine held under an earlier
boot: nothing of that boot can still run. Each is released with its own token,
its waiters woken, its history entry 'reaped'. A lock of another machine, or of
this boot, is never touched. Run at boot by redlock-reap.service. Also removes
the empty cgroups of runs of this boot killed together with their watchdogs.

Options:
  -p, --pattern GLOB  only names matching GLOB (default *)
      --dry-run       say what would be reaped, release nothing, remove no cgroup
      --json          print one JSON document (see redlock(1))
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: 0 reaped (also when there was nothing to reap); 69 also when a
lock to reap could not be released; 70 this machine's boot cannot be told;
)" COMMON_STATUS;

constexpr std::string_view k_doctor = R"(Usage: redlock doctor [--json]
Check each server: its version (Redis 6.0 or later, or Valkey), eviction
policy, replication, clock offset, persistence, and that redlock's scripts run
there.

Options:
      --json          print one JSON document (see redlock(1))
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: 0 every server is fit for locking; 1 a risk was found;
)" COMMON_STATUS;

constexpr std::string_view k_cron =
    R"(Usage: redlock cron [--json] [--grace DURATION] FILE
       redlock cron --check [-n N] [--from TIME] [--json] FILE
Run the crontab FILE (see redlock-cron(5)) in the foreground: every host running
the same file runs each slot of each job once, fleet-wide, the slot claimed on
the servers' clock. Each job's output goes to stdout or stderr line by line with
its name; one line per slot says who ran it, its fence and outcome. SIGHUP or a
change of FILE reloads it (a file that does not read keeps the old schedule);
SIGTERM or SIGINT drains: no new slot, running jobs get the grace, then stop.
With --check, read FILE and list each job: its identity, zone, schedule,
command, settings and next fire times, in UTC and in the job's zone; warnings
(a job without name=, MAILTO) go to stderr.

Options:
      --json          the daemon: each line a JSON object on stdout;
                      --check: one JSON document (see redlock(1))
      --grace DURATION
                      how long a drain lets running jobs finish (default 20s)
      --check         check FILE and list its jobs
  -n, --count N       the next N fire times of each job (default 3)
      --from TIME     the fire times after TIME, an ISO 8601 UTC time such as
                      2026-03-29T00:00:00Z (default: now)
  -h, --help          show this help
)" GLOBAL_OPTIONS R"(
Exit status: 0 drained, or FILE is valid (--check); 64 usage; 70 internal error;
78 FILE is not valid (FILE:LINE:COL: names the line and the field).
)";

#undef GLOBAL_OPTIONS
#undef WAIT_OPTIONS
#undef COMMON_STATUS

} // namespace

std::span<const std::string_view> command_names() {
    return k_commands;
}

std::string_view help_text(std::string_view command) {
    constexpr std::array<std::pair<std::string_view, std::string_view>, 13> k_help = {{
        {"", k_main},
        {"run", k_run},
        {"status", k_status},
        {"list", k_list},
        {"acquire", k_acquire},
        {"extend", k_extend},
        {"release", k_release},
        {"reap", k_reap},
        {"doctor", k_doctor},
        {"history", k_history},
        {"watch", k_watch},
        {"exporter", k_exporter},
        {"cron", k_cron},
    }};
    for (const auto& [name, text] : k_help)
        if (name == command)
            return text;
    return {};
}

} // namespace redlock::cli
