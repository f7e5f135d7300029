// doctor: is each server fit for locking?

#include <cstdio>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "doctor/doctor.hpp"
#include "redis/fanout.hpp"
#include "util/format.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

namespace redlock::cli {

namespace {

// Wraps `text` at 80 columns, continuation lines indented by `indent`.
std::string wrap(std::string_view text, size_t first_width, size_t indent) {
    std::string out;
    size_t width = first_width;
    size_t col = 0;
    while (!text.empty()) {
        auto space = text.find(' ');
        auto word = text.substr(0, space);
        text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
        if (col > 0 && col + 1 + word.size() > width) {
            out += "\n" + std::string(indent, ' ');
            width = 80 - indent;
            col = 0;
        } else if (col > 0) {
            out += ' ';
            ++col;
        }
        out += word;
        col += word.size();
    }
    return out;
}

} // namespace

int doctor_command(const DoctorOptions& options, const config::Config& config) {
    auto conns = redis::connect_all(config.servers);
    auto reports = doctor::examine(conns, config.ttl, config.key_prefix);

    size_t risks = 0, unreachable = 0, refused = 0, notes = 0;
    for (const auto& r : reports) {
        unreachable += !r.reachable && !r.auth_error;
        refused += r.auth_error;
        for (const auto& c : r.checks) {
            risks += c.level == doctor::Level::risk;
            notes += c.level == doctor::Level::note;
        }
    }
    // Each server that could not be checked is said once, on stderr. When none could be,
    // stdout stays empty: nothing there may look like a result.
    const bool none_checked = unreachable + refused == reports.size();

    std::string out;
    if (options.json && !none_checked) {
        util::JsonWriter json;
        json.begin_object()
            .field("ok", risks == 0 && unreachable == 0 && refused == 0)
            .field("risks", risks)
            .field("unreachable", unreachable)
            .field("refused", refused);
        json.key("servers").begin_array();
        for (const auto& r : reports) {
            json.begin_object().field("server", r.server).field("reachable", r.reachable);
            json.field("refused", r.auth_error);
            json.key("error");
            r.reachable ? json.null() : json.value(r.error);
            if (r.reachable) {
                json.field("software", r.software)
                    .field("version", r.version)
                    .field("role", r.role)
                    .field("replicas", r.replicas)
                    .field("latency_ms", r.latency_ms)
                    .field("clock_offset_ms", r.clock_offset_ms)
                    .field("maxmemory", r.maxmemory)
                    .field("maxmemory_policy", r.maxmemory_policy)
                    .field("appendonly", r.appendonly)
                    .field("appendfsync", r.appendfsync)
                    .field("scripts_ok", r.scripts_ok);
            }
            json.key("checks").begin_array();
            for (const auto& c : r.checks)
                json.begin_object()
                    .field("name", c.name)
                    .field("level", doctor::level_name(c.level))
                    .field("message", c.message)
                    .end_object();
            json.end_array().end_object();
        }
        json.end_array().end_object();
        out = json.str();
    } else if (!options.json) {
        for (const auto& r : reports) {
            if (!r.reachable)
                continue;
            // What the server reports (INFO, error texts) is shown through util::printable.
            out += util::format(
                "{}  {} {}, {}, round trip {:.2f}ms\n", r.server,
                r.software.empty() ? "redis" : util::printable(r.software),
                r.version.empty() ? "(version unknown)" : util::printable(r.version),
                r.role.empty() ? "role unknown" : util::printable(r.role), r.latency_ms);
            for (const auto& c : r.checks) {
                const char* level = c.level == doctor::Level::risk   ? "RISK"
                                    : c.level == doctor::Level::note ? "note"
                                                                     : "ok";
                out += util::format("  {:<4}  {:<11}  {}\n", level, c.name,
                                    wrap(util::printable(c.message), 80 - 21, 21));
            }
        }
        // "Fit" covers every server, so it is said only when every one was checked.
        if (risks > 0) {
            // A refused script or command stops locking, and a server too old for a mode
            // that mode; the others let it go wrong.
            bool unsafe = false;
            bool refused_commands = false;
            bool too_old = false;
            for (const auto& r : reports)
                for (const auto& c : r.checks)
                    if (c.level == doctor::Level::risk)
                        (c.name == "scripts" || c.name == "acl" ? refused_commands
                         : c.name == "version"                  ? too_old
                                                                : unsafe) = true;
            std::string why;
            for (auto [said, what] :
                 {std::pair{unsafe, "one lock could be handed to two holders"},
                  {refused_commands, "locking fails where commands are refused"},
                  {too_old, "a mode fails where the server lacks what it needs"}})
                if (said)
                    why += (why.empty() ? "" : "; ") + std::string(what);
            out += util::format("{} risk{} found: {}\n", risks, risks == 1 ? "" : "s", why);
        } else if (unreachable + refused == 0)
            out += util::format("{} fit for locking{}\n",
                                reports.size() == 1
                                    ? std::string("the server is")
                                    : util::format("all {} servers are", reports.size()),
                                notes == 0   ? ""
                                : notes == 1 ? " (see the note)"
                                             : " (see the notes)");
    }
    if (!out.empty() && !print_stdout(out))
        return util::exit_code::internal;
    for (const auto& r : reports)
        if (!r.reachable)
            util::log::error("cannot check {}: {}", r.server, util::printable(r.error));
    if (refused > 0)
        return util::exit_code::auth;
    if (unreachable > 0)
        return util::exit_code::unavailable;
    return risks > 0 ? 1 : 0;
}

} // namespace redlock::cli
