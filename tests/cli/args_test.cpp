// parse_run_fast() against CLI11: every `run` line the fast path reads, it must read as
// CLI11 does; everything else it must leave to CLI11.

#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cli/args.hpp"

namespace {

using redlock::cli::CommandLine;

struct Argv {
    explicit Argv(std::vector<std::string> words) : storage(std::move(words)) {
        storage.insert(storage.begin(), "redlock");
        for (auto& w : storage)
            pointers.push_back(w.data());
        pointers.push_back(nullptr);
    }
    [[nodiscard]] int argc() const { return static_cast<int>(storage.size()); }
    char** argv() { return pointers.data(); }

    std::vector<std::string> storage;
    std::vector<char*> pointers;
};

std::string shown(const std::vector<std::string>& words) {
    std::string out;
    for (const auto& w : words)
        out += "[" + w + "] ";
    return out;
}

} // namespace

TEST_CASE("the plain run line is read without CLI11, exactly as CLI11 reads it") {
    const std::vector<std::vector<std::string>> lines = {
        {"run", "-k", "job", "--", "true"},
        {"run", "-k", "job", "true"},
        {"run", "--key", "job", "--", "sh", "-c", "echo $1", "--", "x"},
        {"run", "-k", "job", "sh", "-c", "exit 3"},
        {"run", "-k", "job", "run"},
        {"run", "-k", "job", "--", "-dash-program"},
        {"-s", "redis://127.0.0.1:6379", "run", "-k", "job", "--", "true"},
        {"-s", "redis://a:1", "-s", "redis://b:2", "--server", "unix:///tmp/r.sock", "run", "-k",
         "j", "--", "true"},
        {"run", "-s", "redis://a:1", "-k", "job", "-q", "--", "true"},
        {"-c", "/etc/redlock/x.toml", "-v", "run", "-k", "job", "--", "true"},
        {"--config", "c.toml", "--quiet", "--verbose", "run", "--key", "job", "--", "true"},
        {"-q", "run", "-k", "job", "-t", "30s", "-w", "5m", "-E", "0", "--", "true"},
        {"run", "-k", "job", "--ttl", "1m", "--wait", "1h", "--fair", "--", "true"},
        {"run", "-k", "job", "--timeout", "10s", "--conflict-exit-code", "75", "--", "true"},
        {"run", "-k", "job", "-n", "--", "true"},
        {"run", "-k", "job", "--no-wait", "--", "true"},
        {"run", "-k", "job", "--nonblock", "true"},
        {"run", "-k", "job", "--max-hold", "2h", "--min-validity", "5s", "--min-hold", "1m", "--",
         "true"},
        {"run", "-k", "nightly", "--once-per", "1d", "--", "true"},
        {"run", "-k", "pool", "--limit", "3", "--", "true"},
        {"run", "-k", "watched", "--metrics", "/tmp/m.prom", "--events", "fd:3", "--on-lost",
         "logger lost", "--notify-passthrough", "--", "daemon"},
        {"run", "-k", "{tag}:job/1", "--", "/bin/echo", "a b", ""},
    };
    for (const auto& words : lines) {
        CAPTURE(shown(words));
        Argv fast_argv(words);
        auto fast = redlock::cli::parse_run_fast(fast_argv.argc(), fast_argv.argv());
        REQUIRE(fast.has_value());
        Argv cli_argv(words);
        auto full = redlock::cli::parse_with_cli11(cli_argv.argc(), cli_argv.argv());
        REQUIRE(full.has_value());
        CHECK(fast->command == full->command);
        CHECK(fast->global == full->global);
        CHECK(fast->run == full->run);
        CHECK(fast->args == full->args);
        CHECK(fast->program_start == full->program_start);
        CHECK(*fast == *full);
    }
}

TEST_CASE("every other line is left to CLI11") {
    const std::vector<std::vector<std::string>> lines = {
        {"run", "--help"},
        {"run", "-h"},
        {"--version"},
        {"status", "job"},
        {"run", "--key=job", "--", "true"},
        {"run", "-kjob", "--", "true"},
        {"-qv", "run", "-k", "job", "--", "true"},
        {"--server=redis://a:1", "run", "-k", "job", "--", "true"},
        {"run", "-k", "a", "-k", "b", "--", "true"},
        {"run", "-k", "job", "-t", "1s", "-t", "2s", "--", "true"},
        {"-v", "-v", "run", "-k", "job", "--", "true"},
        {"run", "-k", "", "--", "true"},
        {"run", "-k", "-t", "5s", "--", "true"},
        {"run", "-k", "--", "true"},
        {"run", "-k", "job", "-E", "-1", "--", "true"},
        {"run", "-k", "job"},
        {"run", "-k", "job", "--"},
        {"run", "--", "true"},
        {"run", "true"},
        {"-k", "job", "run", "--", "true"},
        {"run", "-k", "job", "--bogus", "--", "true"},
        {"run", "-k", "job", "-w", "5s", "-n", "--", "true"},
        {"run", "-k", "job", "--fair", "-n", "--", "true"},
        {"run", "-k", "job", "sh", "--", "x"},
        {"-s", "redis://a:1"},
        {"run", "-k", "job", "-t"},
    };
    for (const auto& words : lines) {
        CAPTURE(shown(words));
        Argv argv(words);
        CHECK_FALSE(redlock::cli::parse_run_fast(argv.argc(), argv.argv()).has_value());
    }
}
