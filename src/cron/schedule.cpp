#include "cron/schedule.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <optional>
#include <span>
#include <vector>

#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/text.hpp"

namespace redlock::cron {

namespace {

using namespace std::string_view_literals;

constexpr std::array k_month_names = {"jan"sv, "feb"sv, "mar"sv, "apr"sv, "may"sv, "jun"sv,
                                      "jul"sv, "aug"sv, "sep"sv, "oct"sv, "nov"sv, "dec"sv};
constexpr std::array k_day_names = {"sun"sv, "mon"sv, "tue"sv, "wed"sv, "thu"sv, "fri"sv, "sat"sv};

struct FieldSpec {
    std::string_view name;
    int low;
    int high;
    std::span<const std::string_view> names; // names[i] is low + i (months) or i (days)
    int first_named;                         // the value of names[0]
    std::string_view names_hint;             // "jan-dec or 1-12"
};

constexpr FieldSpec k_second{"second", 0, 59, {}, 0, {}};
constexpr FieldSpec k_minute{"minute", 0, 59, {}, 0, {}};
constexpr FieldSpec k_hour{"hour", 0, 23, {}, 0, {}};
constexpr FieldSpec k_day{"day-of-month", 1, 31, {}, 0, {}};
constexpr FieldSpec k_month{"month", 1, 12, k_month_names, 1, "jan-dec or 1-12"};
// 0 and 7 are both Sunday; ranges may end at 7 (fri-sun is 5-0, read as 5-7).
constexpr FieldSpec k_weekday{"day-of-week", 0, 7, k_day_names, 0, "sun-sat or 0-7"};

// Words that can be time fields: digits, '*', ',', '-', '/', and month or day names.
// Quartz's '?', '#', L, W and LW too, so that the field's own error names them.
bool looks_like_field(std::string_view word) {
    for (size_t i = 0; i < word.size();) {
        const char c = word[i];
        if ((c >= '0' && c <= '9') || c == '*' || c == ',' || c == '-' || c == '/' || c == '?' ||
            c == '#') {
            ++i;
            continue;
        }
        size_t end = i;
        while (end < word.size() && std::isalpha(static_cast<unsigned char>(word[end])) != 0)
            ++end;
        const std::string_view letters = word.substr(i, end - i);
        auto is = [&](std::string_view name) {
            return letters.size() == 3 &&
                   std::equal(name.begin(), name.end(), letters.begin(), [](char a, char b) {
                       return a == std::tolower(static_cast<unsigned char>(b));
                   });
        };
        const bool quartz = letters == "L" || letters == "W" || letters == "LW";
        if (letters.empty() || (!quartz && std::ranges::none_of(k_month_names, is) &&
                                std::ranges::none_of(k_day_names, is)))
            return false;
        i = end;
    }
    return !word.empty();
}

struct Word {
    std::string_view text;
    size_t offset;
};

// The first `count` blank-separated words of `line`, fewer if it has fewer.
std::vector<Word> first_words(std::string_view line, size_t count) {
    std::vector<Word> words;
    size_t i = 0;
    while (words.size() < count) {
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t'))
            ++i;
        if (i == line.size())
            break;
        const size_t start = i;
        while (i < line.size() && line[i] != ' ' && line[i] != '\t')
            ++i;
        words.push_back({line.substr(start, i - start), start});
    }
    return words;
}

// One field's items, read into the values they select.
class FieldReader {
  public:
    FieldReader(const FieldSpec& spec, Word word) : m_spec(spec), m_word(word) {}

    std::expected<std::bitset<64>, LineError> read() {
        std::bitset<64> bits;
        size_t start = 0;
        while (true) {
            const size_t comma = m_word.text.find(',', start);
            const size_t end = comma == std::string_view::npos ? m_word.text.size() : comma;
            m_item = m_word.text.substr(start, end - start);
            m_item_offset = start;
            if (m_item.empty())
                return fail(0, util::format("empty item in the list '{}'", m_word.text));
            if (auto ok = read_item(bits); !ok)
                return std::unexpected(ok.error());
            if (comma == std::string_view::npos)
                return bits;
            start = comma + 1;
        }
    }

