#include "cli/cli.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>

#include <hiredis/hiredis.h>

#include "cli/args.hpp"
#include "cli/cli11.hpp" // CLI11 without <iostream>'s static initialiser
#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/help.hpp"
#include "cli/run_command.hpp"
#include "config/config.hpp"
#include "config/load.hpp"
#include "job/slot_run.hpp"
#include "lock/lock.hpp"
#include "lock/name.hpp"
#include "process/watchdog.hpp"
#include "redis/tls.hpp"
#include "util/duration.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/format.hpp"
#include "util/log.hpp"
#include "util/timestamp.hpp"
#include "util/version.hpp"

namespace redlock::cli {

namespace {

namespace log = util::log;

// TLS is built in; whether it can be used depends on libssl.so.3 or .1.1 being installed.
std::string version_text() {
    auto tls = redis::tls::library_version();
    return util::format("redlock {} (hiredis {}.{}.{}, TLS: {})\n", util::k_version, HIREDIS_MAJOR,
                        HIREDIS_MINOR, HIREDIS_PATCH,
                        tls ? *tls : "built in, but " + tls.error().message);
}

// A password given in a -s URL would show in `ps` for as long as redlock runs; replace it
// in our argv with "***" now that CLI11 has its own copy (what the mysql client does).
// The mask must not tell the password's length, and zeroed bytes would (ps and
// /proc/PID/cmdline show them as empty words). So when the masked command line is
// shorter, it is written as one string, words joined by spaces, as setproctitle(3) does:
// the argument area ends in a byte that is not NUL, which tells the kernel to show
// /proc/PID/cmdline only up to the first NUL. Nothing reads argv after this.
// Where the URL starts in an argument: "-sredis://..." and "--server=redis://..." carry
// it inside the option.
size_t url_offset(std::string_view arg) {
    if (arg.starts_with("-s") && !arg.starts_with("--"))
        return 2;
    size_t eq = arg.rfind('=', arg.find("://"));
    return eq == std::string_view::npos ? 0 : eq + 1;
}

void mask_passwords(int argc, char** argv, int program_start) {
    std::vector<std::string> args(argv, argv + argc);
    bool masked = false;
    for (int i = 1; i < program_start && i < argc; ++i) {
        std::string_view arg(args[i]);
        if (arg == "--")
            break;
        if (arg.find("://") == std::string_view::npos)
            continue;
        const size_t url_start = url_offset(arg);
        if (auto range = config::find_url_password(arg.substr(url_start))) {
            args[i].replace(url_start + range->first, range->second, "***");
            masked = true;
        }
    }
    if (!masked)
        return;
    size_t area = 0, needed = 0;
    bool contiguous = true;
    for (int i = 0; i < argc; ++i) {
        contiguous &= i == 0 || argv[i] == argv[i - 1] + std::strlen(argv[i - 1]) + 1;
        area += std::strlen(argv[i]) + 1;
        needed += args[i].size() + 1;
    }
    if (contiguous && needed < area) {
        std::string line;
        for (const auto& a : args)
            line += (line.empty() ? "" : " ") + a;
        std::memcpy(argv[0], line.c_str(), line.size() + 1);
        std::memset(argv[0] + line.size() + 1, ' ', area - line.size() - 1);
        return;
    }
    // The same length (a three-character password), or not laid out as expected: each
    // password overwritten where it is, with as many '*'.
    for (int i = 1; i < argc; ++i) {
        if (args[i] == argv[i])
            continue;
        std::string_view arg(argv[i]);
        const size_t url_start = url_offset(arg);
        if (auto range = config::find_url_password(arg.substr(url_start)))
            std::memset(argv[i] + url_start + range->first, '*', range->second);
    }
}

// CLI11 quotes unexpected arguments as given: a URL with a password (after a typo such as
// --sever) must not reach stderr as it is.
std::string mask_urls_in(std::string text, int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        std::string_view arg(argv[i]);
        auto scheme = arg.find("://");
        if (scheme == std::string_view::npos)
            continue;
        auto eq = arg.rfind('=', scheme);
        auto url = arg.substr(eq == std::string_view::npos ? 0 : eq + 1);
        if (!config::find_url_password(url))
            continue;
        auto masked = config::mask_url_password(url);
        for (auto pos = text.find(url); pos != std::string::npos;
             pos = text.find(url, pos + masked.size()))
            text.replace(pos, url.size(), masked);
    }
    return text;
}

util::Expected<config::Config> load(const GlobalOptions& global) {
    return config::load(global.config_file, global.servers);
}

// Shared by the commands that take a lock name as NAME or -k NAME.
util::Expected<std::string> one_name(const std::vector<std::string>& positional,
                                     const std::vector<std::string>& keys) {
    std::vector<std::string> all = positional;
    all.insert(all.end(), keys.begin(), keys.end());
    if (all.empty())
        return util::fail(util::ErrorKind::usage, "a lock NAME is required (NAME or -k NAME)");
    if (all.size() > 1)
        return util::fail(util::ErrorKind::usage, "only one lock NAME is allowed here");
    if (auto ok = lock::validate_name(all.front()); !ok)
        return std::unexpected(ok.error());
    return all.front();
}

util::Expected<std::optional<std::chrono::milliseconds>>
optional_duration(const std::optional<std::string>& text) {
    if (!text)
        return std::optional<std::chrono::milliseconds>();
    auto d = util::parse_duration(*text);
    if (!d)
        return std::unexpected(d.error());
    return std::optional(*d);
}

util::Expected<std::chrono::milliseconds> ttl_or_default(const std::optional<std::string>& text,
                                                         std::chrono::milliseconds fallback) {
    auto ttl = optional_duration(text);
    if (!ttl)
        return std::unexpected(ttl.error());
    auto value = ttl->value_or(fallback);
    if (value < config::k_min_ttl)
        return util::fail(util::ErrorKind::usage,
                          util::format("ttl {} is too short; use at least {}",
                                       util::format_duration(value),
                                       util::format_duration(config::k_min_ttl)));
    return value;
}

// --wait as the commands that acquire read it; -w 0 means the same as -n, as in flock(1).
util::Expected<std::optional<std::chrono::milliseconds>>
wait_option(const std::optional<std::string>& text, bool no_wait,
            std::optional<std::chrono::milliseconds> fallback) {
    if (no_wait)
        return std::optional(std::chrono::milliseconds(0));
    auto wait = optional_duration(text);
    if (!wait)
        return std::unexpected(wait.error());
    return *wait ? *wait : fallback;
}

// -E N: an exit status, 0-255 (as flock(1) checks).
util::Expected<int> conflict_exit_code(const std::optional<std::string>& text) {
    if (!text)
        return util::exit_code::conflict;
    int value = -1;
    auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (ec != std::errc() || end != text->data() + text->size() || value < 0 || value > 255)
        return util::fail(util::ErrorKind::usage,
                          util::format("invalid exit code '{}' for -E: expected 0 to 255", *text));
    return value;
}

// -n N of history and cron: 1 to `most`.
util::Expected<size_t> count_option(const std::string& text, size_t most) {
    size_t n = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || n < 1 || n > most)
        return util::fail(util::ErrorKind::usage,
                          util::format("invalid -n '{}': expected 1 to {}", text, most));
    return n;
}

