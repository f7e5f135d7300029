#pragma once
// Who holds a lock: written next to the lock key at every acquisition (the hash
// {<key>}:meta, same TTL), so `redlock status` can answer "who, where, since when, running
// what". A lock taken by another client has no metadata and shows as held by "unknown".

#include <array>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::lock {

struct Holder {
    std::string host;
    long pid = 0; // the redlock process (for `acquire`: the script that ran it)
    std::string user;
    std::string command;     // PROGRAM's command line, shell-quoted, or "(acquire)"
    std::string acquired_at; // ISO 8601, UTC
    long long ttl_ms = 0;    // the lease asked for
    // When process `pid` was running, on its host's CLOCK_BOOTTIME (ms), as written with
    // acquired_at: what a nested run checks against its own ancestry
    // (process/identity.hpp). Empty when unknown (another client, an older redlock).
    std::string process;
    // The pid namespace `pid` means something in (process::pid_namespace), in decimal.
    std::string pid_ns;
    // The digest of the secret the holder gave PROGRAM's environment (nest_digest): what a
    // nested run proves it descends from the holder with. Empty without one.
    std::string nest;
    // The holder's machine (its /etc/machine-id) and boot (process::boot_id): a lock held
    // by this machine under an earlier boot is held by nobody (of_another_boot, and
    // lock/reap.hpp for the proof). Empty when unknown (another client, a redlock before
    // 0.4, a machine without an id).
    std::string machine;
    std::string boot;
};

// The fields of a metadata hash that redlock reads, and all it reads of one: a hash that
// another client wrote may have any number of fields (HMGET, not HGETALL).
inline constexpr std::array<std::string_view, 13> k_holder_field_names{
    "token",   "host",  "pid",  "user",    "command", "acquired_at", "ttl_ms",
    "process", "pidns", "nest", "machine", "boot",    "fence"};

// Whether `holder` names `here`'s machine (the same machine id and host name: two machines
// cloned from one image may share an id) under another boot: this machine's earlier boot,
// or another machine with the same identity (a clone not renamed, a pod of the same name in
// another cluster). Only its lease tells which (lock/reap.hpp, takeover_verdict). Never
// when either side does not know its machine or boot.
[[nodiscard]] bool of_another_boot(const Holder& holder, const Holder& here);

// When the holder's boot began, in Unix ms on its own wall clock: acquired_at less
// `process` (its boot clock then), which it writes together. nullopt when it did not
// write both, or they do not make a time.
[[nodiscard]] std::optional<long long> boot_started_ms(const Holder& holder);

// The digest of a nesting secret as the metadata keeps it: the secret itself never
// reaches the servers, where anyone who can read the lock could read it.
[[nodiscard]] std::string nest_digest(std::string_view secret);

// The holder for this process: host name, machine and boot, effective user, the given pid
// (and its identity and pid namespace) and command line; `nest` is left for the caller to set.
// The command is stored with its secrets masked (util/redact.hpp): `secrets` are the
// passwords redlock knows of (its servers'), masked wherever they appear.
[[nodiscard]] Holder current_holder(std::span<const std::string> command, long pid,
                                    std::span<const std::string> secrets = {});

// The user name of `uid` in the text of an /etc/passwd file (`name:pw:uid:...` lines);
// nullopt when no line has that uid. NIS markers (`+`, `-` lines of "compat") are skipped.
[[nodiscard]] std::optional<std::string> passwd_file_user(std::string_view passwd, unsigned uid);

// A command line as a shell would need it typed: words quoted only where needed.
[[nodiscard]] std::string shell_quote(std::span<const std::string> words);

// Now as `acquired_at` is written: ISO 8601, UTC, in milliseconds.
[[nodiscard]] std::string iso8601_now();

// Field/value pairs for the metadata hash, including the owner's token.
[[nodiscard]] std::vector<std::string> holder_fields(const Holder& holder,
                                                     const std::string& token);

// Reads a metadata hash back; nullopt when it is missing or belongs to another token. The
// command is masked again: metadata written by another client (or an older redlock) is
// shown with the same care.
[[nodiscard]] std::optional<Holder> parse_holder(const std::map<std::string, std::string>& fields,
                                                 const std::string& token);

} // namespace redlock::lock
