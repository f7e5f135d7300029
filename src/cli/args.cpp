#include "cli/args.hpp"

#include <array>
#include <string_view>

namespace redlock::cli {

namespace {

// One option of the plain `run` line: its spellings, whether it is redlock's own (allowed
// before `run` too) and what it sets; a null `value` makes it a flag.
struct Spec {
    std::array<std::string_view, 3> names;
    bool global;
    bool repeatable;
    void (*value)(CommandLine&, std::string_view);
    void (*flag)(CommandLine&);
};

// clang-format off
constexpr std::array<Spec, 19> k_specs{{
    {{"-s", "--server"}, true, true,
     [](CommandLine& c, std::string_view v) { c.global.servers.emplace_back(v); }, nullptr},
    {{"-c", "--config"}, true, false,
     [](CommandLine& c, std::string_view v) { c.global.config_file = v; }, nullptr},
    {{"-v", "--verbose"}, true, false, nullptr, [](CommandLine& c) { c.global.verbose = true; }},
    {{"-q", "--quiet"}, true, false, nullptr, [](CommandLine& c) { c.global.quiet = true; }},
    {{"-k", "--key"}, false, false, [](CommandLine& c, std::string_view v) { c.run.key = v; },
     nullptr},
    {{"-t", "--ttl"}, false, false, [](CommandLine& c, std::string_view v) { c.run.ttl = v; },
     nullptr},
    {{"-w", "--wait", "--timeout"}, false, false,
     [](CommandLine& c, std::string_view v) { c.run.wait = v; }, nullptr},
    {{"-n", "--no-wait", "--nonblock"}, false, false, nullptr,
     [](CommandLine& c) { c.run.no_wait = true; }},
    {{"--fair"}, false, false, nullptr, [](CommandLine& c) { c.run.fair = true; }},
    {{"-E", "--conflict-exit-code"}, false, false,
     [](CommandLine& c, std::string_view v) { c.run.conflict_exit_code = v; }, nullptr},
    {{"--max-hold"}, false, false, [](CommandLine& c, std::string_view v) { c.run.max_hold = v; },
     nullptr},
    {{"--min-validity"}, false, false,
     [](CommandLine& c, std::string_view v) { c.run.min_validity = v; }, nullptr},
    {{"--min-hold"}, false, false, [](CommandLine& c, std::string_view v) { c.run.min_hold = v; },
     nullptr},
    {{"--once-per"}, false, false, [](CommandLine& c, std::string_view v) { c.run.once_per = v; },
     nullptr},
    {{"--limit"}, false, false, [](CommandLine& c, std::string_view v) { c.run.limit = v; },
     nullptr},
    {{"--metrics"}, false, false, [](CommandLine& c, std::string_view v) { c.run.metrics = v; },
     nullptr},
    {{"--events"}, false, false, [](CommandLine& c, std::string_view v) { c.run.events = v; },
     nullptr},
    {{"--on-lost"}, false, false, [](CommandLine& c, std::string_view v) { c.run.on_lost = v; },
     nullptr},
    {{"--notify-passthrough"}, false, false, nullptr,
     [](CommandLine& c) { c.run.notify_passthrough = true; }},
}};
// clang-format on

const Spec* find_spec(std::string_view word) {
    for (const auto& spec : k_specs)
        for (auto name : spec.names)
            if (!name.empty() && name == word)
                return &spec;
    return nullptr;
}

} // namespace

std::optional<CommandLine> parse_run_fast(int argc, const char* const* argv) {
    CommandLine line;
    line.command = "run";
    line.program_start = argc;
    bool in_run = false;
    bool dashes = false; // PROGRAM comes after "--"
    std::array<bool, k_specs.size()> seen{};
    int i = 1;
    for (; i < argc; ++i) {
        const std::string_view word(argv[i]);
        if (!in_run && word == "run") {
            in_run = true;
            continue;
        }
        if (in_run && word == "--") {
            ++i;
            dashes = true;
            break;
        }
        if (in_run && !word.empty() && word[0] != '-')
            break; // PROGRAM
        const Spec* spec = find_spec(word);
        if (spec == nullptr || (!in_run && !spec->global))
            return std::nullopt;
        auto& was_seen = seen[static_cast<size_t>(spec - k_specs.data())];
        if (was_seen && !spec->repeatable)
            return std::nullopt;
        was_seen = true;
        if (spec->flag) {
            spec->flag(line);
            continue;
        }
        if (i + 1 >= argc)
            return std::nullopt;
        const std::string_view value(argv[++i]);
        if (value.empty() || value[0] == '-')
            return std::nullopt;
        spec->value(line, value);
    }
    if (!in_run || line.run.key.empty() || i >= argc)
        return std::nullopt;
    // Options that exclude each other are CLI11's to report.
    if (line.run.no_wait && (line.run.wait || line.run.fair))
        return std::nullopt;
    line.program_start = i;
    for (int j = i; j < argc; ++j) {
        const std::string_view word(argv[j]);
        // Without "--", what CLI11 does with a later "--" is its business.
        if (word == "--" && !dashes)
            return std::nullopt;
        line.run.program.emplace_back(word);
    }
    return line;
}

} // namespace redlock::cli
