# fish completion for redlock(1). Installed as
# share/fish/vendor_completions.d/redlock.fish.

set -l __redlock_commands run status list history watch exporter acquire extend release reap doctor cron

# The command given so far (the first word after the global options and their values).
function __redlock_command
    set -l words (commandline -opc)
    set -e words[1]
    while set -q words[1]
        switch $words[1]
            case -c --config -s --server
                set -e words[1]
            case '-*'
            case '*'
                echo $words[1]
                return 0
        end
        set -e words[1]
    end
    return 1
end

function __redlock_no_command
    not __redlock_command >/dev/null
end

function __redlock_using
    set -l command (__redlock_command); or return 1
    test "$command" = $argv[1]
end

# For `run`: true once PROGRAM has started (after `--` or the first non-option after
# the command), so redlock's own options are no longer offered.
function __redlock_in_program
    set -l words (commandline -opc)
    set -e words[1]
    set -l seen_command 0
    while set -q words[1]
        switch $words[1]
            case -c --config -s --server -k --key -t --ttl -w --wait --timeout -E --conflict-exit-code --max-hold --min-validity --min-hold --once-per --limit --metrics --events --on-lost
                set -e words[1]
            case --
                test $seen_command = 1; and return 0
            case '-*'
            case '*'
                test $seen_command = 1; and return 0
                test $words[1] = run; or return 1
                set seen_command 1
        end
        set -e words[1]
    end
    return 1
end

# Names of held locks, from the first column of `redlock list` run with the same -c/-s
# options as the command line. Nothing when that fails (no server, no `list`). Only
# valid lock names are kept: that drops the header and names clipped to fit the table.
function __redlock_locks
    set -l words (commandline -opc)
    set -l prog $words[1]
    set -e words[1]
    set -l opts
    while set -q words[1]
        switch $words[1]
            case -c --config -s --server
                set -q words[2]; and set -a opts $words[1] $words[2]
                set -e words[1]
            case '--config=*' '--server=*'
                set -a opts $words[1]
        end
        set -e words[1]
    end
    set -l cmd $prog $opts list
    command -q timeout; and set cmd timeout 3 $cmd
    $cmd </dev/null 2>/dev/null | awk 'NR == 1 && $1 == "NAME" { next } $1 ~ /^[A-Za-z0-9._:\/@+-]+$/ { print $1 }'
end

complete -c redlock -e
complete -c redlock -f

# Global options, accepted before or after the command.
complete -c redlock -n 'not __redlock_in_program' -s c -l config -r -F -d 'Config file'
complete -c redlock -n 'not __redlock_in_program' -s s -l server -x -a 'redis:// unix:///' -d 'Redis server URL (repeat for Redlock)'
complete -c redlock -n 'not __redlock_in_program' -s v -l verbose -d 'Say what happens: acquire, renew, release'
complete -c redlock -n 'not __redlock_in_program' -s q -l quiet -d "Silence redlock's notes"
complete -c redlock -n 'not __redlock_in_program' -s h -l help -d 'Print help and exit'
complete -c redlock -n __redlock_no_command -l version -d 'Print the version and exit'

# Commands.
complete -c redlock -n __redlock_no_command -a run -d 'Run PROGRAM while holding the lock'
complete -c redlock -n __redlock_no_command -a status -d 'Show whether locks are free or held'
complete -c redlock -n __redlock_no_command -a list -d 'List held locks'
complete -c redlock -n __redlock_no_command -a history -d 'Show the runs of a lock and how they ended'
complete -c redlock -n __redlock_no_command -a watch -d 'Follow the locks live'
complete -c redlock -n __redlock_no_command -a exporter -d 'Serve the locks to Prometheus and a web page'
complete -c redlock -n __redlock_no_command -a acquire -d 'Acquire a lock and print its token'
complete -c redlock -n __redlock_no_command -a extend -d 'Give a held lock a fresh TTL'
complete -c redlock -n __redlock_no_command -a release -d 'Release a lock'
complete -c redlock -n __redlock_no_command -a reap -d "Release this machine's locks of an earlier boot"
complete -c redlock -n __redlock_no_command -a doctor -d 'Check the servers'
complete -c redlock -n __redlock_no_command -a cron -d "Run a crontab on every host, each slot once"

set -l durations '250ms 10s 30s 1m 5m 10m 30m 1h 2h'

# run and acquire
for cmd in run acquire
    set -l cond "__redlock_using $cmd; and not __redlock_in_program"
    complete -c redlock -n $cond -s k -l key -x -d "The lock's name"
    complete -c redlock -n $cond -s t -l ttl -x -a $durations -d 'Lease length'
    complete -c redlock -n $cond -s w -l wait -x -a $durations -d 'Wait at most this long'
    complete -c redlock -n $cond -l timeout -x -a $durations -d 'Same as --wait'
    complete -c redlock -n $cond -s n -l no-wait -d 'Fail at once if the lock is held'
    complete -c redlock -n $cond -l nonblock -d 'Same as --no-wait'
    complete -c redlock -n $cond -l fair -d 'Wait in line: first come, first served'
    complete -c redlock -n $cond -s E -l conflict-exit-code -x -d 'Exit status when not acquired'
