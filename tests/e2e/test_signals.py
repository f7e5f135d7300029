"""Signals to redlock, redlock's own death, and what PROGRAM leaves behind."""

import os
import pty
import select
import signal
import time
import unittest

import redlock_e2e
from redlock_e2e import (SLACK, E2ETest, kill_quietly, pid_alive, read_pid_file,
                         wait_until)

# PROGRAM that traps $3, records it in $1 and exits 7; its pid goes to $2 once the trap
# is in place.
TRAP_SCRIPT = r'''
trap 'echo "$3" > "$1"; exit 7' "$3"
echo $$ > "$2.tmp" && mv "$2.tmp" "$2"
while :; do sleep 0.05; done
'''


def signal_blocked(pid, sig):
    """True when process `pid` blocks signal `sig` (SigBlk in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigBlk:"):
                    return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    except FileNotFoundError:
        pass
    return False


class SignalsTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def start(self, name, script, *script_args, run_args=()):
        return self.start_redlock(["-s", self.url, "run", "-k", name, *run_args, "--",
                                   "sh", "-c", script, "sh", *script_args])

    def test_a_signal_to_redlock_reaches_program_and_its_status_is_returned(self):
        # USR1, USR2 and ALRM used to kill redlock by their default action, leaving PROGRAM
        # to the watchdog's SIGKILL and the lock to its TTL.
        for sig in ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "ALRM"):
            with self.subTest(signal=sig):
                trapped, pid_file = self.path(f"trapped-{sig}"), self.path(f"pid-{sig}")
                proc = self.start("sig", TRAP_SCRIPT, trapped, pid_file, sig)
                self.kill_at_cleanup(read_pid_file(pid_file, proc=proc))
                self.assertIsNotNone(self.server.command("GET", "lock:sig"))
                proc.send_signal(getattr(signal, "SIG" + sig))
                self.assertEqual(proc.wait(30.0), 7, proc.stderr)
                with open(trapped) as f:
                    self.assertEqual(f.read(), sig + "\n")
                self.assertKeyGone(self.server, "lock:sig")

    def test_program_killed_by_the_forwarded_signal_gives_128_plus_n(self):
        pid_file = self.path("pid")
        proc = self.start("term", 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 100',
                          pid_file)
        pid = read_pid_file(pid_file, proc=proc)
        self.kill_at_cleanup(pid)
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(30.0), 128 + signal.SIGTERM, proc.stderr)
        self.assertFalse(pid_alive(pid))
        self.assertKeyGone(self.server, "lock:term")

    def test_program_dies_when_redlock_is_killed(self):
        pid_file = self.path("pid")
        proc = self.start("killed", 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 100',
                          pid_file)
        pid = read_pid_file(pid_file, proc=proc)
        self.kill_at_cleanup(pid)
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10.0), -signal.SIGKILL)
        wait_until(lambda: not pid_alive(pid), timeout=10.0,
                   message="PROGRAM to die with redlock")

    def test_what_program_started_dies_when_redlock_is_killed(self):
        # The kernel only kills PROGRAM itself (PR_SET_PDEATHSIG); a script's running
        # command is stopped by redlock's watchdog, a child in its own session.
        pid_file = self.path("pid")
        proc = self.start("killed-tree",
                          'sleep 100 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"; wait', pid_file)
        grandchild = read_pid_file(pid_file, proc=proc)
        self.kill_at_cleanup(grandchild)

        def watchdog_started():
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                # fields: state ppid pgrp session ...
                if int(fields[1]) == proc.pid and int(fields[3]) == int(entry):
                    return True
            return False

        wait_until(watchdog_started, timeout=10.0, message="redlock's watchdog to start",
                   proc=proc)
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10.0), -signal.SIGKILL)
        wait_until(lambda: not pid_alive(grandchild), timeout=10.0,
                   message="the process PROGRAM started to die with redlock")

    def test_a_stopped_program_still_ends_on_a_forwarded_signal(self):
        # PROGRAM stopped (e.g. SIGTTIN from a background read): TERM alone would stay
        # pending for ever with the lock held; redlock continues it after forwarding.
        pid_file = self.path("pid")
        proc = self.start("stopped", 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; kill -STOP $$; '
                          'sleep 100', pid_file)
        pid = read_pid_file(pid_file, proc=proc)
        self.kill_at_cleanup(pid)

        def stopped():
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"

        wait_until(stopped, timeout=10.0, message="PROGRAM to stop", proc=proc)
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(30.0), 128 + signal.SIGTERM, proc.stderr)
        self.assertKeyGone(self.server, "lock:stopped")

    def test_a_forwarded_signal_while_waiting_ends_redlock_with_128_plus_n(self):
        holder = self.holder(["-k", "waited"], global_args=["-s", self.url]).wait_ready()
        marker = self.path("ran")
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
            with self.subTest(signal=sig.name):
                waiter = self.start_redlock(["-s", self.url, "run", "-k", "waited", "--",
                                             "touch", marker])
                # Blocked means it reads signals from its signalfd: it is past start-up.
                wait_until(lambda: signal_blocked(waiter.pid, sig), timeout=10.0,
                           message=f"redlock to block {sig.name}", proc=waiter)
                waiter.send_signal(sig)
                self.assertEqual(waiter.wait(30.0), 128 + sig, waiter.stderr)
                self.assertFalse(os.path.exists(marker))
                self.assertEqual(self.server.command("GET", "lock:waited"), holder.token)
        self.assertEqual(holder.release(), 0)

    def test_a_closed_stderr_does_not_kill_redlock_while_it_holds_the_lock(self):
        # redlock -v ... 2>&1 | true: writes to stderr fail with EPIPE; no SIGPIPE death
        # leaving the lock held.
        import subprocess
        cmd = (f'"$0" -v -s {self.url} run -k piped -t 1s -- sleep 1.5 2>&1 | true; '
               'exit ${PIPESTATUS[0]}')
        r = subprocess.run(["bash", "-c", cmd, redlock_e2e.REDLOCK_BIN], timeout=60,
                           env=self.env(), cwd=self.tmp)
        self.assertEqual(r.returncode, 0)
        self.assertKeyGone(self.server, "lock:piped")

    def assert_leftover_stopped(self, script, run_args=(), expected_status=0):
        """PROGRAM starts a background process, writes its pid to $1 and exits; our choice
        (documented) is that redlock stops such leftovers before releasing the lock."""
        leftover_file = self.path("leftover")
        proc = self.start("leftover", script, leftover_file, run_args=run_args)
        status = proc.wait(60.0)
        leftover = read_pid_file(leftover_file, timeout=1.0)
        self.kill_at_cleanup(leftover)
        self.assertEqual(status, expected_status, proc.stderr)
        # redlock released the lock before exiting, so the leftover must be gone already.
        self.assertFalse(pid_alive(leftover), "a process PROGRAM left behind outlived the lock")
        self.assertKeyGone(self.server, "lock:leftover")

    def test_processes_left_behind_by_program_are_stopped_before_release(self):
        self.assert_leftover_stopped('sleep 100 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"')

    def test_program_status_is_kept_when_it_leaves_processes_behind(self):
        self.assert_leftover_stopped(
            'sleep 100 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"; exit 5', expected_status=5)

    def test_a_leftover_that_ignores_sigterm_is_killed(self):
        self.assert_leftover_stopped(
            '(trap "" TERM; exec sleep 100) & echo $! > "$1.tmp" && mv "$1.tmp" "$1"',
            run_args=("-t", "3s"))

    def test_a_leftover_in_its_own_session_is_stopped_too(self):
        # A daemon-style leftover: its own session and process group, parent gone.
        self.assert_leftover_stopped(
            '(setsid sh -c \'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 100\' '
            'sh "$1" &) ; while [ ! -e "$1" ]; do sleep 0.01; done')

    def test_signal_while_a_leftover_runs_still_stops_everything(self):
        pid_file, leftover_file = self.path("pid"), self.path("leftover")
        proc = self.start(
            "both", 'sleep 100 & echo $! > "$2.tmp" && mv "$2.tmp" "$2"; '
                    'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 100',
            pid_file, leftover_file)
        pid = read_pid_file(pid_file, proc=proc)
        leftover = read_pid_file(leftover_file, proc=proc)
        self.kill_at_cleanup(pid)
        self.kill_at_cleanup(leftover)
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(60.0), 128 + signal.SIGTERM, proc.stderr)
        self.assertFalse(pid_alive(pid))
        self.assertFalse(pid_alive(leftover))
        self.assertKeyGone(self.server, "lock:both")


class PtyTest(E2ETest):
    """Helpers for tests on a pseudo-terminal."""

    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def spawn_on_pty(self, args):
        """Runs redlock as the session leader of a new pty; returns (pid, master fd)."""
        argv = [redlock_e2e.REDLOCK_BIN] + args
        env = self.env()
        pid, fd = pty.fork()
        if pid == 0:  # child: only exec (or die)
            try:
                redlock_e2e._die_with_parent()
                os.chdir(self.tmp)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.addCleanup(os.close, fd)
        self.addCleanup(kill_quietly, pid)
        self._pty_output = b""
        return pid, fd

    def read_until(self, fd, text, timeout=15.0):
        deadline = time.monotonic() + timeout * SLACK
        while text.encode() not in self._pty_output:
            left = deadline - time.monotonic()
            if left <= 0:
                self.fail(f"no {text!r} on the terminal; got {self._pty_output!r}")
            ready, _, _ = select.select([fd], [], [], min(left, 0.1))
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the other side closed
                    chunk = b""
                if not chunk:
                    self.fail(f"terminal closed before {text!r}; got {self._pty_output!r}")
                self._pty_output += chunk
        return self._pty_output

    def wait_status(self, pid, fd, timeout=30.0):
        """Waits for the pty child while draining its output; returns its exit code."""
        deadline = time.monotonic() + timeout * SLACK
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() > deadline:
                self.fail(f"redlock on the terminal did not exit; output {self._pty_output!r}")
            ready, _, _ = select.select([fd], [], [], 0.01)
            if ready:  # drain, so a full pty buffer cannot block it
                try:
                    self._pty_output += os.read(fd, 4096)
                except OSError:
                    time.sleep(0.01)



class TerminalTest(PtyTest):
    """redlock started on a terminal, as from an interactive shell."""

    def test_program_gets_the_terminal(self):
        pid, fd = self.spawn_on_pty(
            ["-s", self.url, "run", "-k", "tty", "--", "sh", "-c",
             'if [ -t 0 ] && [ -t 1 ]; then echo tty-ok; else echo no-tty; fi; read line; '
             'echo "got:$line"'])
        self.read_until(fd, "tty-ok")
        os.write(fd, b"typed\n")
        self.read_until(fd, "got:typed")
        self.assertEqual(self.wait_status(pid, fd), 0)
        self.assertKeyGone(self.server, "lock:tty")

    def test_ctrl_c_on_the_terminal_stops_program_and_redlock(self):
        pid_file = self.path("pid")
        pid, fd = self.spawn_on_pty(
            ["-s", self.url, "run", "-k", "ctrlc", "--", "sh", "-c",
             'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; echo ready; exec sleep 100', "sh",
             pid_file])
        self.read_until(fd, "ready")
        program = read_pid_file(pid_file)
        self.kill_at_cleanup(program)
        os.write(fd, b"\x03")  # the terminal's INTR character
        self.assertEqual(self.wait_status(pid, fd), 128 + signal.SIGINT)
        self.assertFalse(pid_alive(program))
        self.assertKeyGone(self.server, "lock:ctrlc")


class JobControlTest(PtyTest):
    """redlock inside an interactive shell on a pty: in a pipeline, and as a background
    job brought to the foreground. PROGRAM reading the terminal must never be left stopped
    (holding the lock) because redlock's job was not its own."""

    def spawn_shell(self):
        env = self.env({"PS1": "$ ", "TERM": "dumb"})
        pid, fd = pty.fork()
        if pid == 0:
            try:
                redlock_e2e._die_with_parent()
                os.chdir(self.tmp)
                os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"], env)
            finally:
                os._exit(127)
        self.addCleanup(os.close, fd)
        self.addCleanup(kill_quietly, pid)
        self._pty_output = b""
        os.write(fd, b"echo shell-$((6*7))\n")
        self.read_until(fd, "shell-42")
        return pid, fd

    def redlock_line(self, name, tail):
        program = "sh -c 'read a; echo \"got:$a\"'"
        return (f"{redlock_e2e.REDLOCK_BIN} -s {self.url} run -k {name} -- {program}"
                f"{tail}\n").encode()

    def holder_pid(self, name):
        def pid():
            meta = self.server.command("HGET", "{lock:" + name + "}:meta", "pid")
            return int(meta) if meta else None
        return wait_until(pid, 15, message="the lock to be taken")

    def test_program_in_a_pipeline_can_read_the_terminal(self):
        shell, fd = self.spawn_shell()
        os.write(fd, self.redlock_line("pipe", " | cat; echo \"status:$?\""))
        self.holder_pid("pipe")
        os.write(fd, b"typed\n")
        self.read_until(fd, "got:typed")
        self.read_until(fd, "status:0")
        self.assertKeyGone(self.server, "lock:pipe")
        os.write(fd, b"exit\n")
        self.wait_status(shell, fd)

    def test_a_background_job_reading_the_terminal_stops_and_fg_resumes_it(self):
        shell, fd = self.spawn_shell()
        os.write(fd, self.redlock_line("bg", " &"))
        redlock = self.holder_pid("bg")

        def stopped():
            with open(f"/proc/{redlock}/stat", "rb") as f:
                stat = f.read()
            return stat[stat.rindex(b")") + 2:][:1] == b"T"
        # The shell must see the job stopped (as it would PROGRAM alone), not running.
        wait_until(stopped, 15, message="redlock to stop with its PROGRAM")
        os.write(fd, b"fg\n")
        os.write(fd, b"typed\n")
        self.read_until(fd, "got:typed")
        os.write(fd, b"echo \"status:$?\"\n")
        self.read_until(fd, "status:0")
        self.assertKeyGone(self.server, "lock:bg")
        os.write(fd, b"exit\n")
        self.wait_status(shell, fd)


if __name__ == "__main__":
    unittest.main(verbosity=2)
