"""Shared helpers for the packaging tests: paths, bounded subprocesses, tools that may
need installing, parsing `redlock --help`, and driving each shell's completion."""

import os
import pty
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

SOURCE_DIR = os.environ.get(
    "REDLOCK_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
REDLOCK_BIN = os.environ.get("REDLOCK_BIN", os.path.join(SOURCE_DIR, "build", "redlock"))
BUILD_DIR = os.environ.get("REDLOCK_BUILD_DIR", os.path.dirname(REDLOCK_BIN))
CMAKE = os.environ.get("CMAKE_COMMAND", "cmake")
CPACK = os.environ.get("CPACK_COMMAND", "cpack")
MAN1 = os.path.join(SOURCE_DIR, "man", "redlock.1")
MAN5 = os.path.join(SOURCE_DIR, "man", "redlock.toml.5")
MAN5_CRON = os.path.join(SOURCE_DIR, "man", "redlock-cron.5")
COMPLETIONS = os.path.join(SOURCE_DIR, "completions")
README = os.path.join(SOURCE_DIR, "README.md")
DOCS = os.path.join(SOURCE_DIR, "docs")


def markdown_docs():
    """README.md and the guides in docs/, the README first."""
    guides = os.listdir(DOCS) if os.path.isdir(DOCS) else []
    return [README] + sorted(os.path.join(DOCS, f) for f in guides if f.endswith(".md"))

def project_version():
    """The CMake project version (packages and --version carry it)."""
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
        return re.search(r"project\(redlock VERSION (\S+)", f.read()).group(1)


# The commands the completions know, whether or not this build has them yet; the
# commands `redlock --help` lists are added to these in every check.
KNOWN_COMMANDS = ["run", "status", "list", "acquire", "extend", "release", "doctor"]


def run(args, timeout=60, check=True, **kwargs):
    """Runs a command with a deadline, capturing text output."""
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} exited {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result


# Debian package that provides each tool the tests use.
_PACKAGES = {
    "groff": "groff", "man": "man-db", "bash": "bash", "zsh": "zsh", "fish": "fish",
    "dpkg-deb": "dpkg", "dpkg-shlibdeps": "dpkg-dev", "fakeroot": "fakeroot",
    "lintian": "lintian",
}
_BASH_COMPLETION = "/usr/share/bash-completion/bash_completion"


def _apt_install(package):
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", package],
                       capture_output=True, timeout=240, env=env)
    except subprocess.TimeoutExpired:
        pass


def require_tool(test, tool):
    """The tool's path; installs its package with apt-get when missing, and skips the
    test with a clear message only when that is impossible."""
    path = shutil.which(tool)
    if path is None:
        _apt_install(_PACKAGES.get(tool, tool))
        path = shutil.which(tool)
    if path is None:
        test.skipTest(f"{tool} is not installed and could not be installed "
                      f"(apt-get install {_PACKAGES.get(tool, tool)})")
    return path


def require_bash_completion(test):
    if not os.path.exists(_BASH_COMPLETION):
        _apt_install("bash-completion")
    if not os.path.exists(_BASH_COMPLETION):
        test.skipTest("bash-completion is not installed and could not be installed")
    return _BASH_COMPLETION


# --- redlock --help ---------------------------------------------------------------------

def help_text(*command):
    result = run([REDLOCK_BIN, *command, "--help"], timeout=20)
    return result.stdout


