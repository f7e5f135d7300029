"""The PROGRAM that every `redlock run` of the fault suite runs (stdlib only, no site).

    python3 -S -E program.py SOCKET RUN_ID PAUSE_MS

A read-pause-write on the shared register (faults.py serves it on the unix socket
SOCKET). Every message carries a CLOCK_MONOTONIC stamp taken just before it is sent: a
message received proves this process was alive at its stamp, which is what the checker
uses for "in the critical section" (a killed process leaves no false stamp behind).

  HELLO run pid fence token t   once, first thing
  READ  run fence t             -> "plain fenced verdict": the register's two values
  BEAT  run t                   every 10 ms while pausing (no reply)
  WRITE run fence t plain fenced -> "accepted" or "refused" (the fenced value)
  BYE   run t                   last thing before exit

The plain value is written whatever happens (a resource guarded by the lock alone); the
fenced value only when the register accepts our fence, as a real fenced resource would.
Exit status: 0 when the fenced write was accepted, 3 when the register refused our fence.

Right after HELLO it forks a straggler: a descendant that leaves PROGRAM's process group
(setpgid, as timeout(1) or `set -m` do), or its session when $FAULTS_SETSID is 1 (a
daemon), and sends BEAT stamps for the run on a connection of its own until it is killed
or the register goes away. Its stamps count as PROGRAM being alive: a straggler that
outlives the lease shows as two holders at once. redlock stops it when PROGRAM ends
(what PROGRAM leaves behind is stopped before the release).
"""

import os
import socket
import sys
import time


def straggle(path, run, inherited):
    if os.fork() != 0:
        return
    inherited.close()
    try:
        if os.environ.get("FAULTS_SETSID") == "1":
            os.setsid()
        else:
            os.setpgid(0, 0)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        while True:
            s.sendall(f"BEAT {run} {time.monotonic_ns()}\n".encode())
            time.sleep(0.01)
    except OSError:
        pass
    os._exit(0)


def main():
    path, run, pause_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fence = os.environ.get("REDLOCK_FENCE", "0")
    token = os.environ.get("REDLOCK_TOKEN", "-")
    now = time.monotonic_ns
    t = now()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    f = s.makefile("rwb", buffering=0)

    def send(line):
        s.sendall(line.encode() + b"\n")

    def ask(line):
        send(line)
        reply = f.readline()
        if not reply:
            sys.exit(4)  # the register went away: the harness is shutting down
        return reply.decode().split()

    ask(f"HELLO {run} {os.getpid()} {fence} {token} {t}")
    straggle(path, run, s)
    plain, fenced, verdict = ask(f"READ {run} {fence} {now()}")
    deadline = time.monotonic() + pause_ms / 1000.0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(0.01, left))
        send(f"BEAT {run} {now()}")
    new_fenced = int(fenced) + 1 if verdict == "accepted" else -1
    (answer,) = ask(f"WRITE {run} {fence} {now()} {int(plain) + 1} {new_fenced}")
    send(f"BYE {run} {now()}")
    s.close()
    sys.exit(0 if answer == "accepted" else 3)


if __name__ == "__main__":
    main()