// `cron --check`: reads no config and talks to no server.
int cron_check(const CommandArgs& args) {
    if (args.grace)
        return report({util::ErrorKind::usage, "cron --check: --grace is the daemon's"});
    if (args.file.empty())
        return report({util::ErrorKind::usage, "cron --check: a crontab FILE is required"});
    CronOptions options;
    options.file = args.file;
    options.json = args.json;
    if (args.count) {
        auto n = count_option(*args.count, 1000);
        if (!n)
            return report(n.error());
        options.count = *n;
    }
    if (args.from) {
        auto from = util::parse_utc_timestamp(*args.from);
        if (!from)
            return report({util::ErrorKind::usage,
                           util::format("invalid --from '{}': expected an ISO 8601 UTC time "
                                        "such as 2026-03-29T00:00:00Z",
                                        *args.from)});
        options.from = std::chrono::floor<std::chrono::seconds>(*from);
    }
    return cron_command(options);
}

// --limit N: 1 to 1000 holders at once (each permit is tried in turn while waiting).
util::Expected<size_t> limit_option(const std::optional<std::string>& text) {
    if (!text)
        return 1;
    size_t value = 0;
    auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (ec != std::errc() || end != text->data() + text->size() || value < 1 || value > 1000)
        return util::fail(util::ErrorKind::usage,
                          util::format("invalid --limit '{}': expected 1 to 1000", *text));
    return value;
}

