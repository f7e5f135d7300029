#include <string>

#include <doctest/doctest.h>

#include "cron/crontab.hpp"

using namespace std::chrono;
using redlock::cron::Crontab;
using redlock::cron::derived_identity;
using redlock::cron::Job;
using redlock::cron::Overlap;
using redlock::cron::parse_crontab;
using redlock::cron::read_crontab;
using Environment = std::vector<std::pair<std::string, std::string>>;

namespace {

Crontab crontab(std::string_view text) {
    auto result = parse_crontab(text, "crontab");
    REQUIRE_MESSAGE(result, (result ? "" : result.error().message));
    return *result;
}

Job job(std::string_view text) {
    auto c = crontab(text);
    REQUIRE(c.jobs.size() == 1);
    return c.jobs.front();
}

std::string error_of(std::string_view text) {
    auto result = parse_crontab(text, "crontab");
    REQUIRE_FALSE(result);
    CHECK(result.error().kind == redlock::util::ErrorKind::config);
    return result.error().message;
}

} // namespace

TEST_CASE("a crontab is comments, blank lines, variables and jobs") {
    auto c = crontab("# nightly\n"
                     "\n"
                     "   \t\n"
                     "  # indented comment\n"
                     "PATH=/usr/local/bin:/usr/bin\n"
                     "30 2 * * 1-5   /usr/local/bin/backup --all   \n"
                     "  */5 * * * *\tsync\r\n"
                     "@every 90s echo hi");
    REQUIRE(c.jobs.size() == 3);
    CHECK(c.jobs[0].line == 6);
    CHECK(c.jobs[0].schedule_text == "30 2 * * 1-5");
    CHECK(c.jobs[0].command == "/usr/local/bin/backup --all");
    CHECK(c.jobs[0].shell == "/bin/sh");
    CHECK(c.jobs[0].environment == Environment{{"PATH", "/usr/local/bin:/usr/bin"}});
    CHECK(c.jobs[1].line == 7);
    CHECK(c.jobs[1].command == "sync");
    CHECK(c.jobs[2].schedule_text == "@every 90s");
    CHECK(c.jobs[2].command == "echo hi");
    CHECK(c.warnings.empty());
    CHECK(crontab("").jobs.empty());
    CHECK(crontab("# nothing\n\n").jobs.empty());
}

TEST_CASE("variables are read as cron reads them: quotes, blanks around '='") {
    auto j = job("A=plain value  \n"
                 "B = \"quoted  value \"\n"
                 "C='single'   \n"
                 "'D'=x\n"
                 "E=\n"
                 "F=\"\"\n"
                 "G=a=b\n"
                 "H=\"it's\"\n"
                 "* * * * * x");
    CHECK(j.environment == Environment{{"A", "plain value"},
                                       {"B", "quoted  value "},
                                       {"C", "single"},
                                       {"D", "x"},
                                       {"E", ""},
                                       {"F", ""},
                                       {"G", "a=b"},
                                       {"H", "it's"}});
}

TEST_CASE("a variable holds for the jobs after it, until it is set again") {
    auto c = crontab("* * * * * first\n"
                     "A=1\nB=2\n"
                     "* * * * * second\n"
                     "A=3\n"
                     "SHELL=/bin/bash\n"
                     "* * * * * third\n");
    REQUIRE(c.jobs.size() == 3);
    CHECK(c.jobs[0].environment.empty());
    CHECK(c.jobs[1].environment == Environment{{"A", "1"}, {"B", "2"}});
    CHECK(c.jobs[2].environment == Environment{{"A", "3"}, {"B", "2"}, {"SHELL", "/bin/bash"}});
    CHECK(c.jobs[1].shell == "/bin/sh");
    CHECK(c.jobs[2].shell == "/bin/bash");
}

