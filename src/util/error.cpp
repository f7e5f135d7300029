#include "util/error.hpp"

namespace redlock::util {

int exit_status(ErrorKind kind) {
    switch (kind) {
    case ErrorKind::usage:
        return exit_code::usage;
    case ErrorKind::unavailable:
        return exit_code::unavailable;
    case ErrorKind::internal:
        return exit_code::internal;
    case ErrorKind::auth:
        return exit_code::auth;
    case ErrorKind::config:
        return exit_code::config;
    case ErrorKind::conflict:
        return exit_code::conflict;
    case ErrorKind::lease_lost:
        return exit_code::lease_lost;
    case ErrorKind::cannot_execute:
        return exit_code::cannot_execute;
    case ErrorKind::not_found:
        return exit_code::not_found;
    }
    return exit_code::internal;
}

} // namespace redlock::util
