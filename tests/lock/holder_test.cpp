#include <algorithm>
#include <ctime>
#include <map>
#include <pwd.h>
#include <string>
#include <unistd.h>
#include <vector>

#include <doctest/doctest.h>

#include "lock/holder.hpp"

using redlock::lock::current_holder;
using redlock::lock::Holder;
using redlock::lock::holder_fields;
using redlock::lock::parse_holder;
using redlock::lock::passwd_file_user;
using redlock::lock::shell_quote;

namespace {

std::string quote(std::vector<std::string> words) {
    return shell_quote(words);
}

std::map<std::string, std::string> as_map(const std::vector<std::string>& pairs) {
    REQUIRE(pairs.size() % 2 == 0);
    std::map<std::string, std::string> out;
    for (size_t i = 0; i + 1 < pairs.size(); i += 2)
        out[pairs[i]] = pairs[i + 1];
    return out;
}

Holder sample_holder() {
    Holder h;
    h.host = "build-7.example";
    h.pid = 4242;
    h.user = "ci";
    h.command = "make -j2 'all tests'";
    h.acquired_at = "2024-05-01T12:34:56.789Z";
    h.ttl_ms = 30000;
    h.process = "b00t-1d/4711";
    h.pid_ns = "4026531836";
    h.nest = std::string(64, 'e');
    h.machine = "3d1219c7c4c5404aaa1f6d2a48adfda4";
    h.boot = "1c674c42-fc94-4c84-8e09-d49983c0fe88";
    return h;
}

} // namespace

TEST_CASE("shell_quote leaves plain words alone") {
    CHECK(quote({}) == "");
    CHECK(quote({"make"}) == "make");
    CHECK(quote({"rsync", "-a", "src/", "user@host:/backup", "--bwlimit=1000", "50%", "a+b,c"}) ==
          "rsync -a src/ user@host:/backup --bwlimit=1000 50% a+b,c");
}

TEST_CASE("shell_quote puts words with spaces or shell characters in single quotes") {
    CHECK(quote({"sh", "-c", "echo $HOME"}) == "sh -c 'echo $HOME'");
    CHECK(quote({"a b"}) == "'a b'");
    CHECK(quote({"*.txt", "x;y", "a|b", "~"}) == "'*.txt' 'x;y' 'a|b' '~'");
    CHECK(quote({"two\nlines"}) == "'two\nlines'");
    CHECK(quote({"\"double\""}) == "'\"double\"'");
}

TEST_CASE("shell_quote writes an empty word as two quotes") {
    CHECK(quote({""}) == "''");
    CHECK(quote({"echo", "", "x"}) == "echo '' x");
}

TEST_CASE("shell_quote escapes a single quote by closing and reopening the quotes") {
    CHECK(quote({"it's"}) == "'it'\\''s'");
    CHECK(quote({"'"}) == "''\\'''");
}

TEST_CASE("holder fields carry the token and every holder detail") {
    auto fields = as_map(holder_fields(sample_holder(), "0123abcd"));
    CHECK(fields == std::map<std::string, std::string>{{"token", "0123abcd"},
                                                       {"host", "build-7.example"},
                                                       {"pid", "4242"},
                                                       {"user", "ci"},
                                                       {"command", "make -j2 'all tests'"},
                                                       {"acquired_at", "2024-05-01T12:34:56.789Z"},
                                                       {"ttl_ms", "30000"},
                                                       {"process", "b00t-1d/4711"},
                                                       {"pidns", "4026531836"},
                                                       {"nest", std::string(64, 'e')},
                                                       {"machine", sample_holder().machine},
                                                       {"boot", sample_holder().boot}});
}

TEST_CASE("every field of the metadata is one that redlock reads back") {
    for (const auto& [name, value] : as_map(holder_fields(sample_holder(), "tok"))) {
        CAPTURE(name);
        CHECK(std::ranges::find(redlock::lock::k_holder_field_names, name) !=
              redlock::lock::k_holder_field_names.end());
    }
}

