#pragma once
// The command line as parsed: what the user gave, still as text (checked and converted by
// the commands). CLI11 parses every command line but one: the plain `run` line of a cron
// job or CI step, which parse_run_fast() reads without building a parser.

#include <expected>
#include <optional>
#include <string>
#include <vector>

namespace redlock::cli {

struct GlobalOptions {
    std::optional<std::string> config_file; // set when given, even if empty
    std::vector<std::string> servers;
    bool verbose = false;
    bool quiet = false;
    bool operator==(const GlobalOptions&) const = default;
};

struct RunArgs {
    std::string key;
    std::optional<std::string> ttl; // set when given, even if empty
    std::optional<std::string> wait;
    bool no_wait = false;
    bool fair = false;
    std::optional<std::string> conflict_exit_code;
    std::optional<std::string> max_hold;
    std::optional<std::string> min_validity;
    std::optional<std::string> min_hold;
    std::optional<std::string> once_per;
    std::optional<std::string> limit;
    std::optional<std::string> metrics; // --metrics FILE (or DIR)
    std::optional<std::string> events;  // --events FILE or fd:N
    std::optional<std::string> on_lost; // --on-lost CMD
    bool notify_passthrough = false;    // PROGRAM gets $NOTIFY_SOCKET and says READY=1
    std::vector<std::string> program;
    bool operator==(const RunArgs&) const = default;
};

// Options of the commands other than run.
struct CommandArgs {
    std::vector<std::string> names;
    std::vector<std::string> keys;
    std::optional<std::string> ttl; // set when given, even if empty
    std::optional<std::string> wait;
    bool no_wait = false;
    bool fair = false;
    std::optional<std::string> conflict_exit_code;
    std::string token;
    std::string pattern = "*";
    bool force = false;
    bool yes = false;
    bool json = false;
    bool shell = false;
    std::optional<std::string> count;  // history -n
    std::optional<std::string> since;  // history --since
    std::optional<std::string> listen; // exporter --listen
    bool dry_run = false;              // reap --dry-run
    bool check = false;                // cron --check
    std::optional<std::string> from;   // cron --from
    std::optional<std::string> grace;  // cron --grace
    std::string file;                  // cron FILE
    bool operator==(const CommandArgs&) const = default;
};

struct CommandLine {
    std::string command; // empty: none named (--version)
    GlobalOptions global;
    RunArgs run;
    CommandArgs args;
    bool show_version = false;
    // Where PROGRAM's own words start in argv (argc when there are none).
    int program_start = 0;
    bool operator==(const CommandLine&) const = default;
};

// A `run` command line in its plain form, read without CLI11, whose construction is most
// of a short run's instructions: global options (-s URL, -c FILE, -v, -q) and run's
// options each as a word followed by its value as the next word, every option at most
// once (-s as often as wanted), -k given, and a non-empty PROGRAM, after "--" or from the
// first word that is not an option. Anything else (--help, --key=NAME, -vq, a repeated
// option, a value that is empty or starts with '-', an unknown word) is std::nullopt and
// left to CLI11, which reads it or says what is wrong. What it does read, it reads exactly
// as CLI11 does (tests/cli/args_test.cpp compares the two).
[[nodiscard]] std::optional<CommandLine> parse_run_fast(int argc, const char* const* argv);

// The whole command line, with CLI11. On help (printed) or a usage error (reported), the
// exit status to return.
[[nodiscard]] std::expected<CommandLine, int> parse_with_cli11(int argc, char** argv);

} // namespace redlock::cli
