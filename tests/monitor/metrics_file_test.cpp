#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sys/file.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include "monitor/metrics_file.hpp"
#include "util/fd.hpp"

using namespace redlock::monitor;
namespace fs = std::filesystem;

namespace {

struct TempDir {
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "redlock-metrics-XXXXXX").string();
        path = ::mkdtemp(pattern.data());
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    fs::path path;
};

std::vector<std::string> names_in(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

} // namespace

TEST_CASE("a name becomes one file name, its other characters as %XX") {
    CHECK(metrics_file_in("/d", "nightly") == fs::path("/d/redlock_nightly.prom"));
    CHECK(metrics_file_in("/d", "ci/deploy") == fs::path("/d/redlock_ci%2Fdeploy.prom"));
    CHECK(metrics_file_in("/d", "a:b@c+d") == fs::path("/d/redlock_a%3Ab%40c%2Bd.prom"));
    CHECK(metrics_file_in("/d", "..") == fs::path("/d/redlock_...prom"));
}

TEST_CASE("an update merges into the file: other names and counters are kept") {
    TempDir dir;
    const auto file = dir.path / "all.prom";
    for (int i = 0; i < 3; ++i)
        REQUIRE(update_metrics_file(file, [](MetricsFile& m) { ++m["a"].runs_total["ran"]; }));
    REQUIRE(update_metrics_file(file, [](MetricsFile& m) { ++m["b"].runs_total["lost"]; }));
    MetricsFile seen;
    REQUIRE(update_metrics_file(file, [&](MetricsFile& m) { seen = m; }));
    CHECK(seen.at("a").runs_total.at("ran") == 3);
    CHECK(seen.at("b").runs_total.at("lost") == 1);
    // The file and its lock, nothing else.
    CHECK(names_in(dir.path) == std::vector<std::string>{".all.prom.lock", "all.prom"});
    CHECK((fs::status(file).permissions() & fs::perms::others_read) != fs::perms::none);
    // The lock file is for this user's runs alone.
    CHECK(fs::status(dir.path / ".all.prom.lock").permissions() ==
          (fs::perms::owner_read | fs::perms::owner_write));
}

TEST_CASE("a missing directory fails with a message that names the file") {
    TempDir dir;
    const auto file = dir.path / "missing" / "x.prom";
    auto ok = update_metrics_file(file, [](MetricsFile&) {});
    REQUIRE_FALSE(ok);
    CHECK(ok.error().message.starts_with("cannot write metrics to " + file.string() + ": "));
    CHECK(ok.error().message.ends_with("No such file or directory"));
}

TEST_CASE("a lock held elsewhere for too long fails in bounded time") {
    TempDir dir;
    const auto file = dir.path / "x.prom";
    redlock::util::UniqueFd other(
        ::open((dir.path / ".x.prom.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    REQUIRE(::flock(other.get(), LOCK_EX) == 0);
    auto ok = update_metrics_file(
        file, [](MetricsFile&) {}, std::chrono::milliseconds(50));
    REQUIRE_FALSE(ok);
    CHECK(ok.error().message.find("stayed locked by another process") != std::string::npos);
    CHECK_FALSE(fs::exists(file));
}