TEST_CASE("a holder's boot began at its acquired_at less its boot clock then") {
    auto h = sample_holder();
    h.acquired_at = "2024-05-01T12:00:00.500Z"; // 1714564800500
    h.process = "3600000";                      // up an hour
    CHECK(redlock::lock::boot_started_ms(h) == 1714564800500 - 3600000);
    // What it is not told by: a process identity of an older redlock, garbage, a time
    // before the epoch, no acquired_at.
    for (const char* process : {"b00t-1d/4711", "", "-5", "12x", "99999999999999999999"}) {
        h.process = process;
        CAPTURE(process);
        CHECK_FALSE(redlock::lock::boot_started_ms(h));
    }
    h.process = "1714564800501";
    CHECK_FALSE(redlock::lock::boot_started_ms(h));
    h.process = "1000";
    h.acquired_at = "yesterday";
    CHECK_FALSE(redlock::lock::boot_started_ms(h));
}

TEST_CASE("a holder of this process writes when its boot began, on this machine's clocks") {
    const std::vector<std::string> command{"true"};
    const auto h = current_holder(command, 1);
    const auto began = redlock::lock::boot_started_ms(h);
    REQUIRE(began);
    timespec up{}, wall{};
    ::clock_gettime(CLOCK_BOOTTIME, &up);
    ::clock_gettime(CLOCK_REALTIME, &wall);
    const long long expected =
        (wall.tv_sec - up.tv_sec) * 1000LL + (wall.tv_nsec - up.tv_nsec) / 1000000;
    // The two clocks read apart, in milliseconds each: a few ms at most (NTP slews them
    // apart by far less).
    CHECK(*began > expected - 50);
    CHECK(*began < expected + 50);
}

TEST_CASE("holder fields read back as the same holder with the same token") {
    auto original = sample_holder();
    auto parsed = parse_holder(as_map(holder_fields(original, "tok")), "tok");
    REQUIRE(parsed);
    CHECK(parsed->host == original.host);
    CHECK(parsed->pid == original.pid);
    CHECK(parsed->user == original.user);
    CHECK(parsed->command == original.command);
    CHECK(parsed->acquired_at == original.acquired_at);
    CHECK(parsed->ttl_ms == original.ttl_ms);
    CHECK(parsed->process == original.process);
    CHECK(parsed->pid_ns == original.pid_ns);
    CHECK(parsed->nest == original.nest);
    CHECK(parsed->machine == original.machine);
    CHECK(parsed->boot == original.boot);
}

TEST_CASE("a holder naming this machine under an earlier boot is of another boot") {
    const auto here = sample_holder();
    auto before = here;
    before.boot = "0b0b0b0b-0000-4000-8000-000000000000";
    before.pid = 17;
    CHECK(redlock::lock::of_another_boot(before, here));
}

TEST_CASE("a holder of the current boot, or of another machine, is never of another boot") {
    const auto here = sample_holder();
    CHECK_FALSE(redlock::lock::of_another_boot(here, here)); // the current boot
    auto other = here;
    other.boot = "0b0b0b0b-0000-4000-8000-000000000000";
    other.machine = "ffffffffffffffffffffffffffffffff"; // another machine
    CHECK_FALSE(redlock::lock::of_another_boot(other, here));
    // A clone of this machine's image (the same machine id) under another host name.
    auto clone = here;
    clone.boot = other.boot;
    clone.host = "build-8.example";
    CHECK_FALSE(redlock::lock::of_another_boot(clone, here));
}

TEST_CASE("a holder that does not say its machine or boot is never of another boot") {
    const auto here = sample_holder();
    auto old = here; // a redlock before 0.4, another client
    old.machine.clear();
    old.boot.clear();
    CHECK_FALSE(redlock::lock::of_another_boot(old, here));
    auto no_boot = here;
    no_boot.boot.clear();
    CHECK_FALSE(redlock::lock::of_another_boot(no_boot, here));
    auto before = here;
    before.boot = "0b0b0b0b-0000-4000-8000-000000000000";
    auto unknown_here = here; // this machine has no /etc/machine-id
    unknown_here.machine.clear();
    CHECK_FALSE(redlock::lock::of_another_boot(before, unknown_here));
}

