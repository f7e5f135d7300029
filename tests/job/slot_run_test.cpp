// What the cron daemon hands the run of a slot, and what that run tells it back.
#include <string>

#include <doctest/doctest.h>

#include "job/slot_run.hpp"

using redlock::job::CronSlot;
using redlock::job::SlotRun;

TEST_CASE("a slot's run is handed over whole, passwords and all, and read back the same") {
    SlotRun slot;
    slot.config.key_prefix = "jobs:";
    slot.config.history = 50;
    redlock::config::ServerConfig server;
    server.url.host = "redis.example.com";
    server.url.port = 6380;
    server.url.password = "s3cret";
    slot.config.servers.push_back(server);
    slot.run.name = "backup";
    slot.run.ttl = std::chrono::milliseconds(45000);
    slot.run.program = {"/bin/sh", "-c", "backup --all"};
    slot.run.max_hold = std::chrono::hours(2);
    slot.run.limit = 3;
    CronSlot c;
    c.instant_ms = 1774746000000;
    c.previous_ms = {1774659600000, 1774573200000};
    c.next_ms = 1774832400000;
    c.schedule = "30 2 * * *";
    c.zone = "Europe/Berlin";
    c.overlap = redlock::job::SlotOverlap::queue;
    c.at_least_once = true;
    c.window = std::chrono::hours(6);
    c.keep = std::chrono::hours(30);
    slot.run.cron = c;
    slot.dir = "/srv/app";
    slot.daemon = 4242;
    slot.verbosity = 2;

    auto back = redlock::job::decode_slot_run(redlock::job::encode_slot_run(slot));
    REQUIRE(back);
    CHECK(back->config.key_prefix == "jobs:");
    CHECK(back->config.history == 50);
    REQUIRE(back->config.servers.size() == 1);
    CHECK(back->config.servers[0].url.password == std::optional<std::string>("s3cret"));
    CHECK(back->run.name == "backup");
    CHECK(back->run.program == slot.run.program);
    CHECK(back->run.max_hold == slot.run.max_hold);
    CHECK(back->run.limit == 3);
    REQUIRE(back->run.cron);
    CHECK(back->run.cron->instant_ms == c.instant_ms);
    CHECK(back->run.cron->previous_ms == c.previous_ms);
    CHECK(back->run.cron->next_ms == c.next_ms);
    CHECK(back->run.cron->schedule == c.schedule);
    CHECK(back->run.cron->zone == c.zone);
    CHECK(back->run.cron->overlap == c.overlap);
    CHECK(back->run.cron->at_least_once);
    CHECK(back->run.cron->window == c.window);
    CHECK(back->run.cron->keep == c.keep);
    CHECK(back->dir == "/srv/app");
    CHECK(back->daemon == 4242);
    CHECK(back->verbosity == 2);
    // A single attempt at a time: the slot's run decides when to try again.
    CHECK(back->run.wait.wait == std::chrono::milliseconds(0));
}

TEST_CASE("anything but a slot is refused") {
    for (std::string bytes : {std::string(), std::string("hello"), std::string(200, '\0')}) {
        auto read = redlock::job::decode_slot_run(bytes);
        REQUIRE_FALSE(read);
        CHECK(read.error().message ==
              "__cron-slot is redlock's own, for its cron daemon's use: its input is not a slot");
    }
}

TEST_CASE("a run's report lines are read back as written, and nothing else is one") {
    using redlock::job::parse_report_line;
    auto started = parse_report_line("started 12");
    REQUIRE(started);
    CHECK(started->started == 12);
    redlock::job::SlotEnd end{"ran", 0, 12, 1834, 2, ""};
    std::string line = redlock::job::ended_line(end);
    REQUIRE(line.back() == '\n');
    line.pop_back();
    CHECK(line == "ended ran 0 12 1834 2 -");
    auto ended = parse_report_line(line);
    REQUIRE(ended);
    REQUIRE(ended->ended);
    CHECK(ended->ended->outcome == "ran");
    CHECK(ended->ended->held_ms == 1834);
    CHECK(ended->ended->missed == 2);
    CHECK(ended->ended->by.empty());
    auto elsewhere = parse_report_line("ended skipped-slot -1 0 0 0 host-b");
    REQUIRE(elsewhere);
    CHECK(elsewhere->ended->by == "host-b");
    CHECK(elsewhere->ended->status == -1);
    for (const char* junk :
         {"", "started", "started x", "ended ran 0 12", "hello world", "ended ran 0 12 1834 -2 -"})
        CHECK_FALSE(parse_report_line(junk));
}