def _section(text, title):
    """The lines of a help section ("Options:", "Commands:") up to a blank line."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.strip() == title:
            inside = True
            continue
        if inside:
            if not line.strip():
                break
            lines.append(line)
    return lines


def subcommands():
    """The commands `redlock --help` lists."""
    names = []
    for line in _section(help_text(), "Commands:"):
        match = re.match(r"\s+([a-z][a-z0-9-]*)\b", line)
        if match:
            names.append(match.group(1))
    return names


def all_commands():
    return sorted(set(KNOWN_COMMANDS) | set(subcommands()))


_LONG = re.compile(r"(?<![\w-])--[A-Za-z0-9][A-Za-z0-9-]*")
_SHORT = re.compile(r"(?<![\w-])-[A-Za-z](?=[ ,]|$)")


def options(*command):
    """(long, short) options printed in the Options: section of `redlock [CMD] --help`."""
    text = "\n".join(_section(help_text(*command), "Options:"))
    return sorted(set(_LONG.findall(text))), sorted(set(_SHORT.findall(text)))


def exit_statuses():
    """The statuses the --help footer lists."""
    text = help_text()
    footer = text[text.index("Exit status:"):] if "Exit status:" in text else ""
    return sorted(set(re.findall(r"\b(\d{1,3})\b", footer)), key=int)


# --- man pages --------------------------------------------------------------------------

def man_source_text(path):
    """The roff source with escapes that only affect typesetting removed, so that
    `\\-\\-key` reads `--key`."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", text)
    text = text.replace("\\-", "-").replace("\\&", "").replace("\\%", "").replace("\\:", "")
    return text


def man_sections(path):
    """{section title: source text} for each .SH of a page."""
    sections, title = {}, None
    for line in man_source_text(path).splitlines():
        match = re.match(r'\.SH\s+"?([^"]+)"?\s*$', line)
        if match:
            title = match.group(1).strip()
            sections[title] = ""
        elif title is not None:
            sections[title] += line + "\n"
    return sections


def mentions(text, option):
    return re.search(r"(?<![\w-])" + re.escape(option) + r"(?![\w-])", text) is not None


# --- completion drivers -----------------------------------------------------------------

def stub_redlock(directory):
    """A fake `redlock` whose `list` prints a table of three locks, the last clipped to
    fit like the real one does, plus one named after the -c FILE it was given; used to
    check lock-name completion without a server."""
    path = os.path.join(directory, "redlock")
    with open(path, "w") as f:
        f.write("""#!/bin/sh
config=none
while [ $# -gt 0 ]; do
  case $1 in
    -c|--config) config=$(basename "$2"); shift ;;
    list) printf 'NAME                     TTL       HOLDER\\n'
          printf 'backup                   10s       root@a:1\\n'
          printf 'deploy/prod              5s        unknown\\n'
          printf 'a-very-long-lock-name-t~ 5s        unknown\\n'
          printf 'cfg-%s                   5s        unknown\\n' "$config"
          exit 0 ;;
  esac
  shift
done
exit 64
""")
    os.chmod(path, 0o755)
    return path


def failing_redlock(directory):
    """A fake `redlock` that fails like one without servers (or without `list`)."""
    path = os.path.join(directory, "redlock")
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho 'redlock: cannot connect' >&2\nexit 69\n")
    os.chmod(path, 0o755)
    return path