TEST_CASE("the metadata keeps the digest of the nesting secret, never the secret") {
    auto h = sample_holder();
    const std::string secret = "00112233445566778899aabbccddeeff";
    h.nest = redlock::lock::nest_digest(secret);
    CHECK(h.nest.size() == 64);
    CHECK(h.nest != secret);
    CHECK(h.nest == redlock::lock::nest_digest(secret));
    CHECK(h.nest != redlock::lock::nest_digest("00112233445566778899aabbccddeefe"));
    for (const auto& value : holder_fields(h, "tok"))
        CHECK(value.find(secret) == std::string::npos);
}

TEST_CASE("holder metadata of another token or none at all is not read as ours") {
    auto fields = as_map(holder_fields(sample_holder(), "theirs"));
    CHECK_FALSE(parse_holder(fields, "ours"));
    CHECK_FALSE(parse_holder(fields, ""));
    CHECK_FALSE(parse_holder({}, "ours"));
    CHECK_FALSE(parse_holder({}, ""));
    fields.erase("token");
    CHECK_FALSE(parse_holder(fields, "theirs"));
}

TEST_CASE("the current holder names this process's user and the shell-quoted command") {
    std::vector<std::string> command{"sh", "-c", "sleep 1"};
    auto h = current_holder(command, 99);
    CHECK(h.pid == 99);
    CHECK_FALSE(h.pid_ns.empty()); // the namespace pid 99 means something in
    CHECK(h.boot.size() == 36);    // this boot's id: a UUID
    CHECK(h.command == "sh -c 'sleep 1'");
    CHECK_FALSE(h.host.empty());
    CHECK_FALSE(h.user.empty());
    // ISO 8601 in UTC with milliseconds: 2024-05-01T12:34:56.789Z
    REQUIRE(h.acquired_at.size() == 24);
    CHECK(h.acquired_at[4] == '-');
    CHECK(h.acquired_at[10] == 'T');
    CHECK(h.acquired_at[19] == '.');
    CHECK(h.acquired_at.back() == 'Z');
}

TEST_CASE("the current holder's user is the one getpwuid names") {
    // Read from /etc/passwd directly; it must agree with NSS for this process's user.
    const passwd* pw = ::getpwuid(::geteuid());
    REQUIRE(pw != nullptr);
    CHECK(current_holder({}, 1).user == pw->pw_name);
}

TEST_CASE("passwd_file_user finds the uid's line and only an exact uid") {
    const std::string passwd = "root:x:0:0:root:/root:/bin/bash\n"
                               "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
                               "bad line without colons\n"
                               "+nis:x:1000:1000::/:/bin/sh\n"
                               "-other:x:1000:1000::/:/bin/sh\n"
                               ":x:1000:1000::/:/bin/sh\n"
                               "big:x:10000:10000::/:/bin/sh\n"
                               "ci-runner:x:1000:1000:CI:/home/ci:/bin/sh";
    CHECK(passwd_file_user(passwd, 0) == "root");
    CHECK(passwd_file_user(passwd, 1) == "daemon");
    CHECK(passwd_file_user(passwd, 1000) == "ci-runner"); // last line, no newline
    CHECK(passwd_file_user(passwd, 10000) == "big");
    CHECK_FALSE(passwd_file_user(passwd, 10).has_value());
    CHECK_FALSE(passwd_file_user(passwd, 100).has_value());
    CHECK_FALSE(passwd_file_user("", 0).has_value());
    CHECK_FALSE(passwd_file_user("truncated:x:7", 7).has_value());
}

TEST_CASE("the current holder cuts a very long command line to 1024 characters") {
    std::vector<std::string> command{"echo", std::string(5000, 'x')};
    auto h = current_holder(command, 1);
    CHECK(h.command.size() == 1024);
    CHECK(h.command.starts_with("echo xxx"));
    CHECK(h.command.ends_with("..."));
}
