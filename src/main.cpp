#include "cli/cli.hpp"

int main(int argc, char** argv) {
    return redlock::cli::main(argc, argv);
}
