"""A dead holder frees its lock at once (issue 37).

When redlock dies while holding (SIGKILL, the OOM killer, a crash), its watchdog kills
PROGRAM's tree, proves it gone, and becomes a releaser that releases with the run's token:
a waiting run starts long before the TTL. The holders here take -t 60s and the waiter must
start within 10 s (scaled by REDLOCK_E2E_SLACK): the point is "not the TTL", never a speed
(bench/failover.sh measures that). The oracle for "gone" is a heartbeat: PROGRAM's
setsid and double-forked children touch a file, and the waiter's PROGRAM removes it and
finds it never comes back.
"""

import json
import os
import shutil
import signal
import time

from redlock_e2e import (SLACK, E2ETest, Timeout, free_port, pid_alive, read_pid_file,
                         wait_until)
from test_killed_redlock import (ZOMBIE_LEADER_C, cgroup_directory, children, compile_c,
                                 stat_fields, wait_for_watchdog_to_look)

# PROGRAM of a holder: a daemon in a session of its own (setsid) and a double-forked
# child, both touching $1/heartbeat; then "ready" and a wait for ever.
BEATING = r'''
d=$1
setsid sh -c 'while :; do touch "$1/heartbeat"; sleep 0.02; done' sh "$d" &
( sh -c 'while :; do touch "$1/heartbeat"; sleep 0.02; done' sh "$d" & ) &
while [ ! -e "$d/heartbeat" ]; do sleep 0.01; done
echo $$ > "$d/ready.tmp" && mv "$d/ready.tmp" "$d/ready"
sleep 600
'''

# PROGRAM of the waiter: the heartbeat must be gone for good.
QUIET = r'''
rm -f "$1/heartbeat"
sleep 0.3
if [ -e "$1/heartbeat" ]; then echo beating; else echo quiet; fi
'''

# A daemon that moves itself out of PROGRAM's cgroup into the one named by $2 (as a
# process under `systemd-run --scope` is moved by systemd) and leaves PROGRAM's group and
# session (setsid), then touches $1/heartbeat; its pid goes to $1/escaped.
ESCAPE = r'''
echo $$ > "$2" || exit 1
exec setsid sh -c 'echo $$ > "$1/escaped.tmp" && mv "$1/escaped.tmp" "$1/escaped"
while :; do touch "$1/heartbeat"; sleep 0.02; done' sh "$1"
'''

TTL = "60s"
NOT_THE_TTL = 10.0  # seconds: far below the TTL, generous for a loaded machine