util::Expected<RunOptions> make_run_options(const RunArgs& args, const config::Config& cfg) {
    RunOptions options;
    if (auto ok = lock::validate_name(args.key); !ok)
        return std::unexpected(ok.error());
    options.name = args.key;
    auto ttl = ttl_or_default(args.ttl, cfg.ttl);
    if (!ttl)
        return std::unexpected(ttl.error());
    options.ttl = *ttl;
    auto wait = wait_option(args.wait, args.no_wait, cfg.wait);
    if (!wait)
        return std::unexpected(wait.error());
    options.wait = *wait;
    auto code = conflict_exit_code(args.conflict_exit_code);
    if (!code)
        return std::unexpected(code.error());
    options.conflict_exit_code = *code;
    options.program = args.program;
    options.fair = args.fair;
    auto max_hold = optional_duration(args.max_hold);
    if (!max_hold)
        return std::unexpected(max_hold.error());
    if (*max_hold && **max_hold <= std::chrono::milliseconds(0))
        return util::fail(util::ErrorKind::usage, "--max-hold must be longer than 0");
    options.max_hold = *max_hold;
    auto min_validity = optional_duration(args.min_validity);
    if (!min_validity)
        return std::unexpected(min_validity.error());
    const bool validity_from_config = !*min_validity && cfg.min_validity;
    if (validity_from_config)
        *min_validity = cfg.min_validity;
    if (*min_validity && **min_validity == std::chrono::milliseconds(0))
        *min_validity = std::nullopt; // 0: no minimum (overrides the config's)
    if (*min_validity) {
        // The most validity an acquisition can leave: the TTL less the drift allowance.
        auto most = std::chrono::floor<std::chrono::milliseconds>(
            lock::validity_end(lock::Clock::time_point{}, options.ttl) - lock::Clock::time_point{});
        if (**min_validity >= most)
            return util::fail(
                util::ErrorKind::usage,
                util::format("--min-validity must be less than the {} of "
                             "validity a {} ttl can leave (got {}{})",
                             util::format_duration(most), util::format_duration(options.ttl),
                             util::format_duration(**min_validity),
                             validity_from_config
                                 ? util::format(", min_validity in {}", cfg.source.string())
                                 : std::string()));
    }
    options.min_validity = *min_validity;
    auto min_hold = optional_duration(args.min_hold);
    if (!min_hold)
        return std::unexpected(min_hold.error());
    options.min_hold = *min_hold;
    auto once_per = optional_duration(args.once_per);
    if (!once_per)
        return std::unexpected(once_per.error());
    if (*once_per && **once_per < std::chrono::seconds(1))
        return util::fail(util::ErrorKind::usage,
                          util::format("--once-per must be at least 1s (got {})",
                                       util::format_duration(**once_per)));
    options.once_per = *once_per;
    auto limit = limit_option(args.limit);
    if (!limit)
        return std::unexpected(limit.error());
    options.limit = *limit;
    if (options.limit > 1 && options.fair)
        return util::fail(util::ErrorKind::usage, "--fair and --limit cannot be combined");
    if (options.limit > 1 && options.once_per)
        return util::fail(util::ErrorKind::usage,
                          "--once-per and --limit cannot be combined (once per slot is one run)");
    if (options.program.empty())
        return util::fail(util::ErrorKind::usage,
                          "run: no PROGRAM given (redlock run -k NAME -- PROGRAM [ARG...])");
    // Monitoring: the option, else the config's key. An empty value turns the config's off.
    if (args.metrics) {
        if (!args.metrics->empty()) {
            std::error_code ec;
            const bool dir =
                args.metrics->ends_with('/') || std::filesystem::is_directory(*args.metrics, ec);
            (dir ? options.metrics_dir : options.metrics_file) = *args.metrics;
        }
    } else {
        options.metrics_file = cfg.metrics_file;
        options.metrics_dir = cfg.metrics_dir;
    }
    if (args.events && args.events->empty())
        return util::fail(util::ErrorKind::usage, "--events needs a FILE or fd:N");
    options.events = args.events;
    if (args.on_lost)
        options.on_lost = *args.on_lost;
    else
        options.on_lost = cfg.on_lost;
    options.hook_timeout = cfg.hook_timeout;
    options.notify_passthrough = args.notify_passthrough;
    return options;
}

