#pragma once
// A crontab file read whole into its jobs, or refused at its first bad line (78, with
// FILE:LINE:COL: and the field or setting), never half-read. Lines are cron(5)'s: comments,
// blank lines, KEY=value (quoted or not, blanks around '='), job lines. CRON_TZ= (else TZ=)
// is the zone of the jobs after it, UTC before any; SHELL= their shell (default /bin/sh);
// TZ= and the other variables are their environment, CRON_TZ= and MAILTO= are not. There
// is no user column (as supercronic), and '%' in a command is not special.
//
// A job's identity is the same on every host that reads the same line: its name= setting,
// else a readable prefix and a hash of its schedule, zone and command ("backup-1f0c9a2e").

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cron/fire.hpp"
#include "cron/schedule.hpp"
#include "cron/settings.hpp"
#include "cron/zone.hpp"
#include "util/error.hpp"

namespace redlock::cron {

struct Job {
    std::string identity;
    bool named = false;        // the identity is the name= setting (else derived from the line)
    size_t line = 0;           // 1-based, in the file
    std::string schedule_text; // as written, blanks collapsed: "30 2 * * 1-5", "@every 5m"
    Schedule schedule;
    Zone zone;
    bool zone_set = false;         // by CRON_TZ= or TZ=, not UTC by default
    std::string command;           // as written, run with `shell -c`
    std::string shell = "/bin/sh"; // SHELL= in force
    // The variables in force for this job (TZ and SHELL among them, CRON_TZ and MAILTO
    // not), each once, in the order first set.
    std::vector<std::pair<std::string, std::string>> environment;
    Settings settings;

    [[nodiscard]] std::optional<Instant> next_fire(Instant after) const {
        return cron::next_fire(schedule, zone, after);
    }
    [[nodiscard]] std::vector<Instant> fires_between(Instant after, Instant until,
                                                     size_t limit) const {
        return cron::fires_between(schedule, zone, after, until, limit);
    }
};

// Something legal but worth saying, for --check and the daemon's start.
struct Warning {
    size_t line = 0;
    std::string message;
};

struct Crontab {
    std::vector<Job> jobs;
    std::vector<Warning> warnings;
};

// `source` is how messages name the file.
[[nodiscard]] util::Expected<Crontab> parse_crontab(std::string_view text, std::string_view source);
[[nodiscard]] util::Expected<Crontab> read_crontab(const std::string& path);

// The identity of a job without name=: the base name of the command's first word (letters,
// digits, '.', '_' and '-' only, at most 40; "job" when none is left), '-' and 8 hex
// digits of the SHA-256 of the schedule as written, the zone's name (empty for @every,
// whose slots ignore zones) and the command.
[[nodiscard]] std::string derived_identity(std::string_view schedule_text,
                                           std::string_view zone_name, std::string_view command);

} // namespace redlock::cron
