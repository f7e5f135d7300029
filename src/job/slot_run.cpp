#include "job/slot_run.hpp"

#include <charconv>
#include <vector>

#include "job/wire.hpp"
#include "util/format.hpp"

namespace redlock::job {

namespace {

constexpr std::string_view k_magic = "rlslot1";

} // namespace

std::string encode_slot_run(const SlotRun& slot) {
    WireWriter w;
    w.put(k_magic);
    w.put_config(slot.config);
    const RunSpec& r = slot.run;
    w.put(r.name);
    w.put(r.ttl);
    w.put(static_cast<long long>(r.program.size()));
    for (const auto& word : r.program)
        w.put(word);
    w.put(r.max_hold.value_or(Millis(0)));
    w.put(static_cast<long long>(r.limit));
    const CronSlot& c = *r.cron;
    w.put(c.instant_ms);
    w.put(static_cast<long long>(c.previous_ms.size()));
    for (long long f : c.previous_ms)
        w.put(f);
    w.put(c.next_ms);
    w.put(c.schedule);
    w.put(c.zone);
    w.put(static_cast<long long>(c.overlap));
    w.put_flag(c.at_least_once);
    w.put(c.window);
    w.put(c.keep);
    w.put(slot.dir);
    w.put(static_cast<long long>(slot.daemon));
    w.put(static_cast<long long>(slot.verbosity));
    return w.bytes();
}

util::Expected<SlotRun> decode_slot_run(std::string_view bytes) {
    WireReader r(bytes);
    SlotRun slot;
    const bool ours = r.text() == k_magic && r.config(slot.config);
    RunSpec& run = slot.run;
    run.name = r.text();
    run.ttl = r.millis();
    const long long words = r.integer();
    for (long long i = 0; ours && i < words && i < 100000; ++i)
        run.program.push_back(r.text());
    if (auto d = r.millis(); d.count() > 0)
        run.max_hold = d;
    run.limit = static_cast<size_t>(r.integer());
    CronSlot c;
    c.instant_ms = r.integer();
    const long long previous = r.integer();
    for (long long i = 0; ours && i < previous && i < 1000; ++i)
        c.previous_ms.push_back(r.integer());
    c.next_ms = r.integer();
    c.schedule = r.text();
    c.zone = r.text();
    const long long overlap = r.integer();
    c.overlap = static_cast<SlotOverlap>(overlap);
    c.at_least_once = r.flag();
    c.window = r.millis();
    c.keep = r.millis();
    slot.dir = r.text();
    slot.daemon = static_cast<pid_t>(r.integer());
    slot.verbosity = static_cast<int>(r.integer());
    run.cron = std::move(c);
    run.wait.wait = Millis(0);
    if (!ours || !r.ok() || run.program.empty() || run.limit < 1 || overlap < 0 ||
        overlap > static_cast<long long>(SlotOverlap::replace))
        return util::fail(util::ErrorKind::usage,
                          util::format("{} is redlock's own, for its cron daemon's use: its input "
                                       "is not a slot",
                                       k_slot_command));
    return slot;
}

std::string started_line(long long fence) {
    return util::format("started {}\n", fence);
}

std::string ended_line(const SlotEnd& e) {
    return util::format("ended {} {} {} {} {} {}\n", e.outcome, e.status, e.fence, e.held_ms,
                        e.missed, e.by.empty() ? "-" : e.by);
}

std::optional<ReportLine> parse_report_line(std::string_view line) {
    std::vector<std::string> words;
    for (size_t at = 0; at < line.size();) {
        const size_t end = std::min(line.find(' ', at), line.size());
        words.emplace_back(line.substr(at, end - at));
        at = end + 1;
    }
    auto number = [](const std::string& word) -> std::optional<long long> {
        long long v = 0;
        auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
        if (ec != std::errc() || end != word.data() + word.size())
            return std::nullopt;
        return v;
    };
    ReportLine out;
    if (words.size() == 2 && words[0] == "started") {
        out.started = number(words[1]);
        return out.started ? std::optional(out) : std::nullopt;
    }
    if (words.size() == 2 && words[0] == "clock") {
        out.clock = number(words[1]);
        return out.clock ? std::optional(out) : std::nullopt;
    }
    if (words.size() != 7 || words[0] != "ended")
        return std::nullopt;
    const auto status = number(words[2]), fence = number(words[3]), held = number(words[4]),
               missed = number(words[5]);
    if (!status || !fence || !held || !missed || *missed < 0)
        return std::nullopt;
    out.ended = SlotEnd{words[1], static_cast<int>(*status),    *fence,
                        *held,    static_cast<size_t>(*missed), words[6] == "-" ? "" : words[6]};
    return out;
}

} // namespace redlock::job