TEST_CASE("CRON_TZ, else TZ, is the zone of the jobs after it, and only TZ reaches the job") {
    auto c = crontab("* * * * * utc\n"
                     "TZ=America/New_York\n"
                     "* * * * * new-york\n"
                     "CRON_TZ=Europe/Berlin\n"
                     "* * * * * berlin\n"
                     "CRON_TZ=\n"
                     "* * * * * new-york-again\n"
                     "TZ=\n"
                     "* * * * * utc-again\n"
                     "TZ=:Asia/Kolkata\n"
                     "* * * * * kolkata\n");
    REQUIRE(c.jobs.size() == 6);
    CHECK(c.jobs[0].zone.name() == "UTC");
    CHECK_FALSE(c.jobs[0].zone_set);
    CHECK(c.jobs[1].zone.name() == "America/New_York");
    CHECK(c.jobs[1].environment == Environment{{"TZ", "America/New_York"}});
    CHECK(c.jobs[2].zone.name() == "Europe/Berlin");
    CHECK(c.jobs[2].zone_set);
    CHECK(c.jobs[2].environment == Environment{{"TZ", "America/New_York"}});
    CHECK(c.jobs[3].zone.name() == "America/New_York");
    CHECK(c.jobs[4].zone.name() == "UTC");
    CHECK_FALSE(c.jobs[4].zone_set);
    CHECK(c.jobs[5].zone.name() == "Asia/Kolkata");
    CHECK(c.jobs[5].environment == Environment{{"TZ", ":Asia/Kolkata"}});
}

TEST_CASE("MAILTO is accepted and ignored, with a warning unless it is empty") {
    auto c = crontab("MAILTO=\"\"\nMAILTO=ops@example.com\n* * * * * x\n");
    REQUIRE(c.warnings.size() == 1);
    CHECK(c.warnings[0].line == 2);
    CHECK(c.warnings[0].message == "MAILTO is ignored: redlock mails nothing; a job's output goes "
                                   "to the daemon's stdout and stderr");
    CHECK(c.jobs[0].environment.empty());
}

TEST_CASE("a bad line is refused with FILE:LINE:COL and the field") {
    CHECK(error_of("# first\n\n  61 * * * * x\n") ==
          "crontab:3:3: minute: 61 is out of range 0-59");
    CHECK(error_of("* * * * 8 x") == "crontab:1:9: day-of-week: 8 is out of range 0-7");
    CHECK(error_of("CRON_TZ=Europe/Berln\n* * * * * x\n") ==
          "crontab:1:9: time zone 'Europe/Berln' is unknown (no zone file of that name in "
          "/usr/share/zoneinfo)");
    CHECK(error_of("TZ = \"Mars/Olympus\"\n") ==
          "crontab:1:6: time zone 'Mars/Olympus' is unknown (no zone file of that name in "
          "/usr/share/zoneinfo)");
    CHECK(error_of("@reboot /bin/start\n").starts_with("crontab:1:1: @reboot is not supported"));
    CHECK(error_of("0 2 * *\n") == "crontab:1:8: expected 5 time fields (or 6, seconds first) "
                                   "before the command; the line ends after 4 of them");
    // Columns count characters, not bytes.
    CHECK(error_of("# é\nA=\"é\" é\n") ==
          "crontab:2:7: A: unexpected text after the closing quote");
}

TEST_CASE("a variable plainly meant is refused when badly written") {
    CHECK(error_of("my-var=1\n") ==
          "crontab:1:1: invalid variable name 'my-var' (letters, digits and '_', not starting "
          "with a digit)");
    CHECK(error_of("1A=1\n").starts_with("crontab:1:1: invalid variable name '1A'"));
    CHECK(error_of("A=\"open\n") == "crontab:1:3: A: the quote is not closed");
    CHECK(error_of("A='x' y\n") == "crontab:1:7: A: unexpected text after the closing quote");
    // Not a variable at all: a job line, and its first field is wrong.
    CHECK(error_of("=x\n") == "crontab:1:1: expected 5 time fields (or 6, seconds first) before "
                              "the command; '=x' is not a time field");
}