  private:
    std::unexpected<LineError> fail(size_t at, std::string message) const {
        return std::unexpected(LineError{m_word.offset + m_item_offset + at,
                                         util::format("{}: {}", m_spec.name, message)});
    }

    std::unexpected<LineError> unexpected_at(size_t at) const {
        if (at == m_item.size())
            return fail(at, util::format("'{}' ends too soon", m_item));
        const char c = m_item[at];
        if (c == '?' || c == '#')
            return fail(at, util::format("'{}' is not supported (Quartz syntax: cron(5) has no "
                                         "?, L, W or #)",
                                         c));
        return fail(at, util::format("unexpected '{}' in '{}'", c, m_item));
    }

    // A number or a name at m_item[at], and where it ends.
    std::expected<std::pair<int, size_t>, LineError> value(size_t at) const {
        size_t end = at;
        while (end < m_item.size() && m_item[end] >= '0' && m_item[end] <= '9')
            ++end;
        if (end > at) {
            int number = 0;
            const auto [ptr, ec] = std::from_chars(m_item.data() + at, m_item.data() + end, number);
            if (ec != std::errc() || number < m_spec.low || number > m_spec.high)
                return fail(at, util::format("{} is out of range {}-{}",
                                             m_item.substr(at, end - at), m_spec.low, m_spec.high));
            return std::pair{number, end};
        }
        while (end < m_item.size() && std::isalpha(static_cast<unsigned char>(m_item[end])) != 0)
            ++end;
        if (end == at)
            return unexpected_at(at);
        std::string word(m_item.substr(at, end - at));
        for (char& c : word)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (m_spec.names.empty()) {
            const bool quartz = word == "l" || word == "w" || word == "lw";
            return fail(
                at, util::format("'{}' is not a number{}", m_item.substr(at, end - at),
                                 quartz ? " (Quartz syntax: cron(5) has no ?, L, W or #)" : ""));
        }
        for (size_t i = 0; i < m_spec.names.size(); ++i)
            if (m_spec.names[i] == word)
                return std::pair{m_spec.first_named + static_cast<int>(i), end};
        return fail(at, util::format("unknown name '{}' ({})", m_item.substr(at, end - at),
                                     m_spec.names_hint));
    }

    // item = "*" ["/" step] | value ["-" value] ["/" step]; "5/15" is 5-max/15.
    std::expected<void, LineError> read_item(std::bitset<64>& bits) const {
        int first = m_spec.low, last = m_spec.high;
        size_t at = 0;
        if (m_item[0] == '*') {
            at = 1;
        } else {
            auto low = value(0);
            if (!low)
                return std::unexpected(low.error());
            first = last = low->first;
            at = low->second;
            if (at < m_item.size() && m_item[at] == '-') {
                if (at + 1 == m_item.size())
                    return fail(at, util::format("the range '{}' has no end", m_item));
                auto high = value(at + 1);
                if (!high)
                    return std::unexpected(high.error());
                last = high->first;
                if (&m_spec == &k_weekday && last == 0 && first > 0)
                    last = 7; // fri-sun
                if (first > last)
                    return fail(0, util::format("the range '{}' goes backwards", m_item));
                at = high->second;
            } else if (at < m_item.size() && m_item[at] == '/') {
                last = m_spec.high;
            }
        }
        int step = 1;
        if (at < m_item.size() && m_item[at] == '/') {
            const size_t digits = at + 1;
            size_t end = digits;
            while (end < m_item.size() && m_item[end] >= '0' && m_item[end] <= '9')
                ++end;
            if (end == digits)
                return fail(at, util::format("'{}' needs a number of steps after '/'", m_item));
            const auto [ptr, ec] =
                std::from_chars(m_item.data() + digits, m_item.data() + end, step);
            if (ec != std::errc() || step > 9999)
                return fail(digits, util::format("the step in '{}' is too large", m_item));
            if (step == 0)
                return fail(digits, util::format("the step in '{}' must be at least 1", m_item));
            at = end;
        }
        if (at != m_item.size())
            return unexpected_at(at);
        for (int v = first; v <= last; v += step)
            bits.set(&m_spec == &k_weekday && v == 7 ? 0 : static_cast<size_t>(v));
        return {};
    }

