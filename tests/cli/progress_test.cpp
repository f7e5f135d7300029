#include <chrono>
#include <string>

#include <doctest/doctest.h>

#include "cli/progress.hpp"

using namespace std::chrono_literals;
using redlock::cli::WaitProgress;

namespace {

redlock::lock::Holder holder() {
    redlock::lock::Holder h;
    h.user = "ci";
    h.host = "runner-3";
    h.pid = 4242;
    h.command = "./deploy.sh";
    return h;
}

} // namespace

TEST_CASE("the progress line claims no owner it has not read") {
    const auto start = WaitProgress::Clock::now();
    WaitProgress progress("deploy", start, std::nullopt);
    // Not read yet, or the lock changed hands between the attempt and the read.
    CHECK(progress.text(start) == "waiting for 'deploy', held by another owner");
    progress.set_holder(holder());
    CHECK(progress.text(start) ==
          "waiting for 'deploy', held by ci@runner-3 (pid 4242), running ./deploy.sh");
    progress.holder_unknown();
    CHECK(progress.text(start) == "waiting for 'deploy', held by another owner");
    // Read as held, without redlock's metadata: a client of its own (SET NX by hand).
    progress.set_holder(std::nullopt);
    CHECK(progress.text(start) ==
          "waiting for 'deploy', held by an unknown owner (no redlock metadata)");
}