TEST_CASE("settings in a '# redlock:' comment apply to the next job only") {
    auto c = crontab("# redlock: name=backup catch-up=6h overlap=queue timeout=2h\n"
                     "#redlock: jitter=30s limit=2 at-least-once dir=\"/srv/my app\"\n"
                     "30 2 * * * backup\n"
                     "30 3 * * * other\n");
    REQUIRE(c.jobs.size() == 2);
    const auto& s = c.jobs[0].settings;
    CHECK(c.jobs[0].identity == "backup");
    CHECK(c.jobs[0].named);
    CHECK(s.name == "backup");
    CHECK(s.catch_up == hours(6));
    CHECK(s.overlap == Overlap::queue);
    CHECK(s.timeout == hours(2));
    CHECK(s.jitter == seconds(30));
    CHECK(s.limit == 2);
    CHECK(s.at_least_once);
    CHECK(s.dir == "/srv/my app");
    CHECK(c.jobs[1].settings == redlock::cron::Settings{});
    CHECK_FALSE(c.jobs[1].named);
    CHECK(job("# redlock: overlap=skip\n* * * * * x").settings.overlap == Overlap::skip);
    CHECK(job("# redlock: overlap=allow\n* * * * * x").settings.overlap == Overlap::allow);
    CHECK(job("# redlock: overlap=replace\n* * * * * x").settings.overlap == Overlap::replace);
    CHECK(job("# redlock: catch-up=0\n* * * * * x").settings.catch_up == milliseconds(0));
    // A comment that only mentions redlock is a comment.
    CHECK(crontab("# redlock runs these\n").jobs.empty());
}

TEST_CASE("a bad setting is refused with its line, its key and why") {
    const std::string job_line = "\n* * * * * x\n";
    auto error = [&](std::string_view settings) {
        return error_of(std::string(settings) + job_line);
    };
    CHECK(error("# redlock: nmae=x") ==
          "crontab:1:12: unknown setting 'nmae' (did you mean 'name'?)");
    CHECK(error("# redlock: color=red") ==
          "crontab:1:12: unknown setting 'color' (name, catch-up, overlap, timeout, jitter, "
          "limit, at-least-once, dir)");
    CHECK(error("# redlock: name=a b=c").starts_with("crontab:1:19: unknown setting 'b'"));
    CHECK(error("# redlock: name=bad*name") ==
          "crontab:1:17: name: invalid lock name 'bad*name': '*' is not allowed (use A-Z a-z 0-9 "
          ". _ : / @ + -)");
    CHECK(error("# redlock: catch-up=soon") ==
          "crontab:1:21: catch-up: invalid duration 'soon': expected a number with an optional "
          "unit ms, s, m, h or d (e.g. 250ms, 30s, 5m)");
    CHECK(error("# redlock: timeout=0") == "crontab:1:20: timeout: must be longer than 0");
    CHECK(error("# redlock: jitter=-1s").starts_with("crontab:1:19: jitter: invalid duration"));
    CHECK(error("# redlock: overlap=wait") ==
          "crontab:1:20: overlap: 'wait' is not one of skip, allow, queue, replace");
    CHECK(error("# redlock: limit=0") == "crontab:1:18: limit: '0' is not a number from 1 to 1000");
    CHECK(error("# redlock: limit=1001") ==
          "crontab:1:18: limit: '1001' is not a number from 1 to 1000");
    CHECK(error("# redlock: dir=srv") == "crontab:1:16: dir: 'srv' is not an absolute path");
    CHECK(error("# redlock: dir=\"/srv") == "crontab:1:16: dir: the quote is not closed");
    CHECK(error("# redlock: at-least-once=yes") == "crontab:1:12: at-least-once takes no value");
    CHECK(error("# redlock: name") == "crontab:1:12: name needs a value (name=...)");
    CHECK(error("# redlock:") == "crontab:1:11: no settings after 'redlock:'");
    CHECK(error("# redlock: limit=2\n# redlock: limit=3") ==
          "crontab:2:12: limit is set twice for this job");
}