// A NAME word that is no lock name, thrown out of CLI11's parse (parse_with_cli11).
struct NameRefused {
    util::Error error;
};

// NAME as a positional argument or as -k NAME, the same option run uses. Each word is one
// name, checked as typed: CLI11 reads a word "[a,b]" given to a list of positionals as the
// names a and b (`release '[prod]'` released prod). Its validator sees the word before
// that, with validate_positionals(); a bad name is a usage error then and there.
void add_name_options(CLI::App* cmd, CommandArgs& args) {
    cmd->validate_positionals();
    cmd->add_option("name", args.names)
        ->type_name("NAME")
        ->check(CLI::Validator(
            [](std::string& word) -> std::string {
                if (auto ok = lock::validate_name(word); !ok)
                    throw NameRefused{ok.error()};
                return {};
            },
            "NAME"));
    cmd->add_option("-k,--key", args.keys)
        ->type_name("NAME")
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void add_json_option(CLI::App* cmd, CommandArgs& args) {
    cmd->add_flag("--json", args.json);
}

// A string option whose presence matters even when its value is empty ("-t ''" is an error,
// not "use the default").
CLI::Option* add_text_option(CLI::App* cmd, const std::string& names,
                             std::optional<std::string>& target) {
    return cmd->add_option_function<std::string>(
        names, [&target](const std::string& value) { target = value; });
}

void add_ttl_option(CLI::App* cmd, std::optional<std::string>& ttl) {
    add_text_option(cmd, "-t,--ttl", ttl)->type_name("DURATION");
}

void add_wait_options(CLI::App* cmd, std::optional<std::string>& wait_text, bool& no_wait,
                      bool& fair, std::optional<std::string>& exit_code) {
    auto* wait = add_text_option(cmd, "-w,--wait,--timeout", wait_text)->type_name("DURATION");
    auto* nowait = cmd->add_flag("-n,--no-wait,--nonblock", no_wait)->excludes(wait);
    cmd->add_flag("--fair", fair)->excludes(nowait);
    add_text_option(cmd, "-E,--conflict-exit-code", exit_code)->type_name("N");
}

// Runs whichever command was chosen once the config is loaded.
int dispatch(std::string_view chosen, const RunArgs& run_args, const CommandArgs& args,
             const config::Config& cfg) {
    auto is = [&](std::string_view name) { return chosen == name; };
    if (is("run")) {
        auto options = make_run_options(run_args, cfg);
        if (!options)
            return report(options.error());
        return run_command(*options, cfg);
    }
    if (is("status")) {
        StatusOptions options{args.names, args.json};
        options.names.insert(options.names.end(), args.keys.begin(), args.keys.end());
        if (options.names.empty())
            return report({util::ErrorKind::usage, "status: a lock NAME is required"});
        for (const auto& n : options.names)
            if (auto ok = lock::validate_name(n); !ok)
                return report(ok.error());
        return status_command(options, cfg);
    }
    if (is("list")) {
        if (args.pattern.empty())
            return report({util::ErrorKind::usage, "list: --pattern must not be empty"});
        return list_command(ListOptions{args.pattern, args.json}, cfg);
    }
    if (is("reap")) {
        if (args.pattern.empty())
            return report({util::ErrorKind::usage, "reap: --pattern must not be empty"});
        return reap_command(ReapOptions{args.pattern, args.dry_run, args.json}, cfg);
    }
    if (is("doctor"))
        return doctor_command(DoctorOptions{args.json}, cfg);
    if (is("watch")) {
        if (args.pattern.empty())
            return report({util::ErrorKind::usage, "watch: --pattern must not be empty"});
        return watch_command(WatchOptions{args.pattern, args.json}, cfg);
    }
    if (is("exporter")) {
        if (args.pattern.empty())
            return report({util::ErrorKind::usage, "exporter: --pattern must not be empty"});
        ExporterOptions options;
        options.pattern = args.pattern;
        if (args.listen)
            options.listen = *args.listen;
        return exporter_command(options, cfg);
    }
    if (is("cron")) {
        if (args.file.empty())
            return report({util::ErrorKind::usage, "cron: a crontab FILE is required"});
        if (args.count || args.from)
            return report({util::ErrorKind::usage, util::format("cron: {} goes with --check",
                                                                args.count ? "-n" : "--from")});
        CronDaemonOptions options;
        options.file = args.file;
        options.json = args.json;
        auto grace = optional_duration(args.grace);
        if (!grace)
            return report(grace.error());
        if (*grace)
            options.grace = **grace;
        options.verbosity = log::level() == log::Level::quiet     ? 0
                            : log::level() == log::Level::verbose ? 2
                                                                  : 1;
        return cron_daemon_command(options, cfg);
    }
    if (is("history")) {
        auto name = one_name(args.names, args.keys);
        if (!name)
            return report(name.error());
        HistoryOptions options;
        options.name = *name;
        options.json = args.json;
        if (args.count) {
            auto n = count_option(*args.count, 100000);
            if (!n)
                return report(n.error());
            options.count = *n;
        }
        auto since = optional_duration(args.since);
        if (!since)
            return report(since.error());
        options.since = *since;
        return history_command(options, cfg);
    }

    auto name = one_name(args.names, args.keys);
    if (!name)
        return report(name.error());
    auto ttl = ttl_or_default(args.ttl, cfg.ttl);
    if (!ttl)
        return report(ttl.error());
    if (is("acquire")) {
        auto wait = wait_option(args.wait, args.no_wait, cfg.wait);
        if (!wait)
            return report(wait.error());
        auto code = conflict_exit_code(args.conflict_exit_code);
        if (!code)
            return report(code.error());
        return acquire_command(
            AcquireOptions{*name, *ttl, *wait, *code, args.json, args.shell, args.fair}, cfg);
    }
    if (is("extend"))
        return extend_command(ExtendOptions{*name, args.token, *ttl}, cfg);
    if (is("release")) {
        if (args.force == !args.token.empty())
            return report({util::ErrorKind::usage, "release: give either --token T or --force"});
        return release_command(ReleaseOptions{*name, args.token, args.force, args.yes}, cfg);
    }
    return report({util::ErrorKind::usage, "a command is required (try 'redlock --help')"});
}

} // namespace

