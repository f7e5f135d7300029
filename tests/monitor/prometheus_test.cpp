#include <doctest/doctest.h>

#include "monitor/prometheus.hpp"
#include "util/text.hpp"

using namespace redlock::monitor;

namespace {

const std::vector<std::string> k_outcomes{"ran", "lost", "skipped-held"};

} // namespace

TEST_CASE("label values escape backslash, double quote and line feed, and nothing else") {
    CHECK(escape_label_value("ci/deploy:main@eu+1.x-y_z") == "ci/deploy:main@eu+1.x-y_z");
    CHECK(escape_label_value("a\\b") == "a\\\\b");
    CHECK(escape_label_value("say \"hi\"") == "say \\\"hi\\\"");
    CHECK(escape_label_value("two\nlines") == "two\\nlines");
    CHECK(escape_label_value("tab\there") == "tab\there");
    CHECK(escape_label_value("caf\xc3\xa9") == "caf\xc3\xa9");
}

TEST_CASE("escaped label values read back as they were, and bad escapes are refused") {
    for (const std::string value : {"", "plain", "a\\b", "\"q\"", "x\ny", "\\n literally"})
        CHECK(unescape_label_value(escape_label_value(value)) == value);
    CHECK_FALSE(unescape_label_value("dangling\\"));
    CHECK_FALSE(unescape_label_value("\\t"));
    CHECK_FALSE(unescape_label_value("bare\"quote"));
}

TEST_CASE("a file rendered and parsed again keeps every name, counter and last run") {
    MetricsFile file;
    auto& a = file["nightly"];
    a.last = LastRun{1700000000.25, 1700000012.5, 1.5, 11.0, 3, "ran"};
    a.runs_total = {{"ran", 41}, {"lost", 2}};
    auto& b = file["we\"ird\\name\n"];
    b.last = LastRun{1.0, 2.0, 0.0, 0.0, 75, "skipped-held"};
    b.runs_total = {{"skipped-held", 1}};
    b.running.push_back(RunningRun{4242, "boot/123", 1700000001.0, 4026531836});
    const auto text = render_metrics(file, k_outcomes);
    const auto back = parse_metrics(text);
    REQUIRE(back.size() == 2);
    CHECK(back.at("nightly").last == a.last);
    CHECK(back.at("nightly").runs_total.at("ran") == 41);
    CHECK(back.at("nightly").runs_total.at("lost") == 2);
    CHECK(back.at("nightly").runs_total.at("skipped-held") == 0); // listed, at 0
    CHECK(back.at("we\"ird\\name\n").running == b.running);
    CHECK(back.at("we\"ird\\name\n").last == b.last);
}

TEST_CASE("every outcome is listed at 0 from the first run, so rate() sees the first count") {
    MetricsFile file;
    file["job"].last = LastRun{1.0, 2.0, 0.0, 1.0, 0, "ran"};
    file["job"].runs_total["ran"] = 1;
    const auto text = render_metrics(file, k_outcomes);
    CHECK(text.find("redlock_runs_total{name=\"job\",outcome=\"lost\"} 0\n") != std::string::npos);
    CHECK(text.find("redlock_runs_total{name=\"job\",outcome=\"ran\"} 1\n") != std::string::npos);
    CHECK(text.find("redlock_last_run_outcome{name=\"job\",outcome=\"ran\"} 1\n") !=
          std::string::npos);
    CHECK(text.find("redlock_last_run_outcome{name=\"job\",outcome=\"lost\"} 0\n") !=
          std::string::npos);
    CHECK(text.find("redlock_last_run_duration_seconds{name=\"job\"} 1.000\n") !=
          std::string::npos);
    CHECK(text.find("# TYPE redlock_runs_total counter\n") != std::string::npos);
    CHECK(text.find("# TYPE redlock_last_run_wait_seconds gauge\n") != std::string::npos);
}

TEST_CASE("an outcome a newer redlock wrote is kept, not lost in the merge") {
    const auto file =
        parse_metrics("redlock_runs_total{name=\"job\",outcome=\"force-released\"} 7\n"
                      "redlock_runs_total{name=\"job\",outcome=\"ran\"} 3\n");
    const auto text = render_metrics(file, k_outcomes);
    CHECK(text.find("redlock_runs_total{name=\"job\",outcome=\"force-released\"} 7\n") !=
          std::string::npos);
    CHECK(parse_metrics(text).at("job").runs_total.at("ran") == 3);
}

TEST_CASE("a label value or running record that is not UTF-8 is dropped, not carried over") {
    // Another writer of a shared file put bytes promtool refuses: its samples go, the
    // rest stays.
    const auto file = parse_metrics("redlock_runs_total{name=\"caf\xe9\",outcome=\"ran\"} 4\n"
                                    "redlock_runs_total{name=\"b\",outcome=\"r\xffn\"} 4\n"
                                    "redlock_runs_total{name=\"b\",outcome=\"ran\"} 5\n"
                                    "# redlock-running name=\"b\" pid=7 since=1.000 id=x\xff\n"
                                    "# redlock-running name=\"b\" pid=8 since=1.000 id=boot/1\n");
    CHECK(file.size() == 1);
    CHECK(file.at("b").runs_total == std::map<std::string, long long>{{"ran", 5}});
    REQUIRE(file.at("b").running.size() == 1);
    CHECK(file.at("b").running[0].pid == 8);
    const auto text = render_metrics(file, k_outcomes);
    CHECK(redlock::util::is_utf8(text));
}

TEST_CASE("lines that are not redlock's, or are broken, are dropped") {
    const auto file = parse_metrics("# HELP other_metric x\nother_metric{name=\"a\"} 1\n"
                                    "redlock_runs_total{name=\"a\",outcome=\"ran\"} notanumber\n"
                                    "redlock_runs_total{name=\"a\",outcome=\"ran\" 4\n"
                                    "redlock_runs_total{outcome=\"ran\"} 4\n"
                                    "redlock_runs_total{name=\"b\",outcome=\"ran\"} 5\n");
    CHECK(file.size() == 1);
    CHECK(file.at("b").runs_total.at("ran") == 5);
}