TEST_CASE("settings must come right before their job's line") {
    const std::string misplaced =
        "crontab:2:1: a '# redlock:' settings line must come right before its job's line";
    CHECK(error_of("A=1\n# redlock: name=x\n\n* * * * * x\n") == misplaced);
    CHECK(error_of("A=1\n# redlock: name=x\n# a comment\n* * * * * x\n") == misplaced);
    CHECK(error_of("A=1\n# redlock: name=x\nB=2\n* * * * * x\n") == misplaced);
    CHECK(error_of("A=1\n# redlock: name=x\n") == misplaced);
}

TEST_CASE("a derived identity is a readable prefix and a hash of schedule, zone and command") {
    // Fixed for good: a host running a later redlock must derive the same identity
    // (python3 -c 'import hashlib; print(hashlib.sha256(b"30 2 * *
    // *\nUTC\n/usr/...").hexdigest()[:8])').
    CHECK(derived_identity("30 2 * * *", "UTC", "/usr/local/bin/backup --all") ==
          "backup-3d1375c8");
    CHECK(job("@every 5m sync").identity == "sync-7f638dcc");
    CHECK(derived_identity("0 9 1 * *", "UTC", "./monthly-report.sh")
              .starts_with("monthly-report.sh-"));
    CHECK(derived_identity("0 9 1 * *", "UTC", "$(true)").starts_with("true-"));
    CHECK(derived_identity("0 9 1 * *", "UTC", "'' x").starts_with("job-"));
    CHECK(derived_identity("0 9 1 * *", "UTC", std::string(60, 'a')).size() == 49);
}

TEST_CASE("the same line gives the same identity, and any change of it another") {
    const auto base = job("30 2 * * * /bin/backup --all").identity;
    CHECK(job("30  2\t* * *   /bin/backup --all  ").identity == base);
    CHECK(job("# a comment\nA=1\n30 2 * * * /bin/backup --all").identity == base);
    CHECK(job("30 3 * * * /bin/backup --all").identity != base);
    CHECK(job("30 2 * * 1 /bin/backup --all").identity != base);
    CHECK(job("30 2 * * * /bin/backup --full").identity != base);
    CHECK(job("CRON_TZ=Europe/Berlin\n30 2 * * * /bin/backup --all").identity != base);
    CHECK(job("# redlock: name=nightly\n30 2 * * * /bin/backup --all").identity == "nightly");
    // @every counts from the epoch in UTC: the zone is no part of its identity.
    CHECK(job("@every 5m sync").identity == job("CRON_TZ=Asia/Tokyo\n@every 5m sync").identity);
}

TEST_CASE("two jobs cannot share an identity") {
    CHECK(error_of("* * * * * x\n* * * * * x\n") ==
          "crontab:2:1: job '" + job("* * * * * x").identity +
              "' is already on line 1 (the same schedule, zone and command; give one a name= "
              "setting)");
    CHECK(error_of("# redlock: name=a\n* * * * * x\n  # redlock: name=a\n  1 * * * * y\n") ==
          "crontab:4:3: job 'a' is already on line 2");
    CHECK(crontab("* * * * * x\nCRON_TZ=Europe/Berlin\n* * * * * x\n").jobs.size() == 2);
}

TEST_CASE("a crontab that cannot be read is a config error that says why") {
    auto missing = read_crontab("/nonexistent/crontab");
    REQUIRE_FALSE(missing);
    CHECK(missing.error().kind == redlock::util::ErrorKind::config);
    CHECK(missing.error().message ==
          "cannot read crontab '/nonexistent/crontab': No such file or directory");
    auto directory = read_crontab("/");
    REQUIRE_FALSE(directory);
    CHECK(directory.error().message == "cannot read crontab '/': not a regular file");
}