end
complete -c redlock -n '__redlock_using run; and not __redlock_in_program' -l max-hold -x -a $durations -d 'Stop PROGRAM once it has run this long, exit 124'
complete -c redlock -n '__redlock_using run; and not __redlock_in_program' -l min-validity -x -a $durations -d 'Start PROGRAM only with this much of the lease left'
complete -c redlock -n '__redlock_using run; and not __redlock_in_program' -l min-hold -x -a $durations -d 'Keep the lock at least this long after acquiring'
complete -c redlock -n '__redlock_using run; and not __redlock_in_program' -l once-per -x -a $durations -d 'Run at most once in each slot of this length'
complete -c redlock -n '__redlock_using run; and not __redlock_in_program' -l limit -x -d 'Up to N holders at once (a semaphore)'
complete -c redlock -n '__redlock_using run; and not __redlock_in_program' -l metrics -r -F -d 'Write Prometheus metrics to this file (or directory)'
complete -c redlock -n '__redlock_using run; and not __redlock_in_program' -l events -r -F -d 'Append one JSON line per event to this file (or fd:N)'
complete -c redlock -n '__redlock_using run; and not __redlock_in_program' -l on-lost -x -d 'Run this shell command if the lock is lost'
complete -c redlock -n '__redlock_using run; and not __redlock_in_program' -l notify-passthrough -d 'Leave NOTIFY_SOCKET to PROGRAM (it says READY=1)'
# PROGRAM and its arguments complete as their own command line.
complete -c redlock -n '__redlock_using run; and __redlock_in_program' -a '(__fish_complete_subcommand --fcs-skip=2 -k --key -t --ttl -w --wait --timeout -E --conflict-exit-code --max-hold --min-validity --min-hold --once-per --limit --metrics --events --on-lost -c --config -s --server)'
complete -c redlock -n '__redlock_using acquire' -l json -d 'Print one JSON document'
complete -c redlock -n '__redlock_using acquire' -l shell -d 'Print REDLOCK_KEY, REDLOCK_TOKEN and REDLOCK_FENCE for eval'

# status, history, extend, release: lock names from `redlock list`.
for cmd in status history extend release
    complete -c redlock -n "__redlock_using $cmd" -s k -l key -x -a '(__redlock_locks)' -d "The lock's name"
    complete -c redlock -n "__redlock_using $cmd" -a '(__redlock_locks)'
end
complete -c redlock -n '__redlock_using status' -l json -d 'Print one JSON document'
complete -c redlock -n '__redlock_using history' -s n -l count -x -d 'The newest N runs (default 20)'
complete -c redlock -n '__redlock_using history' -l since -x -a '10m 1h 6h 1d 7d 30d' -d 'Only runs that started at most this long ago'
complete -c redlock -n '__redlock_using history' -l json -d 'Print one JSON document'
complete -c redlock -n '__redlock_using extend' -l token -x -d 'The token that holds the lock'
complete -c redlock -n '__redlock_using extend' -s t -l ttl -x -a $durations -d 'New lease length'
complete -c redlock -n '__redlock_using release' -l token -x -d 'Release only with this token'
complete -c redlock -n '__redlock_using release' -s f -l force -d 'Remove the lock whoever holds it'
complete -c redlock -n '__redlock_using release' -s y -l yes -d 'Do not ask for confirmation'

# list, watch, doctor
complete -c redlock -n '__redlock_using list' -s p -l pattern -x -d 'Only locks matching this glob'
complete -c redlock -n '__redlock_using list' -l json -d 'Print one JSON document'
complete -c redlock -n '__redlock_using watch' -s p -l pattern -x -d 'Only locks matching this glob'
complete -c redlock -n '__redlock_using watch' -l json -d 'One JSON object per line per change'
complete -c redlock -n '__redlock_using exporter' -l listen -x -d 'Serve on ADDR:PORT (default 127.0.0.1:21379)'
complete -c redlock -n '__redlock_using exporter' -s p -l pattern -x -d 'Only locks matching this glob'
complete -c redlock -n '__redlock_using reap' -s p -l pattern -x -d 'Only locks matching this glob'
complete -c redlock -n '__redlock_using reap' -l dry-run -d 'Say what would be reaped, release nothing'
complete -c redlock -n '__redlock_using reap' -l json -d 'Print one JSON document'
complete -c redlock -n '__redlock_using doctor' -l json -d 'Print one JSON document'

# cron [--json] [--grace D] FILE, cron --check FILE
complete -c redlock -n '__redlock_using cron' -l check -d 'Check the crontab and list its jobs'
complete -c redlock -n '__redlock_using cron' -s n -l count -x -d 'The next N fire times of each job (default 3)'
complete -c redlock -n '__redlock_using cron' -l from -x -d 'The fire times after this ISO 8601 UTC time'
complete -c redlock -n '__redlock_using cron' -l json -d 'JSON: one object per line (--check: one document)'
complete -c redlock -n '__redlock_using cron' -l grace -x -d 'How long a drain lets running jobs finish'
complete -c redlock -n '__redlock_using cron' -F
