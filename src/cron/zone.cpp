#include "cron/zone.hpp"

#include <cstdlib>
#include <ctime>
#include <map>
#include <vector>

#include "util/file.hpp"
#include "util/format.hpp"

namespace redlock::cron {

namespace {

using namespace std::chrono;

// glibc learns its zone from $TZ only: set while a year is learnt, then put back, and
// glibc's own zone with it (a file read each way, once per zone and year), so that
// anything else that asks glibc for local time gets the process's zone.
class TzScope {
  public:
    explicit TzScope(const std::string& spec) {
        if (const char* old = std::getenv("TZ"))
            m_old = old;
        ::setenv("TZ", spec.c_str(), 1);
        ::tzset();
    }
    ~TzScope() {
        if (m_old)
            ::setenv("TZ", m_old->c_str(), 1);
        else
            ::unsetenv("TZ");
        ::tzset();
    }
    TzScope(const TzScope&) = delete;
    TzScope& operator=(const TzScope&) = delete;

  private:
    std::optional<std::string> m_old;
};

seconds glibc_offset(Instant t) {
    const time_t when = t.time_since_epoch().count();
    struct tm out {};
    if (::localtime_r(&when, &out) == nullptr)
        return 0s;
    return seconds(out.tm_gmtoff);
}

// How far apart the offset is looked at when a year is learnt: two changes closer than
// this that cancel out would go unseen (the tz database has none in this century), and a
// year costs about 1,500 lookups (0.2 ms; 0.5 ms past 2037, where glibc computes the rule).
constexpr seconds k_probe = hours(6);

int utc_year(Instant t) {
    return static_cast<int>(year_month_day{floor<days>(t)}.year());
}

Instant year_start(int year) {
    return Instant{sys_days{std::chrono::year{year} / January / 1}};
}

struct Change {
    Instant at;
    seconds offset; // from `at` on
};

} // namespace

struct Zone::Data {
    std::string name;
    std::string spec; // $TZ for glibc: ":Europe/Berlin"
    // Per UTC year, learnt once: the offset at its first second and the changes after it,
    // up to and including the first second of the next year.
    struct Year {
        seconds start_offset{0};
        std::vector<Change> changes;
    };
    std::map<int, Year> years;

    const Year& year(int y) {
        auto it = years.find(y);
        if (it == years.end())
            it = years.emplace(y, learn(y)).first;
        return it->second;
    }

    Year learn(int y) const {
        const TzScope scope(spec);
        const Instant end = year_start(y + 1);
        Year out;
        Instant known = year_start(y);
        seconds known_offset = out.start_offset = glibc_offset(known);
        while (known < end) {
            const Instant probe = std::min(known + k_probe, end);
            const seconds offset = glibc_offset(probe);
            if (offset == known_offset) {
                known = probe;
                continue;
            }
            // The change is in (known, probe]: halve to the second.
            Instant low = known, high = probe;
            while (high - low > 1s) {
                const Instant mid = low + (high - low) / 2;
                (glibc_offset(mid) == known_offset ? low : high) = mid;
            }
            known_offset = glibc_offset(high);
            out.changes.push_back({high, known_offset});
            known = high;
        }
        return out;
    }

    seconds offset_at(Instant t) {
        const Year& y = year(utc_year(t));
        seconds offset = y.start_offset;
        for (const Change& change : y.changes) {
            if (change.at > t)
                break;
            offset = change.offset;
        }
        return offset;
    }

    // The changes in (from, until], in order.
    std::vector<Change> changes_between(Instant from, Instant until) {
        std::vector<Change> out;
        for (int y = utc_year(from); from < until && y <= utc_year(until); ++y)
            for (const Change& change : year(y).changes)
                if (change.at > from && change.at <= until)
                    out.push_back(change);
        return out;
    }
};

Zone::Zone() = default;

util::Expected<Zone> Zone::load(std::string_view text) {
    std::string name(text.starts_with(':') ? text.substr(1) : text);
    auto refuse = [&](std::string_view why) {
        return util::fail(util::ErrorKind::config, util::format("time zone '{}' {}", name, why));
    };
    bool plain = !name.empty() && name.front() != '/' && name.size() <= 255;
    for (char c : name)
        plain &= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '/' || c == '_' || c == '-' || c == '+' || c == '.';
    if (!plain || name.find("..") != std::string::npos)
        return refuse("is not a name of the tz database (e.g. Europe/Berlin, UTC)");
    if (name == "localtime")
        return refuse("is this host's own zone, which other hosts may not share: name it "
                      "(e.g. Europe/Berlin)");
    if (name.starts_with("right/"))
        return refuse(util::format("counts leap seconds, which civil time does not: use '{}'",
                                   name.substr(6)));
    const char* tzdir = std::getenv("TZDIR");
    const std::string dir = tzdir != nullptr && *tzdir != '\0' ? tzdir : "/usr/share/zoneinfo";
    int error = 0;
    constexpr size_t k_max_zone_file = size_t{1} << 20;
    auto file = util::read_file((dir + "/" + name).c_str(), k_max_zone_file, error);
    if (!file || !file->text.starts_with("TZif"))
        return refuse(util::format("is unknown (no zone file of that name in {})", dir));
    if (name == "UTC")
        return Zone();
    auto data = std::make_shared<Data>();
    data->spec = ":" + name;
    data->name = std::move(name);
    return Zone(std::move(data));
}

const std::string& Zone::name() const {
    static const std::string k_utc = "UTC";
    return m_data ? m_data->name : k_utc;
}

seconds Zone::offset_at(Instant t) const {
    return m_data ? m_data->offset_at(t) : 0s;
}

std::optional<Instant> Zone::next_change(Instant from, Instant until) const {
    if (!m_data)
        return std::nullopt;
    // Year by year, so that a change near `from` is found without learning up to `until`.
    for (int y = utc_year(from); from < until && y <= utc_year(until); ++y)
        for (const Change& change : m_data->year(y).changes)
            if (change.at > from && change.at <= until)
                return change.at;
    return std::nullopt;
}

LocalInstants Zone::resolve(LocalTime local) const {
    const Instant as_utc{local.time_since_epoch()};
    if (!m_data)
        return {LocalInstants::Kind::unique, as_utc, as_utc};
    // Every instant that can show `local` is within a day of it (offsets are under 24h):
    // walk the stretches of constant offset in that window.
    const Instant window_start = as_utc - days(1), window_end = as_utc + days(1);
    Instant stretch_start = window_start;
    seconds offset = m_data->offset_at(window_start);
    std::vector<Instant> found;
    std::optional<Instant> jumped_at;
    auto look_in_stretch = [&](Instant stretch_end) {
        const Instant candidate = as_utc - offset;
        if (candidate >= stretch_start && candidate < stretch_end)
            found.push_back(candidate);
    };
    for (const Change& change : m_data->changes_between(window_start, window_end)) {
        look_in_stretch(change.at);
        // Clocks moved forward over `local`: local times [at + before, at + after) skipped.
        if (change.offset > offset && as_utc >= change.at + offset &&
            as_utc < change.at + change.offset)
            jumped_at = change.at;
        stretch_start = change.at;
        offset = change.offset;
    }
    look_in_stretch(window_end + 1s);
    if (found.size() >= 2)
        return {LocalInstants::Kind::repeated, found.front(), found.back()};
    if (found.size() == 1)
        return {LocalInstants::Kind::unique, found.front(), found.front()};
    const Instant at = jumped_at.value_or(as_utc - m_data->offset_at(as_utc));
    return {LocalInstants::Kind::skipped, at, at};
}

} // namespace redlock::cron