namespace {

// The command named on the command line, found without CLI11: the first word that is not
// a global option or its value. Only that command's options are then built, which is most
// of what CLI11 costs at start-up; with none (help, errors) all of them are.
std::string_view chosen_command(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        std::string_view a(argv[i]);
        if (a == "--")
            return {};
        if (a == "-c" || a == "--config" || a == "-s" || a == "--server") {
            ++i;
            continue;
        }
        if (!a.starts_with("-"))
            return a;
    }
    return {};
}

// "--", "-t", "--ttl": a word that an option parser would take for an option. "-5s" and
// "-" are not.
bool looks_like_option(std::string_view word) {
    return word == "--" ||
           (word.size() >= 2 && word[0] == '-' &&
            (word[1] == '-' || std::isalpha(static_cast<unsigned char>(word[1])) != 0));
}

// CLI11 hands an option the next word whatever it is, so `run -k -- true` locked "--" and
// `run -k -t 5s -- cmd` locked "-t". A separate value that looks like an option is a
// forgotten value; one that really starts with a dash can still be attached (--key=-x).
// Only argv[1, end) is looked at: PROGRAM's own words start at `end`.
std::optional<util::Error> option_value_missing(const CLI::App& app, int argc, char** argv,
                                                int end) {
    const auto commands = app.get_subcommands();
    const CLI::App* command = commands.empty() ? nullptr : commands.front();
    for (int i = 1; i < end && i + 1 < argc; ++i) {
        const std::string word(argv[i]);
        if (word == "--")
            break;
        if (word.size() < 2 || word[0] != '-')
            continue;
        const CLI::Option* option = command ? command->get_option_no_throw(word) : nullptr;
        if (option == nullptr)
            option = app.get_option_no_throw(word);
        if (option == nullptr || option->get_items_expected_min() == 0)
            continue; // a flag, or a value attached to the option (-kNAME, --key=NAME)
        const std::string_view value(argv[++i]);
        if (!looks_like_option(value))
            continue;
        std::string message = util::format("{} needs a value, but '{}' follows it", word, value);
        if (value != "--" && !option->get_lnames().empty())
            message += util::format(" (for a value that starts with '-', write --{}={})",
                                    option->get_lnames().front(), value);
        return util::Error{util::ErrorKind::usage, std::move(message)};
    }
    return std::nullopt;
}

