#pragma once
// The command line: global options, the subcommands, and the one place where an error
// becomes a message on stderr and an exit status.

namespace redlock::cli {

// Parses argv, runs the command and returns the process exit status.
int main(int argc, char** argv);

} // namespace redlock::cli
