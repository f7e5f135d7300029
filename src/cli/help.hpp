#pragma once
// `redlock --help` and `redlock COMMAND --help`: written by hand, as flock(1) and git
// write theirs, so that each fits 80 columns and lists only what applies to that command
// (its options, the global ones, its own exit statuses). redlock(1) has the whole story.

#include <span>
#include <string_view>

namespace redlock::cli {

// The commands, in the order help lists them.
[[nodiscard]] std::span<const std::string_view> command_names();

// The help of `command` ("" for redlock's own); empty if there is no such command.
[[nodiscard]] std::string_view help_text(std::string_view command);

} // namespace redlock::cli