// The first word a parser would not take, in the user's order, as a usage error that
// names it (CLI11 lists every extra word, last first). A second URL after one -s is the
// usual cause: say how to give several.
util::Error unexpected_word(int argc, char** argv, const std::vector<std::string>& extras) {
    for (int i = 1; i < argc; ++i) {
        std::string_view word(argv[i]);
        if (std::ranges::find(extras, word) == extras.end())
            continue;
        // The value of an -s is no extra, even when the extra is the same URL again.
        if (std::string_view after(argv[i - 1]); i >= 2 && (after == "-s" || after == "--server"))
            continue;
        std::string message = util::format("unexpected argument '{}'", word);
        std::string_view before = i >= 3 ? argv[i - 2] : "";
        if (word.find("://") != std::string_view::npos && (before == "-s" || before == "--server"))
            message += " (one URL per -s: -s URL1 -s URL2)";
        else if (auto command = chosen_command(argc, argv); !command.empty())
            message += util::format(" (see 'redlock {} --help')", command);
        return util::Error{util::ErrorKind::usage, mask_urls_in(message, argc, argv)};
    }
    return util::Error{util::ErrorKind::usage, "unexpected arguments (try 'redlock --help')"};
}

} // namespace

namespace {

// The exit status of `--help`: 0, unless stdout could not take it.
int print_help(std::string_view command) {
    return print_stdout(std::string(help_text(command))) ? 0 : util::exit_code::internal;
}

} // namespace

