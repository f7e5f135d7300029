#include "cli/run_command.hpp"

#include "cli/common.hpp"
#include "cli/stderr_observer.hpp"
#include "job/run.hpp"
#include "util/error.hpp"

namespace redlock::cli {

int run_command(const RunOptions& options, const config::Config& config) {
    job::RunSpec spec;
    spec.name = options.name;
    spec.ttl = options.ttl;
    spec.wait = {options.wait, options.fair, options.min_validity};
    spec.program = options.program;
    spec.max_hold = options.max_hold;
    spec.min_hold = options.min_hold;
    spec.once_per = options.once_per;
    spec.limit = options.limit;
    StderrObserver observer(options.name);
    return exit_status(job::run(spec, config, observer), options.conflict_exit_code);
}

} // namespace redlock::cli
