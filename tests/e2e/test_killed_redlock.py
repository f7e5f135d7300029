"""However redlock dies, nothing PROGRAM started runs on once the lease can expire.

The oracle is the fault suite's: no process of PROGRAM's tree is alive at a time another
holder holds the lock. Each test starts a holder whose PROGRAM leaves processes in other
process groups and sessions, kills redlock the way the test names (SIGKILL, a kill of
every process named "redlock", the OOM killer's kill of every process sharing redlock's
memory, a crash), and lets a second run take the lock: its PROGRAM looks for the first
one's processes and must find none alive.
"""

import ctypes
import fcntl
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import unittest

from redlock_e2e import (REDLOCK_BIN, E2ETest, entries_of, kill_quietly, pid_alive, read_pid_file,
                         record_of, wait_until)

# PROGRAM for the first holder: a child that moves to a process group of its own (what
# timeout(1), `set -m` or any setpgid does), a daemon in a session of its own (setsid),
# and a plain background child; every pid goes to a file in $1, then it waits for ever.
TREE = r'''
d=$1
PYTHON -c 'import os, sys, time
os.setpgid(0, 0)
open(sys.argv[1] + ".tmp", "w").write("%d\n" % os.getpid())
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)' "$d/group" &
SESSION_DAEMON
sleep 600 &
echo $! > "$d/child.tmp" && mv "$d/child.tmp" "$d/child"
echo $$ > "$d/program.tmp" && mv "$d/program.tmp" "$d/program"
wait
'''

DAEMON = (r'''setsid sh -c 'echo $$ > "$1/daemon.tmp" && mv "$1/daemon.tmp" "$1/daemon"; '''
          r'''exec sleep 600' sh "$d" &''')

# PROGRAM for the second holder: which of the pids in the files of $1 are still alive (a
# zombie is dead, unless it is a leader whose other threads live on).
CHECK = r'''
for f in "$1"/program "$1"/child "$1"/group "$1"/daemon "$1"/zl; do
    [ -e "$f" ] || continue
    p=$(cat "$f")
    s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1)
    t=$(sed -n 's/^Threads:[[:space:]]*//p' /proc/$p/status 2>/dev/null)
    if [ -n "$s" ] && { [ "$s" != Z ] || [ "${t:-1}" -gt 1 ]; }; then
        echo "alive: $(basename "$f") $p"
    fi
done
echo checked
'''

# A process that leaves PROGRAM's process group (as timeout(1) does) and whose main thread
# then ends with pthread_exit, an ordinary idiom: /proc shows its leader as a zombie while
# its other thread appends a line to $1/beat every 100 ms. Its pid goes to $1/zl.
ZOMBIE_LEADER_C = r'''
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static char beat[4096];

static void *beating(void *unused) {
    (void)unused;
    for (;;) {
        FILE *f = fopen(beat, "a");
        if (f) {
            fputs("beat\n", f);
            fclose(f);
        }
        usleep(100000);
    }
    return NULL;
}

int main(int argc, char **argv) {
    char tmp[4096], done[4096];
    if (argc != 2)
        return 2;
    snprintf(beat, sizeof beat, "%s/beat", argv[1]);
    snprintf(tmp, sizeof tmp, "%s/zl.tmp", argv[1]);
    snprintf(done, sizeof done, "%s/zl", argv[1]);
    setpgid(0, 0);
    pthread_t thread;
    if (pthread_create(&thread, NULL, beating, NULL) != 0)
        return 1;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return 1;
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    rename(tmp, done);
    pthread_exit(NULL);
}
'''

# PROGRAMs for the terminal tests: a loop that touches a heartbeat, in a child that leaves
# PROGRAM's process group (as timeout(1) does, or a background job under `set -m`). Their
# pids go to files in $1.
HEARTBEAT = (r'''sh -c 'echo $$ > "$1/loop.tmp" && mv "$1/loop.tmp" "$1/loop"; '''
             r'''while :; do touch "$1/heartbeat"; sleep 0.05; done' sh "$d"''')