def clean_env(path_prefix=None, home=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BASH_", "ZDOTDIR", "fish_", "XDG_", "REDLOCK_"))}
    if home is not None:
        env["HOME"] = home
        env["XDG_CONFIG_HOME"] = os.path.join(home, ".config")
        env["XDG_DATA_HOME"] = os.path.join(home, ".local", "share")
        env["XDG_CACHE_HOME"] = os.path.join(home, ".cache")
    if path_prefix:
        env["PATH"] = path_prefix + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    return env


_BASH_DRIVER = r'''
source "$1"
shift
if [[ -n $COMPLETION_FILE ]]; then
    source "$COMPLETION_FILE"
else
    __load_completion redlock || { echo "bash-completion found no completion for redlock" >&2; exit 3; }
fi
COMP_WORDS=("$@")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE="$*"
COMP_POINT=${#COMP_LINE}
COMPREPLY=()
spec=$(complete -p redlock) || exit 3
fn=$(sed -n 's/.*-F \([^ ]*\) .*/\1/p' <<<"$spec")
"$fn" redlock "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}" 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}"
'''


def bash_complete(test, words, completion_file=os.path.join(COMPLETIONS, "redlock.bash"),
                  env=None, timeout=30):
    """Candidates bash offers for the command line `words` (the last one is being
    completed). With completion_file=None, bash-completion's own loader must find the
    completion (through XDG_DATA_DIRS in `env`)."""
    bash = require_tool(test, "bash")
    loader = require_bash_completion(test)
    env = dict(env or clean_env())
    env["COMPLETION_FILE"] = completion_file or ""
    result = run([bash, "--norc", "--noprofile", "-c", _BASH_DRIVER, "bash", loader, *words],
                 timeout=timeout, env=env)
    return [line for line in result.stdout.splitlines() if line]


def fish_complete(test, line, env=None, source=None, timeout=30):
    """Candidates fish offers for `line` (`complete -C`), the names only."""
    fish = require_tool(test, "fish")
    source = os.path.join(COMPLETIONS, "redlock.fish") if source is None else source
    script = (f"source {shlex_quote(source)}; " if source else "") + \
        f"complete -C {shlex_quote(line)}"
    result = run([fish, "-c", script], timeout=timeout, env=env or clean_env())
    return [c.split("\t")[0] for c in result.stdout.splitlines() if c]


def shlex_quote(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def zsh_complete(test, line, fpath_dir=COMPLETIONS, env=None, timeout=30):
    """Candidates zsh's completion system offers for `line` followed by Tab: an
    interactive `zsh -f` in a pseudo-terminal, compinit with fpath_dir first, and a
    compadd wrapper that records every match it adds."""
    zsh = require_tool(test, "zsh")
    with tempfile.TemporaryDirectory() as tmp:
        hits = os.path.join(tmp, "hits")
        rc = os.path.join(tmp, "rc.zsh")
        with open(rc, "w") as f:
            f.write(f"""
PROMPT='' RPROMPT='' PS2=''
fpath=({shlex_quote(fpath_dir)} $fpath)
autoload -Uz compinit && compinit -u -d {shlex_quote(os.path.join(tmp, 'zcompdump'))}
compadd() {{
  # Calls that only collect matches (-O/-A/-D) are internal; pass them through.
  if [[ ${{@[1,(i)(-|--)]}} == *-(O|A|D)\\ * ]]; then builtin compadd "$@"; return $?; fi
  local -a __hits
  builtin compadd -A __hits "$@"
  (( $#__hits )) && print -rl -- $__hits >> {shlex_quote(hits)}
  builtin compadd "$@"
}}
_capture_done() {{ print -r -- __DONE__ >> {shlex_quote(hits)} }}
comppostfuncs=(_capture_done)
zstyle ':completion:*' list-prompt ''
bindkey '^I' complete-word
print -r -- __READY__ >> {shlex_quote(hits)}
""")
        child_env = dict(env or clean_env(home=tmp))
        child_env["TERM"] = "dumb"
        pid, fd = pty.fork()
        if pid == 0:  # the child: nothing but exec
            os.execve(zsh, [zsh, "-f", "-i"], child_env)

        def wait_for(marker, deadline):
            while time.monotonic() < deadline:
                ready, _, _ = select.select([fd], [], [], 0.1)
                if ready:
                    try:
                        os.read(fd, 65536)  # drain the terminal so zsh never blocks
                    except OSError:
                        return False
                if os.path.exists(hits):
                    with open(hits) as h:
                        if marker in h.read():
                            return True
            return False

        try:
            deadline = time.monotonic() + timeout
            os.write(fd, f"source {shlex_quote(rc)}\n".encode())
            if not wait_for("__READY__", deadline):
                raise AssertionError("zsh did not start in time")
            open(hits, "w").close()
            os.write(fd, line.encode() + b"\t")
            if not wait_for("__DONE__", deadline):
                raise AssertionError(f"zsh completion of {line!r} did not finish in time")
            with open(hits) as h:
                return [x for x in h.read().splitlines() if x != "__DONE__"]
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(fd)
