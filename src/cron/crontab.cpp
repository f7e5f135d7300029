#include "cron/crontab.hpp"

#include <map>
#include <set>

#include "util/file.hpp"
#include "util/format.hpp"
#include "util/sha256.hpp"
#include "util/text.hpp"

namespace redlock::cron {

namespace {

std::string_view trim_end(std::string_view text) {
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
        text.remove_suffix(1);
    return text;
}

struct Assignment {
    std::string name;
    std::string value;
    size_t value_at = 0;
};

// KEY=value as cron reads it: the name and the value each optionally in quotes, blanks
// around '=', an unquoted value's trailing blanks dropped. nullopt when the line is not
// one (then it is a job line); an error when it plainly is one, badly written.
std::optional<std::expected<Assignment, LineError>> read_assignment(std::string_view line) {
    size_t i = 0;
    Assignment out;
    if (line[0] == '"' || line[0] == '\'') {
        const size_t close = line.find(line[0], 1);
        if (close == std::string_view::npos)
            return std::nullopt;
        out.name = line.substr(1, close - 1);
        i = close + 1;
    } else {
        while (i < line.size() && line[i] != '=' && line[i] != ' ' && line[i] != '\t')
            ++i;
        out.name = line.substr(0, i);
    }
    i = util::skip_blanks(line, i);
    if (i == line.size() || line[i] != '=' || out.name.empty() ||
        out.name.find('=') != std::string::npos)
        return std::nullopt;
    out.value_at = i = util::skip_blanks(line, i + 1);
    auto fail = [](size_t at, std::string message) {
        return std::unexpected(LineError{at, std::move(message)});
    };
    bool valid_name = !(out.name[0] >= '0' && out.name[0] <= '9');
    for (char c : out.name)
        valid_name &=
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!valid_name)
        return fail(0, util::format("invalid variable name '{}' (letters, digits and '_', not "
                                    "starting with a digit)",
                                    out.name));
    if (i < line.size() && (line[i] == '"' || line[i] == '\'')) {
        const size_t close = line.find(line[i], i + 1);
        if (close == std::string_view::npos)
            return fail(i, util::format("{}: the quote is not closed", out.name));
        if (const size_t after = util::skip_blanks(line, close + 1); after != line.size())
            return fail(after,
                        util::format("{}: unexpected text after the closing quote", out.name));
        out.value = line.substr(i + 1, close - i - 1);
    } else {
        out.value = trim_end(line.substr(i));
    }
    return out;
}

// Columns count characters, as the config's errors do.
size_t column_of(std::string_view line, size_t offset) {
    size_t column = 1;
    for (size_t i = 0; i < offset && i < line.size(); ++column) {
        const size_t length = util::utf8_sequence_length(line, i);
        i += length == 0 ? 1 : length;
    }
    return column + (offset > line.size() ? offset - line.size() : 0);
}

class Reader {
  public:
    explicit Reader(std::string_view source) : m_source(source) {}

    util::Expected<Crontab> read(std::string_view text) {
        size_t number = 0;
        for (size_t start = 0; start < text.size();) {
            size_t end = text.find('\n', start);
            if (end == std::string_view::npos)
                end = text.size();
            std::string_view line = text.substr(start, end - start);
            if (line.ends_with('\r'))
                line.remove_suffix(1);
            if (auto ok = read_line(line, ++number); !ok)
                return std::unexpected(ok.error());
            start = end + 1;
        }
        if (m_pending)
            return settings_misplaced();
        return std::move(m_crontab);
    }

  private:
    util::Expected<void> read_line(std::string_view raw, size_t number) {
        m_raw = raw;
        m_number = number;
        m_indent = util::skip_blanks(raw, 0);
        const std::string_view line = raw.substr(m_indent);
        if (!line.empty() && is_settings_line(line)) {
            if (!m_pending)
                m_pending = Pending{number, std::string(raw), {}, {}};
            if (auto ok = read_settings(line, m_pending->settings, m_pending->seen); !ok)
                return fail(ok.error());
            return {};
        }
        if (line.empty() || line.starts_with('#')) {
            if (m_pending)
                return settings_misplaced();
            return {};
        }
        if (auto assignment = read_assignment(line)) {
            if (m_pending)
                return settings_misplaced();
            if (!*assignment)
                return fail(assignment->error());
            return assign(**assignment);
        }
        return add_job(line);
    }