std::expected<CommandLine, int> parse_with_cli11(int argc, char** argv) {
    static const std::ios_base::Init streams; // see cli11.hpp
    CommandLine line;
    line.command = chosen_command(argc, argv);
    const std::string& chosen = line.command;
    // Only the command named on the command line is built (with none: help, --version or
    // an error), which is most of what CLI11 costs at start-up. The help texts are
    // help.cpp's, so the options carry no descriptions of their own.
    CLI::App app{"", "redlock"};
    app.require_subcommand(0, 1);
    app.fallthrough();
    GlobalOptions& global = line.global;
    add_text_option(&app, "-c,--config", global.config_file)->type_name("FILE");
    app.add_option("-s,--server", global.servers)
        ->type_name("URL")
        ->allow_extra_args(false) // one URL per -s: PROGRAM is never taken for a URL
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app.add_flag("-v,--verbose", global.verbose);
    app.add_flag("-q,--quiet", global.quiet);
    app.add_flag("--version", line.show_version);

    RunArgs& run_args = line.run;
    CommandArgs& args = line.args;
    CLI::App* command = chosen.empty() ? nullptr : app.add_subcommand(std::string(chosen));
    if (chosen == "run") {
        command->add_option("-k,--key", run_args.key)->type_name("NAME")->required();
        add_ttl_option(command, run_args.ttl);
        add_wait_options(command, run_args.wait, run_args.no_wait, run_args.fair,
                         run_args.conflict_exit_code);
        add_text_option(command, "--max-hold", run_args.max_hold)->type_name("DURATION");
        add_text_option(command, "--min-validity", run_args.min_validity)->type_name("DURATION");
        add_text_option(command, "--min-hold", run_args.min_hold)->type_name("DURATION");
        add_text_option(command, "--once-per", run_args.once_per)->type_name("DURATION");
        add_text_option(command, "--limit", run_args.limit)->type_name("N");
        add_text_option(command, "--metrics", run_args.metrics)->type_name("FILE");
        add_text_option(command, "--events", run_args.events)->type_name("FILE");
        add_text_option(command, "--on-lost", run_args.on_lost)->type_name("CMD");
        command->add_flag("--notify-passthrough", run_args.notify_passthrough);
        command->add_option("program", run_args.program)->type_name("PROGRAM");
        // Options stop at PROGRAM, so its own flags are left alone (as with flock(1)).
        command->positionals_at_end();
    } else if (chosen == "status") {
        add_name_options(command, args);
        add_json_option(command, args);
    } else if (chosen == "list") {
        command->add_option("-p,--pattern", args.pattern)->type_name("GLOB");
        add_json_option(command, args);
    } else if (chosen == "reap") {
        command->add_option("-p,--pattern", args.pattern)->type_name("GLOB");
        command->add_flag("--dry-run", args.dry_run);
        add_json_option(command, args);
    } else if (chosen == "acquire") {
        add_name_options(command, args);
        add_ttl_option(command, args.ttl);
        add_wait_options(command, args.wait, args.no_wait, args.fair, args.conflict_exit_code);
        auto* json = command->add_flag("--json", args.json);
        command->add_flag("--shell", args.shell)->excludes(json);
    } else if (chosen == "extend") {
        add_name_options(command, args);
        command->add_option("--token", args.token)->type_name("TOKEN")->required();
        add_ttl_option(command, args.ttl);
    } else if (chosen == "release") {
        add_name_options(command, args);
        command->add_option("--token", args.token)->type_name("TOKEN");
        command->add_flag("-f,--force", args.force);
        command->add_flag("-y,--yes", args.yes);
    } else if (chosen == "doctor") {
        add_json_option(command, args);
    } else if (chosen == "watch") {
        command->add_option("-p,--pattern", args.pattern)->type_name("GLOB");
        add_json_option(command, args);
    } else if (chosen == "exporter") {
        command->add_option("-p,--pattern", args.pattern)->type_name("GLOB");
        add_text_option(command, "--listen", args.listen)->type_name("ADDR:PORT");
    } else if (chosen == "cron") {
        command->add_flag("--check", args.check);
        add_text_option(command, "-n,--count", args.count)->type_name("N");
        add_text_option(command, "--from", args.from)->type_name("TIME");
        add_text_option(command, "--grace", args.grace)->type_name("DURATION");
        add_json_option(command, args);
        command->add_option("file", args.file)->type_name("FILE");
    } else if (chosen == "history") {
        add_name_options(command, args);
        add_text_option(command, "-n,--count", args.count)->type_name("N");
        add_text_option(command, "--since", args.since)->type_name("DURATION");
        add_json_option(command, args);
    }

    try {
        app.parse(argc, argv);
    } catch (const NameRefused& refused) {
        return std::unexpected(report(refused.error));
    } catch (const CLI::CallForHelp&) {
        return std::unexpected(print_help(chosen));
    } catch (const CLI::CallForAllHelp&) {
        return std::unexpected(print_help(chosen));
    } catch (const CLI::ExtrasError& e) {
        // CLI11 lists the extra words last first, after ": ": name the first one instead.
        std::string_view what = e.what();
        what.remove_prefix(std::min(what.size(), what.find(": ") + 2));
        std::vector<std::string> words;
        for (size_t start = 0; start < what.size();) {
            size_t end = std::min(what.find(' ', start), what.size());
            words.emplace_back(what.substr(start, end - start));
            start = end + 1;
        }
        return std::unexpected(report(unexpected_word(argc, argv, words)));
    } catch (const CLI::ParseError& e) {
        // CLI11 checks required options before unknown ones, so `run --bogus` would say
        // "--key is required": an unknown option is the first mistake to name.
        if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
            std::vector<std::string> unknown;
            for (auto& word : app.remaining(true))
                if (word != "--" && looks_like_option(word))
                    unknown.push_back(std::move(word));
            if (!unknown.empty())
                return std::unexpected(report(unexpected_word(argc, argv, unknown)));
        }
        // CLI11 writes "The following argument..." or "--opt: Value ..."; house style is
        // lowercase text after "redlock: " (and after an option name).
        std::string what = e.what();
        size_t first = what.starts_with("-") ? what.find(": ") : std::string::npos;
        first = first == std::string::npos ? 0 : first + 2;
        if (first < what.size())
            what[first] = static_cast<char>(std::tolower(static_cast<unsigned char>(what[first])));
        log::error("{} (try 'redlock --help')", mask_urls_in(what, argc, argv));
        return std::unexpected(util::exit_code::usage);
    }
    const int program_start = argc - static_cast<int>(run_args.program.size());
    if (auto missing = option_value_missing(app, argc, argv, program_start))
        return std::unexpected(report(*missing));
    line.program_start = program_start;
    if (app.get_subcommands().empty())
        line.command.clear();
    return line;
}