class DeadHolderTest(E2ETest):
    def start_holder(self, global_args, extra=(), env=None):
        d = self.mkdtemp("holder-")
        proc = self.start_redlock(list(global_args) + [
            "run", "-k", "dead", "-t", TTL, *extra, "--", "sh", "-c", BEATING, "sh", d],
            env=env)
        read_pid_file(f"{d}/ready", proc=proc)
        return proc, d

    def start_waiter(self, global_args, d, extra=(), env=None):
        return self.start_redlock(list(global_args) + [
            "run", "-k", "dead", "-w", "120s", *extra, "--", "sh", "-c", QUIET, "sh", d],
            env=env)

    def assertWaiterStartsSoonAfterTheKill(self, holder, waiter, d):
        # The waiter is waiting (a wait-list entry) before the kill.
        wait_until(lambda: "waiting for 'dead'" in waiter.stderr, 15 * SLACK, proc=waiter,
                   message="the waiter to wait")
        holder.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        self.assertEqual(holder.wait(10), -signal.SIGKILL)
        status = waiter.wait(60 * SLACK)
        took = time.monotonic() - killed
        self.assertEqual(status, 0, waiter.stderr)
        self.assertEqual(waiter.stdout.strip(), "quiet",
                         "the killed holder's processes ran on under the next holder")
        self.assertLess(took, NOT_THE_TTL * SLACK, "the waiter waited for the TTL")

    def history(self, global_args, env=None):
        r = self.run_redlock(list(global_args) + ["history", "--json", "dead"], env=env)
        self.assertStatus(r, 0)
        return json.loads(r.stdout)

    def assertKilledEntry(self, global_args, note=False, env=None):
        runs = self.history(global_args, env)["runs"]
        killed = [r for r in runs if r["outcome"] == "killed"]
        self.assertEqual(len(killed), 1, runs)
        if note:
            self.assertIn("not proven gone", killed[0].get("note", ""))
        else:
            self.assertNotIn("note", killed[0])
        return killed[0]

    def test_a_killed_holder_releases_at_once_and_its_tree_is_gone(self):
        server = self.redis_server()
        args = ["-s", server.url()]
        proc, d = self.start_holder(args)
        waiter = self.start_waiter(args, d)
        self.assertWaiterStartsSoonAfterTheKill(proc, waiter, d)
        entry = self.assertKilledEntry(args)
        self.assertEqual(entry["pid"], proc.pid)
        self.assertKeyGone(server, "lock:dead")

    def test_without_a_cgroup_a_killed_holder_releases_when_group_and_session_are_empty(self):
        env = self.env({"REDLOCK_NO_CGROUP": "1"})
        server = self.redis_server()
        args = ["-s", server.url()]
        d = self.mkdtemp("holder-")
        # Everything stays in PROGRAM's session (redlock gives it one): provable.
        program = r'''
d=$1
( sh -c 'while :; do touch "$1/heartbeat"; sleep 0.02; done' sh "$d" & ) &
while [ ! -e "$d/heartbeat" ]; do sleep 0.01; done
: > "$d/ready"; sleep 600
'''
        proc = self.start_redlock(args + ["run", "-k", "dead", "-t", TTL, "--", "sh", "-c",
                                          program, "sh", d], env=env)
        wait_until(lambda: os.path.exists(f"{d}/ready"), 15, proc=proc,
                   message="the holder to start")
        waiter = self.start_waiter(args, d, env=env)
        self.assertWaiterStartsSoonAfterTheKill(proc, waiter, d)
        self.assertKilledEntry(args, env=env)

    def test_a_tree_that_cannot_be_proven_gone_keeps_the_ttl_and_says_why(self):
        # No cgroup and a daemon that left group and session (setsid): what it may have
        # started cannot be followed, so the lock waits for its TTL.
        env = self.env({"REDLOCK_NO_CGROUP": "1"})
        server = self.redis_server()
        args = ["-s", server.url()]
        proc, d = self.start_holder(args, env=env)
        # The watchdog sees the daemon in one of its looks at the tree.
        time.sleep(0.5)
        token = server.command("GET", "lock:dead")
        self.assertTrue(token)
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        wait_until(lambda: any(r["outcome"] == "killed"
                               for r in self.history(args, env)["runs"]),
                   15 * SLACK, message="the killed run's history entry")
        self.assertKilledEntry(args, note=True, env=env)
        self.assertEqual(server.command("GET", "lock:dead"), token)
        self.assertGreater(server.command("PTTL", "lock:dead"), 30_000)

    def start_with_a_cgroup(self, args, program, *words):
        """Starts a holder of 'dead' whose PROGRAM is `program` (sh -c, with a directory
        for its files as $1 and `words` after it) in a cgroup, and waits for its pid in
        $1/program; skips the test where redlock cannot make a cgroup."""
        probe = self.run_redlock(args + ["-v", "run", "-k", "probe", "--", "true"])
        if "runs in the cgroup" not in probe.stderr:
            self.skipTest("redlock cannot make a cgroup here (root and cgroup v2 needed)")
        d = self.mkdtemp("holder-")
        program = 'echo $$ > "$1/program.tmp" && mv "$1/program.tmp" "$1/program"\n' + program
        proc = self.start_redlock(args + ["run", "-k", "dead", "-t", TTL, "--", "sh", "-c",
                                          program, "sh", d, *words])
        program_pid = read_pid_file(f"{d}/program", proc=proc)
        self.assertRegex(cgroup_directory(program_pid), rf"/redlock-{proc.pid}$")
        return proc, d, program_pid

    def assertKillKeepsTheTtlAndKills(self, server, args, proc, program_pid, outside):
        """Kills redlock once its watchdog had time to look at the tree; the lock must keep
        its TTL, with a note that a process left the cgroup, and `outside` must die."""
        dogs = [p for p in children(proc.pid) if p != program_pid]
        self.assertEqual(len(dogs), 1, f"children of redlock: {children(proc.pid)}")
        self.kill_at_cleanup(dogs[0])
        try:
            wait_for_watchdog_to_look(dogs[0], timeout=2)
        except Timeout:
            pass  # a watchdog that does not look at a tree with a cgroup: given the time
        token = server.command("GET", "lock:dead")
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        wait_until(lambda: not pid_alive(outside), 10, message="the process outside to die")
        wait_until(lambda: any(r["outcome"] == "killed" for r in self.history(args)["runs"]),
                   15 * SLACK, message="the killed run's history entry")
        entry = self.assertKilledEntry(args, note=True)
        self.assertIn("left its cgroup", entry["note"])
        self.assertEqual(server.command("GET", "lock:dead"), token)
        self.assertGreater(server.command("PTTL", "lock:dead"), 30_000)

    def test_a_process_that_left_the_cgroup_is_killed_and_the_lock_keeps_the_ttl(self):
        # With a cgroup, cgroup.kill does not reach a process that moved to another
        # cgroup, and an empty cgroup does not prove it gone: what it started since the
        # watchdog's last look cannot be followed, so the lock waits for its TTL.
        server = self.redis_server()
        args = ["-s", server.url()]
        # Outside PROGRAM's cgroup: the one this test (and so redlock) runs in.
        elsewhere = cgroup_directory(os.getpid())
        proc, d, program_pid = self.start_with_a_cgroup(
            args, 'sh -c "$3" sh "$1" "$2/cgroup.procs" & sleep 600', elsewhere, ESCAPE)
        escaped = read_pid_file(f"{d}/escaped", proc=proc)
        self.kill_at_cleanup(escaped)
        # The case at hand: outside PROGRAM's cgroup, process group and session.
        self.assertEqual(cgroup_directory(escaped), elsewhere)
        self.assertNotEqual(stat_fields(escaped)[3], stat_fields(program_pid)[3])
        self.assertKillKeepsTheTtlAndKills(server, args, proc, program_pid, escaped)

    def test_a_zombie_leader_moved_out_of_the_cgroup_keeps_the_lock_for_its_ttl(self):
        # A process whose main thread ended (pthread_exit) is moved to another cgroup by
        # someone else (a service manager): its live thread goes, while its leader's
        # /proc/PID/cgroup and PROGRAM's cgroup.procs still show it where it was.
        server = self.redis_server()
        args = ["-s", server.url()]
        zl = compile_c(self, ZOMBIE_LEADER_C, "zl")
        proc, d, program_pid = self.start_with_a_cgroup(args, '"$2" "$1"; sleep 600', zl)
        leader = read_pid_file(f"{d}/zl", proc=proc)
        self.kill_at_cleanup(leader)
        wait_until(lambda: stat_fields(leader)[0] == b"Z", 10,
                   message="the helper's main thread to end")
        program_cgroup = cgroup_directory(program_pid)
        elsewhere = cgroup_directory(os.getpid())
        with open(f"{elsewhere}/cgroup.procs", "w") as f:
            f.write(f"{leader}\n")
        # The case at hand: its leader's line and PROGRAM's cgroup.procs say "inside".
        self.assertEqual(cgroup_directory(leader), program_cgroup)
        with open(f"{program_cgroup}/cgroup.procs") as f:
            self.assertIn(str(leader), f.read().split())
        self.assertKillKeepsTheTtlAndKills(server, args, proc, program_pid, leader)

    def test_a_killed_permit_holder_frees_its_permit(self):
        server = self.redis_server()
        args = ["-s", server.url()]
        other = self.holder(["-k", "dead", "--limit", "2", "-t", TTL],
                            global_args=args).wait_ready()
        proc, d = self.start_holder(args, ["--limit", "2"])
        waiter = self.start_waiter(args, d, ["--limit", "2"])
        self.assertWaiterStartsSoonAfterTheKill(proc, waiter, d)
        self.assertKilledEntry(args)
        self.assertEqual(other.release(), 0)

    def test_a_killed_holder_of_a_fair_lock_hands_it_to_the_next_in_line(self):
        server = self.redis_server()
        args = ["-s", server.url()]
        proc, d = self.start_holder(args, ["--fair"])
        waiter = self.start_waiter(args, d, ["--fair"])
        self.assertWaiterStartsSoonAfterTheKill(proc, waiter, d)
        self.assertKilledEntry(args)

    def test_a_killed_holder_over_three_servers_releases_on_each(self):
        servers = [self.redis_server() for _ in range(3)]
        args = [a for s in servers for a in ("-s", s.url())]
        proc, d = self.start_holder(args)
        waiter = self.start_waiter(args, d)
        self.assertWaiterStartsSoonAfterTheKill(proc, waiter, d)
        for s in servers:
            self.assertKeyGone(s, "lock:dead")

    def test_a_killed_holder_releases_with_auth(self):
        server = self.redis_server(requirepass="s3cret")
        args = ["-s", f"redis://:s3cret@127.0.0.1:{server.port}"]
        proc, d = self.start_holder(args)
        # The password is in the will, never on the releaser's command line.
        waiter = self.start_waiter(args, d)
        self.assertWaiterStartsSoonAfterTheKill(proc, waiter, d)
        self.assertKilledEntry(args)

    def test_a_killed_holder_releases_over_tls(self):
        if not shutil.which("openssl"):
            self.skipTest("openssl is not installed (scripts/setup.sh installs it)")
        from test_tls import make_certs
        certs = make_certs()
        self.addCleanup(shutil.rmtree, certs, True)
        tls_port = free_port()
        self.redis_server(extra_args=(
            "--tls-port", str(tls_port), "--tls-cert-file", f"{certs}/server.pem",
            "--tls-key-file", f"{certs}/server.key", "--tls-ca-cert-file", f"{certs}/ca.pem",
            "--tls-auth-clients", "no"))
        config = self.write_file("tls.toml", f'tls_ca_file = "{certs}/ca.pem"\n')
        args = ["-c", config, "-s", f"rediss://127.0.0.1:{tls_port}"]
        proc, d = self.start_holder(args)
        waiter = self.start_waiter(args, d)
        self.assertWaiterStartsSoonAfterTheKill(proc, waiter, d)
        self.assertKilledEntry(args)

    def test_a_killed_run_reports_killed_to_its_metrics_file_and_events(self):
        server = self.redis_server()
        args = ["-s", server.url()]
        metrics = self.path("m", "dead.prom")
        os.makedirs(os.path.dirname(metrics))
        events = self.path("events.jsonl")
        proc, d = self.start_holder(args, ["--metrics", metrics, "--events", events])
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)

        def ended():
            if not os.path.exists(events):
                return None
            with open(events) as f:
                lines = [json.loads(line) for line in f if line.strip()]
            return next((e for e in lines if e["event"] == "end"), None)
        wait_until(lambda: ended() is not None, 15 * SLACK, message="the end event")
        end = ended()
        self.assertEqual(end["outcome"], "killed")
        self.assertEqual(end["pid"], proc.pid)
        with open(metrics) as f:
            text = f.read()
        self.assertRegex(text, r'outcome="killed"[^\n]*\} 1')
        self.assertKeyGone(server, "lock:dead")

    def test_a_run_killed_while_acquiring_leaves_no_key_behind(self):
        # The attempt is on its way through a slow proxy when redlock is killed: it lands,
        # and the releaser, whose release follows it, takes it away.
        server = self.redis_server()
        # The scripts are loaded: the attempt is one EVALSHA, and it takes the lock.
        self.assertStatus(self.run_redlock(["-s", server.url(), "run", "-k", "warm", "--",
                                            "true"]), 0)
        proxy = self.delay_proxy(server, 1.0)
        args = ["-s", f"redis://127.0.0.1:{proxy.port}"]
        proc = self.start_redlock(args + ["run", "-k", "dead", "-t", TTL, "--", "sleep", "600"])
        wait_until(lambda: proxy._socks, 15 * SLACK, proc=proc,
                   message="the attempt to go out")
        time.sleep(0.5)
        self.assertEqual(server.command("EXISTS", "lock:dead"), 0)
        # The cgroup PROGRAM would have run in, made before the first attempt.
        group = os.path.join(cgroup_directory(proc.pid), f"redlock-{proc.pid}")
        made = os.path.isdir(group)
        proc.send_signal(signal.SIGKILL)
        self.assertEqual(proc.wait(10), -signal.SIGKILL)
        # Both have landed by then (1 s each way through the proxy).
        time.sleep(3)
        self.assertKeyGone(server, "lock:dead", within=15 * SLACK)
        # And the watchdog removed the cgroup, which no PROGRAM ever joined.
        if made:
            wait_until(lambda: not os.path.exists(group), 10, message=f"{group} to go")

    def test_the_releaser_by_hand_acts_on_nothing_but_a_will(self):
        server = self.redis_server()
        holder = self.holder(["-k", "dead"], global_args=["-s", server.url()]).wait_ready()
        # Not a will: refused, and the lock is untouched.
        r = self.run_redlock(["__release-dead-run"], input=holder.token.encode())
        self.assertStatus(r, 64)
        self.assertIn("its input is not a will", r.stderr)
        self.assertEqual(server.command("GET", "lock:dead"), holder.token)
        r = self.run_redlock(["--help"])
        self.assertNotIn("release-dead-run", r.stdout)
        self.assertEqual(holder.release(), 0)
