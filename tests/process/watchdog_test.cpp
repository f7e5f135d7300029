#include <doctest/doctest.h>

#include "process/watchdog.hpp"

using redlock::process::kernel_spares_memory_sharers;

TEST_CASE("the watchdog shares redlock's memory only from Linux 5.16 on") {
    CHECK(kernel_spares_memory_sharers("6.1.0-13-amd64"));
    CHECK(kernel_spares_memory_sharers("5.16.0"));
    CHECK(kernel_spares_memory_sharers("10.0"));
    CHECK_FALSE(kernel_spares_memory_sharers("5.15.0-91-generic"));
    CHECK_FALSE(kernel_spares_memory_sharers("5.10.0-26-amd64"));
    CHECK_FALSE(kernel_spares_memory_sharers("4.18.0-513.el8_9.x86_64"));
    CHECK_FALSE(kernel_spares_memory_sharers("6"));
    CHECK_FALSE(kernel_spares_memory_sharers(""));
    CHECK_FALSE(kernel_spares_memory_sharers("linux"));
}
