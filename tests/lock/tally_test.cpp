#include <chrono>

#include <doctest/doctest.h>

#include "lock/lock.hpp"

using redlock::lock::Clock;
using redlock::lock::Millis;
using redlock::lock::Tally;
using redlock::lock::validity_end;
using namespace std::chrono_literals;

TEST_CASE("a majority is more than half of the servers") {
    CHECK(Tally{.total = 1}.majority() == 1);
    CHECK(Tally{.total = 2}.majority() == 2);
    CHECK(Tally{.total = 3}.majority() == 2);
    CHECK(Tally{.total = 4}.majority() == 3);
    CHECK(Tally{.total = 5}.majority() == 3);
    CHECK(Tally{.total = 6}.majority() == 4);
    CHECK(Tally{.total = 7}.majority() == 4);
}

TEST_CASE("a round is won, lost or open exactly as counting the votes says, for 1 to 7 servers") {
    for (size_t n = 1; n <= 7; ++n) {
        // The reference: the smallest count that is more than half of n.
        size_t majority = 1;
        while (2 * majority <= n)
            ++majority;
        for (size_t yes = 0; yes <= n; ++yes) {
            for (size_t no = 0; yes + no <= n; ++no) {
                for (size_t failed = 0; yes + no + failed <= n; ++failed) {
                    CAPTURE(n);
                    CAPTURE(yes);
                    CAPTURE(no);
                    CAPTURE(failed);
                    Tally t{.total = n, .yes = yes, .no = no, .failed = failed};
                    size_t pending = n - yes - no - failed;
                    // Won: a majority said yes. Lost: even if every pending server says yes,
                    // there can be no majority.
                    bool won = yes >= majority;
                    bool lost = yes + pending < majority;
                    CHECK(t.majority() == majority);
                    CHECK(t.won() == won);
                    CHECK(t.lost() == lost);
                    CHECK(t.decided() == (won || lost));
                    CHECK_FALSE((t.won() && t.lost()));
                    if (pending == 0)
                        CHECK(t.decided());
                }
            }
        }
    }
}

TEST_CASE("with five servers three yes win and three no or failures lose") {
    CHECK(Tally{.total = 5, .yes = 3}.won());
    CHECK_FALSE(Tally{.total = 5, .yes = 2, .no = 2}.decided());
    CHECK(Tally{.total = 5, .yes = 2, .no = 1, .failed = 2}.lost());
    CHECK(Tally{.total = 5, .no = 3}.lost());
    CHECK(Tally{.total = 5, .yes = 2, .failed = 3}.lost());
}

TEST_CASE("validity ends a ttl after sending, less 1% of the ttl and 2 ms of drift") {
    auto sent = Clock::now();
    CHECK(validity_end(sent, 30s) == sent + 30s - 300ms - 2ms);
    CHECK(validity_end(sent, 1s) == sent + 1000ms - 10ms - 2ms);
    CHECK(validity_end(sent, 250ms) == sent + 250ms - 2500us - 2ms);
    CHECK(validity_end(sent, Millis{10}) == sent + 10ms - 100us - 2ms);
    // A ttl too short for the allowance leaves no validity at all.
    CHECK(validity_end(sent, Millis{2}) < sent);
}
