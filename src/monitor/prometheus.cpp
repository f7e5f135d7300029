#include "monitor/prometheus.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "util/format.hpp"
#include "util/text.hpp"

namespace redlock::monitor {

namespace {

// The families, in the order they are written. Units are base units (seconds), times are
// Unix time in seconds, counters end in _total: the Prometheus naming rules, which
// `promtool check metrics` enforces.
constexpr std::string_view k_running = "redlock_running";
constexpr std::string_view k_running_since = "redlock_running_since_timestamp_seconds";
constexpr std::string_view k_start = "redlock_last_run_start_timestamp_seconds";
constexpr std::string_view k_end = "redlock_last_run_end_timestamp_seconds";
constexpr std::string_view k_duration = "redlock_last_run_duration_seconds";
constexpr std::string_view k_wait = "redlock_last_run_wait_seconds";
constexpr std::string_view k_held = "redlock_last_run_held_seconds";
constexpr std::string_view k_exit = "redlock_last_run_exit_status";
constexpr std::string_view k_outcome = "redlock_last_run_outcome";
constexpr std::string_view k_runs = "redlock_runs_total";
// Not a sample: a comment line per run of a name that is running PROGRAM, so that the
// running gauge counts live runs (a redlock killed with SIGKILL is dropped once seen gone).
constexpr std::string_view k_running_comment = "# redlock-running ";

std::string seconds(double value) {
    return util::format("{:.3f}", value);
}

// Rounded to the nearest integer by hand: std::llround would make libm a library every run
// loads (bench/instructions.sh: +8% of a run's instructions, its symbol lookups mostly).
long long nearest(double value) {
    return static_cast<long long>(value < 0 ? value - 0.5 : value + 0.5);
}

// strtod, not std::from_chars: libstdc++'s from_chars for double calls fesetround, which
// would make libm a library every run loads, asked for metrics or not. redlock never sets
// a locale, so the decimal point is '.'.
std::optional<double> parse_double(std::string_view text) {
    if (text.empty() || text.size() > 64)
        return std::nullopt;
    const std::string copy(text);
    char* end = nullptr;
    const double value = std::strtod(copy.c_str(), &end);
    if (end != copy.c_str() + copy.size() || !std::isfinite(value))
        return std::nullopt;
    return value;
}

// `name="value",outcome="value"` (the braces' inside) into pairs; nullopt if malformed.
std::optional<std::map<std::string, std::string>> parse_labels(std::string_view text) {
    std::map<std::string, std::string> labels;
    size_t i = 0;
    while (i < text.size()) {
        const size_t eq = text.find('=', i);
        if (eq == std::string_view::npos || eq + 1 >= text.size() || text[eq + 1] != '"')
            return std::nullopt;
        const std::string key(text.substr(i, eq - i));
        size_t j = eq + 2;
        while (j < text.size() && text[j] != '"')
            j += text[j] == '\\' ? 2 : 1;
        if (j >= text.size())
            return std::nullopt;
        auto value = unescape_label_value(text.substr(eq + 2, j - eq - 2));
        if (!value)
            return std::nullopt;
        labels[key] = std::move(*value);
        i = j + 1;
        if (i < text.size() && text[i] == ',')
            ++i;
    }
    return labels;
}

// `# redlock-running name="x" pid=1 since=2.5 id=ID ns=INODE`
void parse_running(std::string_view rest, MetricsFile& file) {
    if (!rest.starts_with("name=\""))
        return;
    size_t j = 6;
    while (j < rest.size() && rest[j] != '"')
        j += rest[j] == '\\' ? 2 : 1;
    if (j >= rest.size())
        return;
    auto name = unescape_label_value(rest.substr(6, j - 6));
    if (!name)
        return;
    RunningRun run;
    bool have_pid = false;
    rest.remove_prefix(j + 1);
    while (!rest.empty()) {
        while (rest.starts_with(' '))
            rest.remove_prefix(1);
        const size_t end = std::min(rest.find(' '), rest.size());
        const std::string_view word = rest.substr(0, end);
        rest.remove_prefix(end);
        if (word.starts_with("pid=")) {
            auto v = word.substr(4);
            have_pid = std::from_chars(v.data(), v.data() + v.size(), run.pid).ec == std::errc();
        } else if (word.starts_with("since=")) {
            run.since = parse_double(word.substr(6)).value_or(0);
        } else if (word.starts_with("ns=")) {
            auto v = word.substr(3);
            (void)std::from_chars(v.data(), v.data() + v.size(), run.pid_ns);
        } else if (word.starts_with("id=")) {
            run.identity = word.substr(3);
            if (!util::is_utf8(run.identity)) // carried into every rewrite: the file's
                return;
        }
    }
    if (have_pid && run.pid > 0)
        file[*name].running.push_back(std::move(run));
}

void parse_sample(std::string_view line, MetricsFile& file) {
    const size_t brace = line.find('{');
    const size_t close = line.rfind('}');
    if (brace == std::string_view::npos || close == std::string_view::npos || close < brace)
        return;
    const std::string_view metric = line.substr(0, brace);
    auto labels = parse_labels(line.substr(brace + 1, close - brace - 1));
    std::string_view rest = line.substr(close + 1);
    while (rest.starts_with(' '))
        rest.remove_prefix(1);
    rest = rest.substr(0, std::min(rest.find(' '), rest.size())); // a timestamp would follow
    const auto value = parse_double(rest);
    if (!labels || !value || !labels->contains("name"))
        return;
    const std::string& name = labels->at("name");
    if (metric == k_runs) {
        if (auto o = labels->find("outcome"); o != labels->end() && *value >= 0)
            file[name].runs_total[o->second] = nearest(*value);
        return;
    }
    auto last = [&]() -> LastRun& {
        auto& entry = file[name];
        if (!entry.last)
            entry.last.emplace();
        return *entry.last;
    };
    if (metric == k_start)
        last().start = *value;
    else if (metric == k_end)
        last().end = *value;
    else if (metric == k_wait)
        last().wait = *value;
    else if (metric == k_held)
        last().held = *value;
    else if (metric == k_exit)
        last().exit_status = static_cast<int>(nearest(*value));
    else if (metric == k_outcome && *value == 1 && labels->contains("outcome"))
        last().outcome = labels->at("outcome");
    // The running gauge and the duration are derived, not read.
}

void family(std::string& out, std::string_view metric, std::string_view type,
            std::string_view help) {
    out += util::format("# HELP {} {}\n# TYPE {} {}\n", metric, help, metric, type);
}

std::string name_label(const std::string& name) {
    return util::format("name=\"{}\"", escape_label_value(name));
}

} // namespace

std::string escape_label_value(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    for (char c : value) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

std::optional<std::string> unescape_label_value(std::string_view escaped) {
    std::string out;
    out.reserve(escaped.size());
    for (size_t i = 0; i < escaped.size(); ++i) {
        if (escaped[i] != '\\') {
            if (escaped[i] == '"' || escaped[i] == '\n')
                return std::nullopt;
            out += escaped[i];
            continue;
        }
        if (++i >= escaped.size())
            return std::nullopt;
        switch (escaped[i]) {
        case '\\':
            out += '\\';
            break;
        case '"':
            out += '"';
            break;
        case 'n':
            out += '\n';
            break;
        default:
            return std::nullopt;
        }
    }
    if (!util::is_utf8(out))
        return std::nullopt;
    return out;
}

MetricsFile parse_metrics(std::string_view text) {
    MetricsFile file;
    while (!text.empty()) {
        const size_t end = std::min(text.find('\n'), text.size());
        const std::string_view line = text.substr(0, end);
        text.remove_prefix(std::min(end + 1, text.size()));
        if (line.starts_with(k_running_comment))
            parse_running(line.substr(k_running_comment.size()), file);
        else if (line.starts_with("redlock_"))
            parse_sample(line, file);
    }
    return file;
}

std::string render_metrics(const MetricsFile& file, const std::vector<std::string>& outcomes) {
    std::string out;
    family(out, k_running, "gauge",
           "Runs of the lock running PROGRAM on this host now (0 or 1 for a mutex).");
    for (const auto& [name, m] : file)
        out += util::format("{}{{{}}} {}\n", k_running, name_label(name), m.running.size());
    family(out, k_running_since, "gauge",
           "When the oldest run of the lock running PROGRAM on this host started it, in Unix "
           "time; 0 when none is running.");
    for (const auto& [name, m] : file) {
        double since = 0;
        for (const auto& r : m.running)
            since = since == 0 ? r.since : std::min(since, r.since);
        out += util::format("{}{{{}}} {}\n", k_running_since, name_label(name), seconds(since));
    }
    struct Gauge {
        std::string_view metric;
        std::string_view help;
        double (*value)(const LastRun&);
    };
    const Gauge gauges[] = {
        {k_start, "When the last finished run of the lock started, in Unix time.",
         [](const LastRun& r) { return r.start; }},
        {k_end, "When the last finished run of the lock ended, in Unix time.",
         [](const LastRun& r) { return r.end; }},
        {k_duration, "How long the last finished run of the lock took, waiting included.",
         [](const LastRun& r) { return std::max(0.0, r.end - r.start); }},
        {k_wait, "How long the last finished run waited for the lock.",
         [](const LastRun& r) { return r.wait; }},
        {k_held, "How long the last finished run held the lock (0 when not acquired).",
         [](const LastRun& r) { return r.held; }},
    };
    for (const auto& g : gauges) {
        family(out, g.metric, "gauge", g.help);
        for (const auto& [name, m] : file)
            if (m.last)
                out += util::format("{}{{{}}} {}\n", g.metric, name_label(name),
                                    seconds(g.value(*m.last)));
    }
    family(out, k_exit, "gauge",
           "The exit status of the last finished run of the lock (PROGRAM's, 75 not "
           "acquired, 79 lease lost, 124 --max-hold, ...).");
    for (const auto& [name, m] : file)
        if (m.last)
            out += util::format("{}{{{}}} {}\n", k_exit, name_label(name), m.last->exit_status);
    // Every outcome known, plus any the file had (an outcome of a newer redlock).
    auto words_of = [&](const NameMetrics& m) {
        std::vector<std::string> words = outcomes;
        auto add = [&](const std::string& w) {
            if (!w.empty() && std::find(words.begin(), words.end(), w) == words.end())
                words.push_back(w);
        };
        for (const auto& [word, count] : m.runs_total)
            add(word);
        if (m.last)
            add(m.last->outcome);
        return words;
    };
    family(out, k_outcome, "gauge",
           "1 for how the last finished run of the lock ended, 0 for the other outcomes.");
    for (const auto& [name, m] : file)
        if (m.last)
            for (const auto& word : words_of(m))
                out += util::format("{}{{{},outcome=\"{}\"}} {}\n", k_outcome, name_label(name),
                                    escape_label_value(word), word == m.last->outcome ? 1 : 0);
    family(out, k_runs, "counter", "Runs of the lock on this host, by how they ended.");
    for (const auto& [name, m] : file)
        for (const auto& word : words_of(m)) {
            auto it = m.runs_total.find(word);
            out +=
                util::format("{}{{{},outcome=\"{}\"}} {}\n", k_runs, name_label(name),
                             escape_label_value(word), it == m.runs_total.end() ? 0 : it->second);
        }
    for (const auto& [name, m] : file)
        for (const auto& r : m.running)
            out += util::format("{}name=\"{}\" pid={} since={} id={} ns={}\n", k_running_comment,
                                escape_label_value(name), r.pid, seconds(r.since), r.identity,
                                r.pid_ns);
    return out;
}

} // namespace redlock::monitor