LEFT_GROUP = {
    "timeout": 'd=$1\ntimeout 60 ' + HEARTBEAT + ' &\n'
               'echo $$ > "$d/program.tmp" && mv "$d/program.tmp" "$d/program"\nwait\n',
    "set -m": 'd=$1\nset -m\n' + HEARTBEAT + ' &\n'
              'echo $$ > "$d/program.tmp" && mv "$d/program.tmp" "$d/program"\nwait\n',
}


def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name: state, ppid, pgrp, session..."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rindex(b")") + 2:].split()


def voluntary_switches(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0


def kill_with_a_late_watchdog(redlock, dog, gone):
    """SIGKILLs redlock while its watchdog is stopped, and continues the watchdog once
    gone() says redlock is dead and reaped: by then its children have been re-parented, as
    on a loaded machine where the watchdog runs late (a watchdog that happens to run at
    once may still find them below the dying redlock)."""
    os.kill(dog, signal.SIGSTOP)
    try:
        os.kill(redlock, signal.SIGKILL)
        wait_until(gone, 10, message=f"redlock ({redlock}) to be dead and reaped")
    finally:
        os.kill(dog, signal.SIGCONT)


def wait_for_watchdog_to_look(dog, timeout=20):
    """Waits until the watchdog has gone to sleep four more times: it looks at PROGRAM's
    tree at each wake-up, so it has seen what exists now."""
    first = voluntary_switches(dog)
    wait_until(lambda: voluntary_switches(dog) >= first + 4, timeout,
               message="the watchdog to look at PROGRAM's tree again")


_KCMP_VM = 1
_KCMP_SYSCALL = {"x86_64": 312, "aarch64": 272}.get(platform.machine())


def shares_memory(a, b):
    """Whether processes a and b share one address space (kcmp(2), KCMP_VM): the OOM
    killer kills every process that shares its victim's."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(_KCMP_SYSCALL, a, b, _KCMP_VM, 0, 0) == 0


def children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def cgroup_directory(pid):
    """Where process `pid`'s cgroup v2 is in the file system."""
    with open(f"/proc/{pid}/cgroup") as f:
        path = next(line[3:].strip() for line in f if line.startswith("0::"))
    with open("/proc/self/mountinfo") as f:
        mount = next(line.split()[4] for line in f if " - cgroup2 " in line)
    return mount + path


def compile_c(test, source, name):
    """Builds a C program for `test` with cc, or skips the test without one."""
    cc = shutil.which("cc")
    if not cc:
        test.skipTest("no C compiler (cc) to build the test's helper program")
    d = test.mkdtemp("cc-")
    with open(os.path.join(d, name + ".c"), "w") as f:
        f.write(source)
    exe = os.path.join(d, name)
    subprocess.run([cc, "-O", "-pthread", "-o", exe, exe + ".c"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return exe


def cgroup_populated(path):
    with open(f"{path}/cgroup.events") as f:
        return "populated 1" in f.read().split("\n")


def comm(pid):
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


class KilledRedlockTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.global_args = ["-s", self.server.url()]

    def cgroup_available(self):
        r = self.run_redlock(self.global_args + ["-v", "run", "-k", "probe", "--", "true"])
        self.assertStatus(r, 0)
        return "runs in the cgroup" in r.stderr

    def start_tree(self, name, env=None, daemon=True):
        d = self.mkdtemp("tree-")
        script = TREE.replace("SESSION_DAEMON", DAEMON if daemon else "").replace(
            "PYTHON", shlex.quote(sys.executable))
        proc = self.start_redlock(self.global_args + ["run", "-k", name, "-t", "2s", "--",
                                                      "sh", "-c", script, "sh", d], env=env)
        pids = {}
        for what in ["program", "child", "group"] + (["daemon"] if daemon else []):
            pids[what] = read_pid_file(f"{d}/{what}", proc=proc)
            self.kill_at_cleanup(pids[what])
        return proc, d, pids

    def watchdog_of(self, proc, pids):
        dogs = [p for p in children(proc.pid) if p not in pids.values()]
        self.assertEqual(len(dogs), 1, f"children of redlock: {children(proc.pid)}")
        self.kill_at_cleanup(dogs[0])
        return dogs[0]

    def assertNothingRunsUnderTheNextHolder(self, name, d, env=None):
        second = self.run_redlock(self.global_args + ["run", "-k", name, "-w", "30s", "--",
                                                      "sh", "-c", CHECK, "sh", d], env=env)
        self.assertStatus(second, 0)
        self.assertEqual(second.stdout.strip(), "checked",
                         "the first holder's processes ran under the second holder")

    def test_sigkill_of_redlock_leaves_nothing_of_program_running(self):
        proc, d, pids = self.start_tree("sigkill")
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        self.assertNothingRunsUnderTheNextHolder("sigkill", d)

    def test_without_a_cgroup_what_changed_process_group_dies_with_redlock(self):
        env = self.env({"REDLOCK_NO_CGROUP": "1"})
        proc, d, pids = self.start_tree("nocgroup", env=env, daemon=False)
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        self.assertNothingRunsUnderTheNextHolder("nocgroup", d, env=env)

    def test_without_a_cgroup_even_a_setsid_daemon_dies_with_redlock(self):
        # The watchdog looks at redlock's tree (a child subreaper's: the daemon is in it)
        # every few tens of milliseconds, and kills what it saw once redlock is gone.
        env = self.env({"REDLOCK_NO_CGROUP": "1"})
        proc, d, pids = self.start_tree("nocgdaemon", env=env)
        dog = self.watchdog_of(proc, pids)
        wait_for_watchdog_to_look(dog)
        kill_with_a_late_watchdog(proc.pid, dog, lambda: proc.poll() is not None)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        for what, pid in pids.items():
            wait_until(lambda: not pid_alive(pid), 10, message=f"{what} ({pid}) to die")
        self.assertNothingRunsUnderTheNextHolder("nocgdaemon", d, env=env)

    def test_without_a_cgroup_a_process_whose_main_thread_ended_is_alive_till_killed(self):
        # Its leader shows as a zombie in /proc while a thread works on; it left PROGRAM's
        # process group. A watchdog that took every zombie for dead neither killed nor
        # counted it, and the lock went to the next holder at once, under its beat.
        env = self.env({"REDLOCK_NO_CGROUP": "1"})
        zl = compile_c(self, ZOMBIE_LEADER_C, "zl")
        d = self.mkdtemp("zl-")
        program = 'echo $$ > "$2/program.tmp" && mv "$2/program.tmp" "$2/program"; "$1" "$2"; true'
        proc = self.start_redlock(self.global_args + ["run", "-k", "zl", "-t", "60s", "--",
                                                      "sh", "-c", program, "sh", zl, d], env=env)
        pids = {what: read_pid_file(f"{d}/{what}", proc=proc) for what in ("program", "zl")}
        for pid in pids.values():
            self.kill_at_cleanup(pid)
        # The case at hand: a zombie leader, its thread beating, outside PROGRAM's group.
        wait_until(lambda: stat_fields(pids["zl"])[0] == b"Z", 10,
                   message="the helper's main thread to end")
        self.assertTrue(pid_alive(pids["zl"]))
        self.assertNotEqual(stat_fields(pids["zl"])[2], stat_fields(pids["program"])[2])
        dog = self.watchdog_of(proc, pids)
        wait_for_watchdog_to_look(dog)
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        self.assertNothingRunsUnderTheNextHolder("zl", d, env=env)

    def test_with_a_terminal_and_no_cgroup_a_child_that_left_the_group_dies_with_redlock(self):
        # On a terminal PROGRAM stays in the terminal's session (for job control), so
        # neither its session nor its group holds what timeout(1) or `set -m` started.
        if not shutil.which("script"):
            self.skipTest("script(1) is missing (util-linux): no terminal to run redlock on")
        env = self.env({"REDLOCK_NO_CGROUP": "1"})
        for name, tree in LEFT_GROUP.items():
            with self.subTest(tree=name):
                d = self.mkdtemp("term-")
                command = shlex.join([REDLOCK_BIN, *self.global_args, "run", "-k", "term",
                                      "-t", "2s", "--", "sh", "-c", tree, "sh", d])
                term = subprocess.Popen(["script", "-qefc", command + "; sleep 60", "/dev/null"],
                                        env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                self.addCleanup(term.wait)
                self.addCleanup(term.kill)
                program = read_pid_file(f"{d}/program", 15)
                loop = read_pid_file(f"{d}/loop", 15)
                self.kill_at_cleanup(loop)
                redlock = int(stat_fields(program)[1])
                # The case at hand: PROGRAM has no session of its own, the loop left its group.
                self.assertNotEqual(int(stat_fields(program)[3]), program)
                self.assertNotEqual(stat_fields(loop)[2], stat_fields(program)[2])
                dogs = [p for p in children(redlock) if p != program]
                self.assertEqual(len(dogs), 1, f"children of redlock: {children(redlock)}")
                self.kill_at_cleanup(dogs[0])
                wait_for_watchdog_to_look(dogs[0])
                kill_with_a_late_watchdog(redlock, dogs[0],
                                          lambda: not os.path.exists(f"/proc/{redlock}"))
                # Both are signalled by the watchdog's one pass, in no set order (and a
                # sanitized build's PROGRAM takes its time to go): each is waited for.
                for what, pid in ((f"the heartbeat loop ({name})", loop), ("PROGRAM", program)):
                    wait_until(lambda: not pid_alive(pid), 10,
                               message=f"{what} to die with redlock")
                self.assertNothingRunsUnderTheNextHolder("term", d, env=env)

    def test_a_kill_of_every_process_named_redlock_leaves_the_watchdog_to_act(self):
        # `killall -9 redlock`, `pkill -9 redlock`: both match the process name.
        proc, d, pids = self.start_tree("byname")
        dog = self.watchdog_of(proc, pids)
        self.assertNotIn("redlock", comm(dog))
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) in (proc.pid, dog):
                if "redlock" in comm(int(entry)):
                    kill_quietly(int(entry))
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        self.assertNothingRunsUnderTheNextHolder("byname", d)

    @unittest.skipUnless(_KCMP_SYSCALL, "kcmp(2) number unknown on this machine")
    def test_the_oom_killers_kill_leaves_the_watchdog_to_act(self):
        # The OOM killer kills its victim and every process sharing its memory.
        proc, d, pids = self.start_tree("oom")
        dog = self.watchdog_of(proc, pids)
        self.assertFalse(shares_memory(proc.pid, dog), "the watchdog shares redlock's memory")
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        self.assertNothingRunsUnderTheNextHolder("oom", d)

    def test_a_crash_of_redlock_leaves_nothing_of_program_running(self):
        # SIGABRT, what a failed assertion raises (ASan takes SIGSEGV over and aborts).
        proc, d, pids = self.start_tree("crash")
        proc.send_signal(signal.SIGABRT)
        self.assertEqual(proc.wait(10), -signal.SIGABRT)
        self.assertNothingRunsUnderTheNextHolder("crash", d)

    def test_with_a_cgroup_even_a_daemon_left_behind_is_gone_before_the_lease_can_expire(self):
        if not self.cgroup_available():
            self.skipTest("redlock cannot make a cgroup here")
        proc, d, pids = self.start_tree("daemon")
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        # Gone at once, long before the 2 s lease could expire.
        for what, pid in pids.items():
            wait_until(lambda: not pid_alive(pid), 1.5, message=f"{what} ({pid}) to die")

    def test_the_cgroup_is_removed_after_the_run(self):
        if not self.cgroup_available():
            self.skipTest("redlock cannot make a cgroup here")
        r = self.run_redlock(self.global_args + ["-v", "run", "-k", "cg", "--", "sh", "-c",
                                                 "grep '^0::' /proc/self/cgroup"])
        self.assertStatus(r, 0)
        path = r.stdout.strip()[3:]
        self.assertRegex(path, r"/redlock-\d+$")
        with open("/proc/self/mountinfo") as f:
            mount = [line.split()[4] for line in f if " - cgroup2 " in line][0]
        self.assertFalse(os.path.exists(mount + path), f"{mount + path} left behind")

    def assertCgroupsGoAway(self, paths):
        for path in paths:
            try:
                wait_until(lambda: not os.path.exists(path), 10, message=f"{path} to go")
            except AssertionError:
                self.fail(f"{path} left behind")

    def test_a_redlock_killed_during_its_release_leaves_no_cgroup(self):
        if not self.cgroup_available():
            self.skipTest("redlock cannot make a cgroup here")
        holder = self.holder(["-k", "rel", "-t", "10s"], global_args=self.global_args)
        proc, program = holder.proc, holder.wait_ready().program_pid
        group = cgroup_directory(program)
        self.assertRegex(group, rf"/redlock-{proc.pid}$")
        # The release waits on a frozen server: PROGRAM has ended and been reaped, and
        # redlock is still releasing when it is killed.
        self.server.freeze()
        self.addCleanup(self.server.thaw)
        open(holder.path("go"), "w").close()
        wait_until(lambda: not os.path.exists(f"/proc/{program}"), 10,
                   message="PROGRAM to end and be reaped", proc=proc)
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        self.assertCgroupsGoAway([group])

    def test_a_run_nested_in_another_names_run_leaves_no_cgroup_when_the_outer_is_killed(self):
        # The inner run's cgroup is inside the outer one's, and its watchdog dies in the
        # outer watchdog's cgroup.kill: the outer one removes both, deepest first.
        if not self.cgroup_available():
            self.skipTest("redlock cannot make a cgroup here")
        d = self.mkdtemp("nested-")
        inner = ('echo $$ > "$1/pid.tmp" && mv "$1/pid.tmp" "$1/pid"; exec sleep 600')
        proc = self.start_redlock(self.global_args + [
            "run", "-k", "outer", "-t", "10s", "--", REDLOCK_BIN, *self.global_args, "run",
            "-k", "inner", "-t", "10s", "--", "sh", "-c", inner, "sh", d])
        program = read_pid_file(f"{d}/pid", proc=proc)
        self.kill_at_cleanup(program)
        group = cgroup_directory(program)
        outer = os.path.dirname(group)
        self.assertRegex(outer, rf"/redlock-{proc.pid}$")
        self.assertRegex(group, r"/redlock-\d+$")
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        wait_until(lambda: not pid_alive(program), 10, message="the inner PROGRAM to die")
        self.assertCgroupsGoAway([group, outer])

    def leave_a_cgroup_behind(self, name):
        """Kills a holder of `name` together with its watchdog (redlock stopped first, so
        that it cannot act on the watchdog's death): nothing is left to remove PROGRAM's
        cgroup, which PROGRAM's death (PR_SET_PDEATHSIG) leaves empty. The test holds it
        as a live run would (a shared flock) until it lets go of it: let_go()."""
        holder = self.holder(["-k", name, "-t", "10s"], global_args=self.global_args)
        proc, program = holder.proc, holder.wait_ready().program_pid
        group = cgroup_directory(program)
        self.assertRegex(group, rf"/redlock-{proc.pid}$")
        held = os.open(group, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(held, fcntl.LOCK_SH)
        dog = self.watchdog_of(proc, {"program": program})
        proc.send_signal(signal.SIGSTOP)
        os.kill(dog, signal.SIGKILL)
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        wait_until(lambda: not pid_alive(dog) and not pid_alive(program), 10,
                   message="the watchdog and PROGRAM to die")
        wait_until(lambda: not cgroup_populated(group), 10, message=f"{group} to be empty")
        self.assertTrue(os.path.isdir(group))
        return group, lambda: os.close(held)

    def test_the_next_run_removes_the_cgroup_of_a_run_killed_with_its_watchdog(self):
        if not self.cgroup_available():
            self.skipTest("redlock cannot make a cgroup here")
        # The next run looks beside its own cgroup: none of other tests' runs are there.
        parent = self.run_in_a_cgroup_of_its_own(cgroup_directory(os.getpid()))
        left, let_go = self.leave_a_cgroup_behind("both")
        # A live run's cgroup is empty too while it waits for its lock: it stays.
        holder = self.holder(["-k", "busy", "-t", "10s"], global_args=self.global_args)
        holder.wait_ready()
        waiter = self.start_redlock(self.global_args + ["run", "-k", "busy", "--", "true"])
        waiting = os.path.join(parent, f"redlock-{waiter.pid}")
        wait_until(lambda: os.path.isdir(waiting), 10, proc=waiter,
                   message="the waiter's cgroup")
        # So is one of a run in another pid namespace, whose number is no pid here: its
        # redlock and watchdog hold it (a shared flock), as this test does.
        gone = subprocess.Popen(["true"])
        gone.wait()
        foreign = os.path.join(parent, f"redlock-{gone.pid}")
        os.mkdir(foreign)
        held = os.open(foreign, os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, held)
        fcntl.flock(held, fcntl.LOCK_SH)
        let_go()
        r = self.run_redlock(self.global_args + ["run", "-k", "next", "--", "true"])
        self.assertStatus(r, 0)
        self.assertFalse(os.path.exists(left), f"{left} left behind by the next run")
        self.assertTrue(os.path.isdir(waiting), "a waiting run's cgroup was removed")
        self.assertTrue(os.path.isdir(foreign), "a cgroup held by a live run was removed")
        self.assertEqual(holder.release(), 0)
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)

    def test_reap_removes_the_cgroup_of_a_run_killed_with_its_watchdog(self):
        if not self.cgroup_available():
            self.skipTest("redlock cannot make a cgroup here")
        # Apart from other tests' runs (reap looks everywhere, a run beside its cgroup).
        self.run_in_a_cgroup_of_its_own(cgroup_directory(os.getpid()))
        left, let_go = self.leave_a_cgroup_behind("reaped")
        let_go()
        r = self.run_redlock(self.global_args + ["reap", "--dry-run"])
        self.assertStatus(r, 0)
        self.assertTrue(os.path.isdir(left), "reap --dry-run removed a cgroup")
        r = self.run_redlock(self.global_args + ["reap"])
        self.assertStatus(r, 0)
        self.assertIn("redlock: removed 1 empty cgroup of runs killed with their watchdogs",
                      r.stderr)
        self.assertFalse(os.path.exists(left), f"{left} left behind by reap")

    def test_a_dead_watchdog_makes_redlock_stop_program_and_fail(self):
        proc, d, pids = self.start_tree("nodog")
        dog = self.watchdog_of(proc, pids)
        os.kill(dog, signal.SIGKILL)
        self.assertEqual(proc.wait(30), 70, proc.stderr)
        self.assertIn("the watchdog", proc.stderr)
        self.assertIn("stopping PROGRAM", proc.stderr)
        for what, pid in pids.items():
            self.assertFalse(pid_alive(pid), f"{what} ({pid}) outlived the run")
        self.assertKeyGone(self.server, "lock:nodog")


class KilledInItsReleaseTest(E2ETest):
    """A run is recorded once however its release is interrupted: the releaser sends the
    run's release and history entry again, and a server that has the run's entry already
    (from redlock's own release) keeps it alone, and counts the run once."""

    def test_a_run_killed_while_its_release_waits_on_frozen_servers_is_recorded_once(self):
        servers = [self.redis_server() for _ in range(3)]
        config = self.write_file("c.toml", 'command_timeout = "60s"\n' + "".join(
            f'[[servers]]\nurl = "{s.url()}"\n' for s in servers))
        holder = self.holder(["-k", "job", "-t", "30s"], global_args=["-c", config])
        proc, program = holder.proc, holder.wait_ready().program_pid
        dogs = [p for p in children(proc.pid) if p != program]
        self.assertEqual(len(dogs), 1, f"children of redlock: {children(proc.pid)}")
        releaser = dogs[0]
        self.kill_at_cleanup(releaser)
        # Two of the three frozen: PROGRAM ends, and the release waits for a majority. The
        # server that answers has the run recorded: redlock is in its release.
        for s in servers[1:]:
            s.freeze()
            self.addCleanup(s.thaw)
        open(holder.path("go"), "w").close()
        wait_until(lambda: [e.get("outcome") for e in entries_of(servers[0], "job")] == ["ran"],
                   10, message="the release to reach the server that answers", proc=proc)
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        # The watchdog, now the releaser, releases again with the run's entry; once the
        # servers thaw, each runs both (redlock's, written before it died, and the
        # releaser's), and the releaser hears every answer and exits.
        for s in servers[1:]:
            s.thaw()
        wait_until(lambda: not pid_alive(releaser), 30, message="the releaser to finish")
        for s in servers:
            # Every client gone (the test's own connection aside): their requests have run.
            wait_until(lambda: "connected_clients:1\r" in s.command("INFO", "clients"), 10,
                       message=f"the requests on {s.url()} to run")
            self.assertEqual(s.command("EXISTS", "lock:job"), 0)
            # One entry, the newest; nothing counted (the counters are of the runs before it:
            # a second copy of the entry would have counted the first).
            self.assertEqual(len(entries_of(s, "job")), 1, s.url())
            counted = [k for k in record_of(s, "job") if k.startswith(("r:", "d"))]
            self.assertEqual(counted, [], s.url())
        r = self.run_redlock(["-c", config, "history", "--json", "job"])
        self.assertStatus(r, 0)
        runs = json.loads(r.stdout)["runs"]
        self.assertEqual([(e["outcome"], e["exit_status"]) for e in runs], [("ran", 0)])


if __name__ == "__main__":
    unittest.main()


class QemuUserTest(E2ETest):
    """Under qemu-user (how arm64 containers run on x86_64 hosts) a clone() whose exit
    signal is not SIGCHLD is refused (EINVAL), and the watchdog is such a clone: there it
    starts as a grandchild instead, and still does its work. This machine's own build runs
    under qemu-x86_64-static, which refuses the same."""

    def setUp(self):
        super().setUp()
        self.qemu = shutil.which("qemu-x86_64-static")
        if not self.qemu or platform.machine() != "x86_64":
            self.skipTest("needs qemu-x86_64-static on x86_64 (Debian: qemu-user-static)")
        if any(os.environ.get(v) for v in ("ASAN_OPTIONS", "TSAN_OPTIONS")):
            self.skipTest("qemu-user cannot run a sanitized binary (its shadow memory)")
        self.server = self.redis_server()

    def qemu_redlock(self, words):
        return subprocess.Popen([self.qemu, REDLOCK_BIN, "-s", self.server.url()] + words,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def test_run_works_and_a_killed_redlock_leaves_nothing_running(self):
        p = self.qemu_redlock(["run", "-k", "q", "--", "sh", "-c", "exit 7"])
        out, err = p.communicate(timeout=60)
        self.assertEqual((p.returncode, err), (7, ""))
        d = self.mkdtemp()
        pid_file = os.path.join(d, "pid")
        p = self.qemu_redlock(["run", "-k", "q", "-t", "1m", "--", "sh", "-c",
                               f'echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; '
                               'exec sleep 300'])
        self.addCleanup(kill_quietly, p.pid)
        program = read_pid_file(pid_file, 30)
        self.addCleanup(kill_quietly, program)
        p.kill()
        p.wait(30)
        wait_until(lambda: not pid_alive(program), 30, message="PROGRAM to be killed")