    util::Expected<void> assign(const Assignment& a) {
        if (a.name == "CRON_TZ" || a.name == "TZ") {
            auto& zone = a.name == "CRON_TZ" ? m_cron_tz : m_tz;
            zone.reset();
            if (!a.value.empty()) {
                auto loaded = Zone::load(a.value);
                if (!loaded)
                    return fail({a.value_at, loaded.error().message});
                zone = std::move(*loaded);
            }
            if (a.name == "CRON_TZ")
                return {};
        } else if (a.name == "MAILTO") {
            if (!a.value.empty())
                m_crontab.warnings.push_back(
                    {m_number, "MAILTO is ignored: redlock mails nothing; a job's output goes "
                               "to the daemon's stdout and stderr"});
            return {};
        } else if (a.name == "SHELL") {
            m_shell = a.value.empty() ? "/bin/sh" : a.value;
        }
        auto same_name = [&](const auto& entry) { return entry.first == a.name; };
        if (auto it = std::ranges::find_if(m_environment, same_name); it != m_environment.end())
            it->second = a.value;
        else
            m_environment.emplace_back(a.name, a.value);
        return {};
    }

    util::Expected<void> add_job(std::string_view line) {
        auto parsed = parse_schedule(line);
        if (!parsed)
            return fail(parsed.error());
        Job job;
        job.line = m_number;
        job.schedule_text = std::move(parsed->text);
        job.schedule = parsed->schedule;
        job.zone = m_cron_tz ? *m_cron_tz : m_tz ? *m_tz : Zone();
        job.zone_set = m_cron_tz || m_tz;
        job.command = trim_end(line.substr(parsed->command_start));
        job.shell = m_shell;
        job.environment = m_environment;
        if (m_pending) {
            job.settings = std::move(m_pending->settings);
            m_pending.reset();
        }
        job.named = job.settings.name.has_value();
        job.identity = job.named
                           ? *job.settings.name
                           : derived_identity(job.schedule_text,
                                              job.schedule.every.count() > 0 ? "" : job.zone.name(),
                                              job.command);
        auto [it, added] = m_identities.emplace(job.identity, job.line);
        if (!added)
            return fail(
                {0, util::format("job '{}' is already on line {}{}", job.identity, it->second,
                                 job.named ? ""
                                           : " (the same schedule, zone and command; "
                                             "give one a name= setting)")});
        m_crontab.jobs.push_back(std::move(job));
        return {};
    }

    // `error.offset` is into the line without its leading blanks.
    std::unexpected<util::Error> fail(const LineError& error) const {
        return fail_at(m_number, m_raw, m_indent + error.offset, error.message);
    }
    std::unexpected<util::Error> fail_at(size_t number, std::string_view raw, size_t offset,
                                         std::string_view message) const {
        return util::fail(util::ErrorKind::config, util::format("{}:{}:{}: {}", m_source, number,
                                                                column_of(raw, offset), message));
    }
    std::unexpected<util::Error> settings_misplaced() const {
        return fail_at(m_pending->line, m_pending->raw, util::skip_blanks(m_pending->raw, 0),
                       "a '# redlock:' settings line must come right before its job's line");
    }

    std::string_view m_source;
    Crontab m_crontab;
    // The line being read.
    std::string_view m_raw;
    size_t m_number = 0;
    size_t m_indent = 0;
    // What the lines read so far set for the jobs after them.
    std::vector<std::pair<std::string, std::string>> m_environment;
    std::string m_shell = "/bin/sh";
    std::optional<Zone> m_cron_tz;
    std::optional<Zone> m_tz;
    // Settings lines waiting for their job line.
    struct Pending {
        size_t line;
        std::string raw;
        Settings settings;
        std::set<std::string> seen;
    };
    std::optional<Pending> m_pending;
    std::map<std::string, size_t> m_identities; // each job's line
};

} // namespace

std::string derived_identity(std::string_view schedule_text, std::string_view zone_name,
                             std::string_view command) {
    std::string_view program = command.substr(0, command.find_first_of(" \t"));
    program = program.substr(program.rfind('/') + 1);
    std::string prefix;
    for (char c : program)
        if (((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-') &&
            prefix.size() < 40)
            prefix += c;
    if (prefix.empty())
        prefix = "job";
    const std::string hash =
        util::sha256_hex(util::format("{}\n{}\n{}", schedule_text, zone_name, command));
    return prefix + "-" + hash.substr(0, 8);
}

util::Expected<Crontab> parse_crontab(std::string_view text, std::string_view source) {
    return Reader(source).read(text);
}

util::Expected<Crontab> read_crontab(const std::string& path) {
    int error = 0;
    constexpr size_t k_max_crontab = size_t{4} << 20;
    auto content = util::read_file(path.c_str(), k_max_crontab, error);
    if (!content)
        return util::fail(
            util::ErrorKind::config,
            util::format("cannot read crontab '{}': {}", path, util::read_error_text(error)));
    return parse_crontab(content->text, path);
}

} // namespace redlock::cron