namespace {

int run_main(int argc, char** argv) {
    // What a run's watchdog becomes when redlock dies: no options, no config.
    if (argc == 2 && std::string_view(argv[1]) == process::k_release_command)
        return dead_run_command();
    // What the cron daemon starts for a slot: its SlotRun on stdin, no config.
    if (argc == 4 && std::string_view(argv[1]) == job::k_slot_command)
        return cron_slot_command();
    // A copy: mask_passwords() rewrites argv, which the view would point into.
    const std::string chosen(chosen_command(argc, argv));
    if (!chosen.empty() && help_text(chosen).empty() &&
        chosen.find("://") != std::string_view::npos)
        return report(unexpected_word(argc, argv, {std::string(chosen)}));
    if (!chosen.empty() && help_text(chosen).empty()) {
        std::string names;
        for (auto name : command_names())
            names += (names.empty() ? "" : ", ") + std::string(name);
        return report({util::ErrorKind::usage,
                       util::format("unknown command '{}' (commands: {}; try 'redlock --help')",
                                    mask_urls_in(std::string(chosen), argc, argv), names)});
    }
    // The plain `run` line of a cron job without CLI11 (see args.hpp); the rest with it.
    std::expected<CommandLine, int> parsed = std::unexpected(0);
    if (auto fast = chosen == "run" ? parse_run_fast(argc, argv) : std::nullopt)
        parsed = std::move(*fast);
    else
        parsed = parse_with_cli11(argc, argv);
    if (!parsed)
        return parsed.error();
    const CommandLine& line = *parsed;
    if (line.show_version) {
        return print_stdout(version_text()) ? 0 : util::exit_code::internal;
    }
    if (line.command.empty()) {
        log::error("a command is required: run, status, list, history, watch, exporter, "
                   "acquire, extend, release, reap, doctor or cron (try 'redlock --help')");
        return util::exit_code::usage;
    }
    mask_passwords(argc, argv, line.program_start);
    log::set_level(line.global.verbose ? log::Level::verbose
                   : line.global.quiet ? log::Level::quiet
                                       : log::Level::normal);
    if (line.command == "cron" && line.args.check)
        return cron_check(line.args);

    auto cfg = load(line.global);
    if (!cfg)
        return report(cfg.error());
    return dispatch(line.command, line.run, line.args, *cfg);
}

} // namespace

int main(int argc, char** argv) {
    // Before anything opens a descriptor: a closed stderr must not be taken over by a
    // Redis socket. Without /dev/null there is nowhere to say why; the status must do.
    if (!util::occupy_standard_fds())
        return util::exit_code::internal;
    // Failure that is normal is a value; anything thrown is a bug or the system failing
    // (out of memory, no randomness): one message and status 70, never an abort.
    try {
        return run_main(argc, argv);
    } catch (const std::exception& e) {
        log::error("internal error: {}", e.what());
    } catch (...) {
        log::error("internal error");
    }
    return util::exit_code::internal;
}

} // namespace redlock::cli
