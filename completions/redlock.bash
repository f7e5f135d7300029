# bash completion for redlock(1)                                 -*- shell-script -*-
# Installed as share/bash-completion/completions/redlock (loaded on demand by
# bash-completion); it also works when sourced on its own.

_redlock_commands='run status list history watch exporter acquire extend release reap doctor cron'
_redlock_global_opts='-c --config -s --server -v --verbose -q --quiet -h --help --version'

# Options of each command (global options are accepted after the command too).
_redlock_command_opts() {
    case $1 in
        run) echo '-k --key -t --ttl -w --wait --timeout -n --no-wait --nonblock --fair
                   -E --conflict-exit-code --max-hold --min-validity --min-hold --once-per --limit
                   --metrics --events --on-lost --notify-passthrough' ;;
        status) echo '-k --key --json' ;;
        list) echo '-p --pattern --json' ;;
        history) echo '-k --key -n --count --since --json' ;;
        watch) echo '-p --pattern --json' ;;
        exporter) echo '--listen -p --pattern' ;;
        acquire) echo '-k --key -t --ttl -w --wait --timeout -n --no-wait --nonblock --fair
                       -E --conflict-exit-code --json --shell' ;;
        extend) echo '-k --key --token -t --ttl' ;;
        release) echo '-k --key --token -f --force -y --yes' ;;
        reap) echo '-p --pattern --dry-run --json' ;;
        doctor) echo '--json' ;;
        cron) echo '--check -n --count --from --json --grace' ;;
    esac
}

# Names of held locks, from the first column of `redlock list` run with the same
# -c/-s options as the command line. Prints nothing when that fails (no server, an
# older redlock without `list`), so completion degrades to no suggestions. Only valid
# lock names are kept: that drops the header and names clipped to fit the table.
_redlock_locks() {
    local prog=$1
    shift
    local -a cmd=("$prog" "$@" list)
    if type -P timeout >/dev/null 2>&1; then
        cmd=(timeout 3 "${cmd[@]}")
    fi
    "${cmd[@]}" </dev/null 2>/dev/null |
        awk 'NR == 1 && $1 == "NAME" { next } $1 ~ /^[A-Za-z0-9._:\/@+-]+$/ { print $1 }'
}

_redlock() {
    local cur prev words cword
    if declare -F _init_completion >/dev/null 2>&1; then
        _init_completion -n = || return
    else
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD - 1]}
    fi

    # Find the command, the global options that choose the servers (passed on to
    # `redlock list`), and for `run` where PROGRAM starts: options stop at the first
    # non-option after the command, or after `--`.
    local command='' program_at=0 i word
    local -a server_opts=()
    for ((i = 1; i < cword; i++)); do
        word=${words[i]}
        case $word in
            -c | --config | -s | --server)
                if ((i + 1 < cword)); then
                    server_opts+=("$word" "${words[i + 1]}")
                fi
                ((i++))
                continue
                ;;
            --config=* | --server=*)
                server_opts+=("$word")
                continue
                ;;
            -k | --key | -t | --ttl | -w | --wait | --timeout | -E | --conflict-exit-code | \
                --max-hold | --min-validity | --min-hold | --once-per | --limit | --token | -p | --pattern | \
                --metrics | --events | --on-lost | --count | --since | --listen | --from | --grace)
                [[ -n $command ]] && ((i++))
                continue
                ;;
            -n)
                # history's and cron's count takes a value; run's and acquire's -n does not.
                [[ $command == history || $command == cron ]] && ((i++))
                continue
                ;;
            --)
                if [[ $command == run ]]; then
                    program_at=$((i + 1))
                    break
                fi
                continue
                ;;
            -*) continue ;;
        esac
        if [[ -z $command ]]; then
            command=$word
        elif [[ $command == run ]]; then
            program_at=$i
            break
        fi
    done

    # PROGRAM [ARG...]: complete it as its own command line.
    if ((program_at > 0 && program_at <= cword)); then
        if declare -F _command_offset >/dev/null 2>&1; then
            _command_offset "$program_at"
        elif ((program_at == cword)); then
            COMPREPLY=($(compgen -c -- "$cur"))
        else
            COMPREPLY=($(compgen -f -- "$cur"))
        fi
        return
    fi

    case $cur in
        --config=*)
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -f -- "${cur#*=}"))
            return
            ;;
    esac

    case $prev in
        -c | --config)
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -f -- "$cur"))
            return
            ;;
        -s | --server)
            compopt -o nospace 2>/dev/null
            COMPREPLY=($(compgen -W 'redis:// unix:///' -- "$cur"))
            return
            ;;
        -n | --count)
            # history/cron -n N: a number, nothing to offer (for run and acquire -n is a flag).
            if [[ $command == history || $command == cron || $prev == --count ]]; then
                return
            fi
            ;;
        --since)
            COMPREPLY=($(compgen -W '10m 1h 6h 1d 7d 30d' -- "$cur"))
            return
            ;;
        -k | --key)
            case $command in
                status | release | extend | history)
                    COMPREPLY=($(compgen -W "$(_redlock_locks "${words[0]}" "${server_opts[@]}")" \
                        -- "$cur"))
                    ;;
            esac
            return
            ;;
        -t | --ttl | -w | --wait | --timeout | --max-hold | --min-validity | --min-hold | --once-per | --grace)
            COMPREPLY=($(compgen -W '250ms 10s 30s 1m 5m 10m 30m 1h 2h' -- "$cur"))
            return
            ;;
        -E | --conflict-exit-code | --limit | --token | -p | --pattern | --on-lost | --listen | --from)
            return
            ;;
        --metrics | --events)
            _filedir
            return
            ;;
    esac

    if [[ -z $command ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$_redlock_global_opts" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$_redlock_commands" -- "$cur"))
        fi
        return
    fi

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_redlock_command_opts "$command") $_redlock_global_opts" \
            -- "$cur"))
        return
    fi

    case $command in
        status | release | extend | history)
            COMPREPLY=($(compgen -W "$(_redlock_locks "${words[0]}" "${server_opts[@]}")" \
                -- "$cur"))
            ;;
        cron)
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -f -- "$cur"))
            ;;
    esac
} &&
    complete -F _redlock redlock

# ex: filetype=sh
