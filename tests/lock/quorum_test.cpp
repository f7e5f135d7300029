#include <doctest/doctest.h>

#include "lock/quorum.hpp"

using redlock::lock::majority_of;
using redlock::lock::Tally;

TEST_CASE("a majority of N servers is N/2 + 1") {
    CHECK(majority_of(1) == 1);
    CHECK(majority_of(2) == 2);
    CHECK(majority_of(3) == 2);
    CHECK(majority_of(4) == 3);
    CHECK(majority_of(5) == 3);
}

TEST_CASE("a round is won with a majority of yes and lost once it cannot be reached") {
    CHECK(Tally{5, 3, 0, 0}.won());
    CHECK_FALSE(Tally{5, 2, 0, 0}.decided()); // three still to answer
    CHECK(Tally{5, 2, 1, 2}.lost());          // no one left to say yes
    CHECK_FALSE(Tally{5, 2, 1, 1}.decided()); // one left: 3 is still possible
    CHECK(Tally{1, 0, 0, 1}.lost());
}

TEST_CASE("refused counts answers alone: failures may still turn into yes on a retry") {
    CHECK(Tally{5, 0, 3, 0}.refused());
    CHECK_FALSE(Tally{5, 0, 2, 3}.refused());
    CHECK(Tally{5, 0, 2, 3}.lost());
    CHECK(Tally{5, 2, 1, 0}.answered() == 3);
}
