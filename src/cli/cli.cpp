#include "cli/cli.hpp"
#include "util/format.hpp"

#include <cstring>
#include <iostream>

#include <CLI/CLI.hpp>
#include <hiredis/hiredis.h>

#include "cli/run_command.hpp"
#include "config/config.hpp"
#include "lock/name.hpp"
#include "util/duration.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/version.hpp"

namespace redlock::cli {

namespace {

namespace log = util::log;

struct GlobalOptions {
    std::string config_file;
    std::vector<std::string> servers;
    bool verbose = false;
    bool quiet = false;
};

struct RunArgs {
    std::string key;
    std::string ttl;
    std::string wait;
    bool no_wait = false;
    int conflict_exit_code = util::exit_code::conflict;
    std::vector<std::string> program;
};

int report(const util::Error& error) {
    log::error("{}", error.message);
    return util::exit_status(error.kind);
}

std::string version_text() {
    return util::format("redlock {} (hiredis {}.{}.{}, TLS: no)\n", util::k_version,
                       HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
}

// A password given in a -s URL would show in `ps` for as long as redlock runs; overwrite it
// in our argv now that CLI11 has its own copy (what the mysql client does).
void mask_passwords(int argc, char** argv, int program_start) {
    for (int i = 1; i < program_start && i < argc; ++i) {
        std::string_view arg(argv[i]);
        if (arg == "--")
            break;
        auto scheme = arg.find("://");
        if (scheme == std::string_view::npos)
            continue;
        // "-sredis://..." and "--server=redis://..." carry the URL inside the option.
        size_t url_start = arg.rfind('=', scheme);
        url_start = url_start == std::string_view::npos ? 0 : url_start + 1;
        if (arg.starts_with("-s") && !arg.starts_with("--"))
            url_start = 2;
        if (auto range = config::find_url_password(arg.substr(url_start)))
            std::memset(argv[i] + url_start + range->first, 'x', range->second);
    }
}

util::Expected<config::Config> load(const GlobalOptions& global) {
    std::optional<std::filesystem::path> explicit_path;
    if (!global.config_file.empty())
        explicit_path = global.config_file;
    auto path = config::find_config_file(explicit_path);
    if (!path)
        return std::unexpected(path.error());
    auto cfg = config::load_config(*path);
    if (!cfg)
        return cfg;
    if (!global.servers.empty()) {
        cfg->servers.clear();
        for (const auto& url : global.servers) {
            auto parsed = config::parse_server_url(url);
            if (!parsed)
                return std::unexpected(parsed.error());
            cfg->servers.push_back(config::ServerConfig{std::move(*parsed), cfg->connect_timeout,
                                                        cfg->command_timeout});
        }
    }
    return cfg;
}

util::Expected<RunOptions> make_run_options(const RunArgs& args, const config::Config& cfg) {
    RunOptions options;
    if (auto ok = lock::validate_name(args.key); !ok)
        return std::unexpected(ok.error());
    options.name = args.key;
    options.ttl = cfg.ttl;
    if (!args.ttl.empty()) {
        auto ttl = util::parse_duration(args.ttl);
        if (!ttl)
            return std::unexpected(ttl.error());
        options.ttl = *ttl;
    }
    if (options.ttl < std::chrono::milliseconds(10))
        return util::fail(util::ErrorKind::usage,
                          util::format("ttl {} is too short; use at least 10ms",
                                      util::format_duration(options.ttl)));
    options.wait = cfg.wait;
    if (!args.wait.empty()) {
        auto wait = util::parse_duration(args.wait);
        if (!wait)
            return std::unexpected(wait.error());
        options.wait = *wait;
    }
    // As in flock(1): -w 0 means the same as -n.
    if (args.no_wait)
        options.wait = std::chrono::milliseconds(0);
    options.conflict_exit_code = args.conflict_exit_code;
    options.program = args.program;
    if (options.program.empty())
        return util::fail(util::ErrorKind::usage, "run: no PROGRAM given (redlock run -k NAME -- PROGRAM [ARG...])");
    return options;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"Run a command under a distributed lock held in Redis.", "redlock"};
    app.footer("Exit status: PROGRAM's own; 75 lock held; 64 usage; 69 servers unavailable;\n"
               "77 auth refused; 78 config error; 79 lease lost; 126/127 PROGRAM not runnable.\n"
               "See redlock(1).");
    app.require_subcommand(1);
    app.fallthrough();
    GlobalOptions global;
    app.add_option("-c,--config", global.config_file, "Config file (default: search path)")
        ->type_name("FILE");
    app.add_option("-s,--server", global.servers,
                   "Redis server URL; repeat for Redlock (replaces the config's servers)")
        ->type_name("URL")
        ->take_all();
    app.add_flag("-v,--verbose", global.verbose, "Say what happens: acquire, renew, release");
    app.add_flag("-q,--quiet", global.quiet, "Silence redlock's notes (errors still print)");
    bool show_version = false;
    app.add_flag("--version", show_version, "Print the version and exit");

    RunArgs run_args;
    auto* run = app.add_subcommand("run", "Run PROGRAM while holding the lock");
    run->add_option("-k,--key", run_args.key, "The lock's name")->type_name("NAME")->required();
    run->add_option("-t,--ttl", run_args.ttl, "Lease length, renewed while PROGRAM runs (30s)")
        ->type_name("DURATION");
    auto* wait = run->add_option("-w,--wait,--timeout", run_args.wait,
                                 "Wait at most this long for the lock (default: forever)")
                     ->type_name("DURATION");
    run->add_flag("-n,--no-wait,--nonblock", run_args.no_wait, "Fail at once if the lock is held")
        ->excludes(wait);
    run->add_option("-E,--conflict-exit-code", run_args.conflict_exit_code,
                    "Exit status when the lock is not acquired (75)")
        ->type_name("N")
        ->check(CLI::Range(0, 255));
    run->add_option("program", run_args.program, "PROGRAM [ARG...]")->type_name("PROGRAM");
    // Options stop at PROGRAM, so its own flags are left alone (as with flock(1)).
    run->positionals_at_end();

    try {
        // --version alone is not a subcommand run; check for it before requiring one.
        for (int i = 1; i < argc; ++i) {
            std::string_view a(argv[i]);
            if (a == "--")
                break;
            if (a == "--version") {
                std::cout << version_text();
                return 0;
            }
        }
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::string what = e.what();
        if (!what.empty())
            what[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(what[0])));
        log::error("{} (try 'redlock --help')", what);
        return util::exit_code::usage;
    }
    mask_passwords(argc, argv, argc - static_cast<int>(run_args.program.size()));
    log::set_level(global.verbose ? log::Level::verbose
                   : global.quiet ? log::Level::quiet
                                  : log::Level::normal);

    auto cfg = load(global);
    if (!cfg)
        return report(cfg.error());

    if (*run) {
        auto options = make_run_options(run_args, *cfg);
        if (!options)
            return report(options.error());
        return run_command(*options, *cfg);
    }
    return util::exit_code::usage;
}

} // namespace redlock::cli
