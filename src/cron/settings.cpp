#include "cron/settings.hpp"

#include <array>
#include <charconv>

#include "lock/name.hpp"
#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/text.hpp"

namespace redlock::cron {

namespace {

using namespace std::string_view_literals;

constexpr std::string_view k_prefix = "redlock:";

constexpr std::array k_keys = {"name"sv,   "catch-up"sv, "overlap"sv,       "timeout"sv,
                               "jitter"sv, "limit"sv,    "at-least-once"sv, "dir"sv};

constexpr std::array<std::pair<std::string_view, Overlap>, 4> k_overlaps = {{
    {"skip", Overlap::skip},
    {"allow", Overlap::allow},
    {"queue", Overlap::queue},
    {"replace", Overlap::replace},
}};

struct Setting {
    std::string_view key;
    std::optional<std::string_view> value;
    size_t key_at = 0;
    size_t value_at = 0;
};

std::unexpected<LineError> fail(size_t at, std::string message) {
    return std::unexpected(LineError{at, std::move(message)});
}

std::expected<void, LineError> apply(const Setting& s, Settings& out) {
    const std::string_view key = s.key;
    if (key == "at-least-once") {
        if (s.value)
            return fail(s.key_at, "at-least-once takes no value");
        out.at_least_once = true;
        return {};
    }
    if (!s.value)
        return fail(s.key_at, util::format("{} needs a value ({}=...)", key, key));
    const std::string_view value = *s.value;
    auto bad = [&](std::string_view why) {
        return fail(s.value_at, util::format("{}: {}", key, why));
    };
    auto duration = [&]() -> std::expected<std::chrono::milliseconds, LineError> {
        auto d = util::parse_duration(value);
        if (!d)
            return bad(d.error().message);
        return *d;
    };
    if (key == "name") {
        if (auto ok = lock::validate_name(value); !ok)
            return bad(ok.error().message);
        out.name = std::string(value);
    } else if (key == "catch-up") {
        auto d = duration();
        if (!d)
            return std::unexpected(d.error());
        out.catch_up = *d;
    } else if (key == "timeout") {
        auto d = duration();
        if (!d)
            return std::unexpected(d.error());
        if (d->count() == 0)
            return bad("must be longer than 0");
        out.timeout = *d;
    } else if (key == "jitter") {
        auto d = duration();
        if (!d)
            return std::unexpected(d.error());
        out.jitter = *d;
    } else if (key == "overlap") {
        const auto* it =
            std::ranges::find(k_overlaps, value, &std::pair<std::string_view, Overlap>::first);
        if (it == k_overlaps.end())
            return bad(util::format("'{}' is not one of skip, allow, queue, replace", value));
        out.overlap = it->second;
    } else if (key == "limit") {
        size_t n = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec != std::errc() || end != value.data() + value.size() || n < 1 || n > 1000)
            return bad(util::format("'{}' is not a number from 1 to 1000", value));
        out.limit = n;
    } else if (key == "dir") {
        if (!value.starts_with('/'))
            return bad(util::format("'{}' is not an absolute path", value));
        out.dir = std::string(value);
    }
    return {};
}

} // namespace

std::string_view overlap_name(Overlap overlap) {
    for (const auto& [name, value] : k_overlaps)
        if (value == overlap)
            return name;
    return "skip";
}

bool is_settings_line(std::string_view line) {
    return line.starts_with('#') && line.substr(util::skip_blanks(line, 1)).starts_with(k_prefix);
}

std::expected<void, LineError> read_settings(std::string_view line, Settings& settings,
                                             std::set<std::string>& seen) {
    size_t i = util::skip_blanks(line, util::skip_blanks(line, 1) + k_prefix.size());
    if (i == line.size())
        return fail(i, "no settings after 'redlock:'");
    while (i < line.size()) {
        Setting s;
        s.key_at = i;
        while (i < line.size() && line[i] != '=' && line[i] != ' ' && line[i] != '\t')
            ++i;
        s.key = line.substr(s.key_at, i - s.key_at);
        if (i < line.size() && line[i] == '=') {
            s.value_at = ++i;
            if (i < line.size() && line[i] == '"') {
                const size_t close = line.find('"', i + 1);
                if (close == std::string_view::npos)
                    return fail(i, util::format("{}: the quote is not closed", s.key));
                s.value = line.substr(i + 1, close - i - 1);
                i = close + 1;
                if (i < line.size() && line[i] != ' ' && line[i] != '\t')
                    return fail(i,
                                util::format("{}: unexpected text after the closing quote", s.key));
            } else {
                while (i < line.size() && line[i] != ' ' && line[i] != '\t')
                    ++i;
                s.value = line.substr(s.value_at, i - s.value_at);
            }
        }
        if (std::ranges::find(k_keys, s.key) == k_keys.end()) {
            std::string message = util::format("unknown setting '{}'", s.key);
            if (auto hint = util::closest_word(s.key, k_keys))
                message += util::format(" (did you mean '{}'?)", *hint);
            else
                message += " (name, catch-up, overlap, timeout, jitter, limit, at-least-once, dir)";
            return fail(s.key_at, std::move(message));
        }
        if (!seen.insert(std::string(s.key)).second)
            return fail(s.key_at, util::format("{} is set twice for this job", s.key));
        if (auto ok = apply(s, settings); !ok)
            return ok;
        i = util::skip_blanks(line, i);
    }
    return {};
}

} // namespace redlock::cron
