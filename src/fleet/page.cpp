#include "fleet/page.hpp"

#include <array>

#include "fleet/metrics.hpp"
#include "http/server.hpp"
#include "util/duration.hpp"
#include "util/format.hpp"
#include "util/json.hpp"
#include "util/text.hpp"

namespace redlock::fleet {

namespace {

constexpr std::array<std::string_view, 8> k_columns = {"Name",         "State",          "Holder",
                                                       "Held for",     "Waiting",        "Last run",
                                                       "Last success", "Slot / schedule"};

std::string iso(long long ms) {
    return util::format_utc_timestamp(util::UtcMillis(std::chrono::milliseconds(ms)));
}

// "45s", "12m 5s", "3h 20m", "2d 4h": short enough for a table cell.
std::string short_duration(long long ms) {
    const long long s = std::max<long long>(ms, 0) / 1000;
    if (s < 60)
        return util::format("{}s", s);
    if (s < 3600)
        return util::format("{}m {}s", s / 60, s % 60);
    if (s < 86400)
        return util::format("{}h {}m", s / 3600, s % 3600 / 60);
    return util::format("{}d {}h", s / 86400, s % 86400 / 3600);
}

// What the page and the API say of one lock.
struct Summary {
    std::string name;
    const LockRecord* record = nullptr;
    std::optional<long long> held_ms;
    std::optional<long long> slot_ms;
    bool overdue = false;
    std::string row_class;
    std::array<std::string, k_columns.size()> cells;
};

Summary summarize(const std::string& name, const LockRecord& r, util::UtcMillis now) {
    Summary s;
    s.name = name;
    s.record = &r;
    const long long now_ms = now.time_since_epoch().count();
    const auto& v = r.view;
    s.held_ms = held_ms(r, now);
    s.slot_ms = slot_of(r);
    s.overdue = overdue(s.slot_ms, r.counters.last_success_ms, now);
    s.row_class = std::string(lock::state_name(v.state)) + (s.overdue ? " overdue" : "");

    auto& c = s.cells;
    c[0] = util::printable(name);
    c[1] = lock::state_name(v.state);
    if (v.limit > 0)
        c[2] = util::format("{} of {} permits", v.permits_held, v.limit);
    else if (v.holder)
        c[2] = util::printable(util::format("{}@{}:{} {}", v.holder->user, v.holder->host,
                                            v.holder->pid, v.holder->command));
    else
        c[2] = v.state == lock::LockState::held ? "unknown" : "-";
    c[3] = s.held_ms ? short_duration(*s.held_ms) : "-";
    c[4] = r.queue > 0 ? util::format("{} fair", r.queue) : std::to_string(r.waiters);
    if (r.latest) {
        const auto& e = *r.latest;
        // When it ended, if the entry tells (a time past belief is not shown; each of the
        // three is at most the year 9999, so the sum does not overflow).
        const auto ended = e.started_ms
                               ? util::plausible_ms(*e.started_ms + e.waited_ms.value_or(0) +
                                                    e.held_ms.value_or(0))
                               : std::nullopt;
        const std::string at = ended ? " at " + iso(*ended).substr(0, 19) + "Z" : std::string();
        c[5] = util::printable(
            util::format("{}{} on {}{}", e.outcome,
                         e.exit_status ? util::format(" (exit {})", *e.exit_status) : std::string(),
                         e.host, at));
    } else if (r.counters.last_run_ms) {
        c[5] = "ended at " + iso(*r.counters.last_run_ms).substr(0, 19) + "Z";
    } else {
        c[5] = "-";
    }
    if (r.counters.last_success_ms)
        c[6] = util::format("{} ago", short_duration(now_ms - *r.counters.last_success_ms));
    else
        c[6] = r.counters.empty() ? "-" : "never";
    c[7] = s.slot_ms ? util::format_duration(std::chrono::milliseconds(*s.slot_ms)) +
                           (s.overdue ? " overdue" : "")
                     : "-";
    if (const auto& cron = v.cron) // a `redlock cron` job: its schedule, and when it fires next
        c[7] = util::printable(util::format(
            "{} ({}), next {}", cron->schedule.empty() ? "?" : cron->schedule,
            cron->zone.empty() ? "UTC" : cron->zone,
            cron->next_ms ? iso(*cron->next_ms).substr(0, 19) + "Z" : std::string("never")));
    return s;
}

// The locks shown: every one, or past k_page_locks those worth a look first (held, or
// unknown; overdue; waited for; then those that ran last), in name order either way.
std::vector<Summary> summaries(const Fleet& fleet, util::UtcMillis now) {
    using Item = std::map<std::string, Fleet::Entry>::value_type;
    struct Ranked {
        int group;          // 0 held or unknown, 1 overdue, 2 waited for, 3 the rest
        long long last_run; // the later, the sooner
        const Item* item;
    };
    std::vector<Ranked> ranked;
    ranked.reserve(fleet.locks().size());
    for (const auto& item : fleet.locks()) {
        const auto& r = item.second.record;
        const long long last_run = std::max(r.counters.last_run_ms.value_or(0),
                                            r.latest ? r.latest->started_ms.value_or(0) : 0);
        const int group = r.view.state != lock::LockState::free                  ? 0
                          : overdue(slot_of(r), r.counters.last_success_ms, now) ? 1
                          : r.waiters > 0 || r.queue > 0                         ? 2
                                                                                 : 3;
        ranked.push_back({group, last_run, &item});
    }
    if (ranked.size() > k_page_locks) {
        const auto last = ranked.begin() + static_cast<std::ptrdiff_t>(k_page_locks);
        std::ranges::nth_element(ranked, last, [](const Ranked& a, const Ranked& b) {
            return a.group != b.group ? a.group < b.group : a.last_run > b.last_run;
        });
        ranked.erase(last, ranked.end());
        std::ranges::sort(ranked, {},
                          [](const Ranked& r) -> const std::string& { return r.item->first; });
    }
    std::vector<Summary> out;
    out.reserve(ranked.size());
    for (const auto& r : ranked)
        out.push_back(summarize(r.item->first, r.item->second.record, now));
    return out;
}

// "3 locks", or "100000 locks (the 1000 worth a look first shown: ...)".
std::string count_text(const Fleet& fleet, size_t shown) {
    if (shown == fleet.locks().size())
        return util::format("{} locks", shown);
    return util::format("{} locks ({} shown: the held, overdue and waited for, then those that "
                        "ran last)",
                        fleet.locks().size(), shown);
}

std::string servers_text(const Fleet& fleet) {
    size_t up = 0;
    for (const auto& s : fleet.servers())
        up += s.up;
    return util::format("{} of {} servers answered", up, fleet.servers().size());
}

} // namespace

std::string render_page(const Fleet& fleet, util::UtcMillis now) {
    using http::html_escape;
    const auto all = summaries(fleet, now);
    std::string out;
    out.reserve(2048 + all.size() * 512);
    out += "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
           "<title>redlock</title>\n<link rel=\"stylesheet\" href=\"page.css\">\n"
           "<script src=\"page.js\" defer></script>\n</head>\n<body>\n<h1>redlock</h1>\n";
    out += util::format(
        "<p id=\"summary\">{} matching <code>{}</code>; <span "
        "id=\"servers\">{}</span>; read at <time id=\"read-at\">{}</time>.</p>\n",
        count_text(fleet, all.size()), html_escape(util::printable(fleet.pattern())),
        html_escape(servers_text(fleet)), iso(now.time_since_epoch().count()).substr(0, 19) + "Z");
    out += "<ul id=\"server-list\">\n";
    for (const auto& s : fleet.servers())
        out += util::format(
            "<li class=\"{}\">{}: {}</li>\n", s.up ? "up" : "down", html_escape(s.name),
            s.up ? std::string("up") : html_escape(util::printable("down (" + s.error + ")")));
    out += "</ul>\n<table id=\"locks\">\n<thead><tr>";
    for (auto column : k_columns)
        out += util::format("<th>{}</th>", column);
    out += "</tr></thead>\n<tbody>\n";
    for (const auto& s : all) {
        out += util::format("<tr class=\"{}\">", s.row_class);
        for (const auto& cell : s.cells)
            out += "<td>" + html_escape(cell) + "</td>";
        out += "</tr>\n";
    }
    out += "</tbody>\n</table>\n";
    if (all.empty())
        out += "<p id=\"none\">No lock matches.</p>\n";
    out += "<p class=\"note\">Read-only. Live while this page is open (it asks "
           "<a href=\"api/locks\">api/locks</a> every 2 seconds); <a "
           "href=\"metrics\">metrics</a> for Prometheus.</p>\n</body>\n</html>\n";
    return out;
}

std::string render_api(const Fleet& fleet, util::UtcMillis now) {
    const auto all = summaries(fleet, now);
    util::JsonWriter json;
    json.begin_object()
        .field("generated_at", iso(now.time_since_epoch().count()))
        .field("pattern", fleet.pattern())
        .field("summary", servers_text(fleet))
        .field("total", fleet.locks().size());
    json.key("servers").begin_array();
    for (const auto& s : fleet.servers()) {
        json.begin_object().field("server", s.name).field("up", s.up).key("error");
        if (s.up)
            json.null();
        else
            json.value(s.error);
        json.end_object();
    }
    json.end_array();
    json.key("columns").begin_array();
    for (auto column : k_columns)
        json.value(column);
    json.end_array();
    json.key("locks").begin_array();
    for (const auto& s : all) {
        const auto& r = *s.record;
        const auto& v = r.view;
        json.begin_object().field("name", s.name).field("state", lock::state_name(v.state));
        json.key("holder");
        if (v.holder)
            json.begin_object()
                .field("host", v.holder->host)
                .field("pid", v.holder->pid)
                .field("user", v.holder->user)
                .field("command", v.holder->command)
                .field("acquired_at", v.holder->acquired_at)
                .end_object();
        else
            json.null();
        json.key("held_seconds");
        if (s.held_ms)
            json.value(static_cast<double>(*s.held_ms) / 1000.0);
        else
            json.null();
        json.key("ttl_ms");
        if (v.state == lock::LockState::held && v.ttl_ms >= 0)
            json.value(v.ttl_ms);
        else
            json.null();
        json.field("fence", v.fence).field("waiters", r.waiters).field("queue", r.queue);
        json.key("limit");
        if (v.limit > 0)
            json.value(v.limit);
        else
            json.null();
        json.field("permits_held", v.permits_held);
        json.key("last_run");
        if (r.latest) {
            const auto& e = *r.latest;
            json.begin_object()
                .field("outcome", e.outcome)
                .field("host", e.host)
                .field("pid", e.pid)
                .field("user", e.user)
                .field("command", e.command)
                .field("started_at",
                       e.started_ms ? std::optional(iso(*e.started_ms)) : std::nullopt)
                .field("exit_status", e.exit_status)
                .field("held_ms", e.held_ms)
                .end_object();
        } else {
            json.null();
        }
        auto time = [&](std::string_view key, const std::optional<long long>& ms) {
            json.key(key);
            if (ms)
                json.value(iso(*ms));
            else
                json.null();
        };
        time("last_run_at", r.counters.last_run_ms);
        time("last_success_at", r.counters.last_success_ms);
        json.key("slot_seconds");
        if (s.slot_ms)
            json.value(static_cast<double>(*s.slot_ms) / 1000.0);
        else
            json.null();
        json.field("overdue", s.overdue);
        json.key("cron");
        if (const auto& cron = v.cron) {
            json.begin_object()
                .field("schedule", cron->schedule)
                .field("zone", cron->zone)
                .field("slot", iso(cron->slot_ms))
                .field("state", cron->state);
            time("next_fire_at", cron->next_ms);
            json.end_object();
        } else {
            json.null();
        }
        json.key("runs").begin_object();
        for (const auto& [outcome, n] : r.counters.runs)
            json.field(outcome, n);
        json.end_object();
        // The page's row, as the page shows it: what its script puts in place.
        json.key("row").begin_object().field("class", s.row_class).key("cells").begin_array();
        for (const auto& cell : s.cells)
            json.value(cell);
        json.end_array().end_object();
        json.end_object();
    }
    json.end_array().end_object();
    return json.str();
}

std::string_view page_script() {
    return R"js("use strict";
// Keeps the page live: the rows of /api/locks put in place every 2 seconds. Text only
// (textContent), never markup: what the servers say stays text.
(function () {
  function cell(row, text, tag) {
    var td = document.createElement(tag || "td");
    td.textContent = text;
    row.appendChild(td);
  }
  function render(doc) {
    var body = document.createElement("tbody");
    doc.locks.forEach(function (lock) {
      var row = document.createElement("tr");
      row.className = lock.row["class"];
      lock.row.cells.forEach(function (text) { cell(row, text); });
      body.appendChild(row);
    });
    var old = document.querySelector("#locks tbody");
    old.parentNode.replaceChild(body, old);
    var none = document.getElementById("none");
    if (none) none.hidden = doc.locks.length > 0;
    var list = document.createElement("ul");
    list.id = "server-list";
    doc.servers.forEach(function (s) {
      var item = document.createElement("li");
      item.className = s.up ? "up" : "down";
      item.textContent = s.server + ": " + (s.up ? "up" : "down (" + s.error + ")");
      list.appendChild(item);
    });
    var oldList = document.getElementById("server-list");
    oldList.parentNode.replaceChild(list, oldList);
    document.getElementById("servers").textContent = doc.summary;
    document.getElementById("read-at").textContent = doc.generated_at.substring(0, 19) + "Z";
    document.body.classList.remove("stale");
  }
  function tick() {
    fetch("api/locks", { cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(render)
      .catch(function () { document.body.classList.add("stale"); })
      .then(function () { setTimeout(tick, 2000); });
  }
  setTimeout(tick, 2000);
})();
)js";
}

std::string_view page_style() {
    return R"css(body { font: 14px/1.4 system-ui, sans-serif; margin: 1em 2em; color: #222; }
h1 { font-size: 1.3em; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #ddd; vertical-align: top; }
td:nth-child(3) { font-family: monospace; word-break: break-all; }
tr.held td:nth-child(2) { color: #a40; font-weight: bold; }
tr.unknown td:nth-child(2) { color: #a00; }
tr.overdue td:nth-child(8) { color: #fff; background: #c00; font-weight: bold; }
#server-list { list-style: none; padding: 0; }
#server-list li { display: inline-block; margin-right: 1.5em; }
#server-list li.down { color: #c00; font-weight: bold; }
body.stale #read-at::after { content: " (not updated: the exporter did not answer)"; color: #c00; }
.note { color: #666; font-size: 0.9em; }
)css";
}

} // namespace redlock::fleet