    const FieldSpec& m_spec;
    Word m_word;
    std::string_view m_item;
    size_t m_item_offset = 0;
};

template <size_t N>
std::expected<std::bitset<N>, LineError> read_field(const FieldSpec& spec, Word word) {
    auto bits = FieldReader(spec, word).read();
    if (!bits)
        return std::unexpected(bits.error());
    std::bitset<N> out;
    for (size_t i = 0; i < N; ++i)
        out[i] = (*bits)[i];
    return out;
}

// Whether any of the months has any of the days (February has 29).
bool some_day_exists(const Schedule& s) {
    constexpr std::array<unsigned, 13> k_longest = {0,  31, 29, 31, 30, 31, 30,
                                                    31, 31, 30, 31, 30, 31};
    for (unsigned m = 1; m <= 12; ++m)
        for (unsigned d = 1; s.months[m] && d <= k_longest[m]; ++d)
            if (s.days[d])
                return true;
    return false;
}

std::expected<Schedule, LineError> read_fields(std::span<const Word> fields) {
    Schedule s;
    const bool with_seconds = fields.size() == 6;
    const size_t first = with_seconds ? 1 : 0;
    auto check = [](auto result, auto& target) -> std::optional<LineError> {
        if (!result)
            return result.error();
        target = *result;
        return std::nullopt;
    };
    std::optional<LineError> error;
    if (with_seconds)
        error = check(read_field<60>(k_second, fields[0]), s.seconds);
    else
        s.seconds.set(0);
    if (!error)
        error = check(read_field<60>(k_minute, fields[first]), s.minutes);
    if (!error)
        error = check(read_field<24>(k_hour, fields[first + 1]), s.hours);
    if (!error)
        error = check(read_field<32>(k_day, fields[first + 2]), s.days);
    if (!error)
        error = check(read_field<13>(k_month, fields[first + 3]), s.months);
    if (!error)
        error = check(read_field<7>(k_weekday, fields[first + 4]), s.weekdays);
    if (error)
        return std::unexpected(*error);
    const bool day_star = fields[first + 2].text.starts_with('*');
    const bool weekday_star = fields[first + 4].text.starts_with('*');
    s.days_or_weekdays = !day_star && !weekday_star;
    s.fixed_time = !fields[first].text.starts_with('*') && !fields[first + 1].text.starts_with('*');
    if (!s.days_or_weekdays && !some_day_exists(s))
        return std::unexpected(LineError{
            fields[first + 2].offset, "day-of-month: never fires: no month given has these days"});
    return s;
}

std::expected<ParsedSchedule, LineError> parse_at_form(std::string_view line) {
    const auto words = first_words(line, 2);
    std::string keyword(words[0].text);
    for (char& c : keyword)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto command_after = [&](const Word& word,
                             ParsedSchedule parsed) -> std::expected<ParsedSchedule, LineError> {
        parsed.command_start = util::skip_blanks(line, word.offset + word.text.size());
        if (parsed.command_start == line.size())
            return std::unexpected(LineError{line.size(), "no command after the schedule"});
        return parsed;
    };
    if (keyword == "@every") {
        if (words.size() < 2)
            return std::unexpected(
                LineError{line.size(), "@every needs a DURATION, then the command"});
        auto every = util::parse_duration(words[1].text);
        if (!every)
            return std::unexpected(LineError{words[1].offset, "@every: " + every.error().message});
        if (every->count() % 1000 != 0 || every->count() == 0)
            return std::unexpected(
                LineError{words[1].offset,
                          util::format("@every: {} is not a whole number of seconds (at least 1s)",
                                       words[1].text)});
        ParsedSchedule parsed;
        parsed.schedule.every = std::chrono::duration_cast<std::chrono::seconds>(*every);
        parsed.text = util::format("@every {}", words[1].text);
        return command_after(words[1], std::move(parsed));
    }
    if (keyword == "@reboot")
        return std::unexpected(
            LineError{0, "@reboot is not supported: a fleet has no reboot of its own (run "
                         "such a command from each host's boot, a systemd unit)"});
    constexpr std::array<std::pair<std::string_view, std::string_view>, 7> k_shorthands = {{
        {"@yearly", "0 0 1 1 *"},
        {"@annually", "0 0 1 1 *"},
        {"@monthly", "0 0 1 * *"},
        {"@weekly", "0 0 * * 0"},
        {"@daily", "0 0 * * *"},
        {"@midnight", "0 0 * * *"},
        {"@hourly", "0 * * * *"},
    }};
    for (const auto& [name, fields] : k_shorthands) {
        if (keyword != name)
            continue;
        auto expanded = parse_schedule(util::format("{} true", fields));
        ParsedSchedule parsed{expanded->schedule, std::string(name), 0};
        return command_after(words[0], std::move(parsed));
    }
    return std::unexpected(LineError{
        0, util::format("unknown schedule '{}' (@yearly, @annually, @monthly, @weekly, @daily, "
                        "@midnight, @hourly or @every DURATION)",
                        words[0].text)});
}

} // namespace

std::expected<ParsedSchedule, LineError> parse_schedule(std::string_view line) {
    if (line.starts_with('@'))
        return parse_at_form(line);
    // As many leading words as look like time fields (at most 7) are the schedule.
    auto words = first_words(line, 7);
    size_t count = 0;
    while (count < words.size() && looks_like_field(words[count].text))
        ++count;
    if (count < 5) {
        const size_t at = count < words.size() ? words[count].offset : line.size();
        std::string found = count < words.size()
                                ? util::format("'{}' is not a time field", words[count].text)
                                : util::format("the line ends after {} of them", count);
        return std::unexpected(LineError{
            at, util::format("expected 5 time fields (or 6, seconds first) before the command; {}",
                             found)});
    }
    if (count == 7) {
        // supercronic's seven fields: seconds first, and a year last, which only '*' fills.
        if (words[6].text != "*")
            return std::unexpected(LineError{
                words[6].offset, util::format("year: only '*' is supported, not '{}' (a 7th time "
                                              "field, as supercronic writes)",
                                              words[6].text)});
    }
    auto schedule = read_fields(std::span(words).first(std::min<size_t>(count, 6)));
    if (!schedule)
        return std::unexpected(schedule.error());
    const Word& last = words[count - 1];
    ParsedSchedule parsed;
    parsed.schedule = *schedule;
    for (size_t i = 0; i < count; ++i)
        parsed.text += (i == 0 ? "" : " ") + std::string(words[i].text);
    parsed.command_start = util::skip_blanks(line, last.offset + last.text.size());
    if (parsed.command_start == line.size())
        return std::unexpected(LineError{line.size(), "no command after the time fields"});
    return parsed;
}

bool matches_day(const Schedule& s, std::chrono::year_month_day day) {
    if (!s.months[static_cast<unsigned>(day.month())])
        return false;
    const bool by_day = s.days[static_cast<unsigned>(day.day())];
    const bool by_weekday =
        s.weekdays[std::chrono::weekday(std::chrono::sys_days(day)).c_encoding()];
    return s.days_or_weekdays ? by_day || by_weekday : by_day && by_weekday;
}

} // namespace redlock::cron
