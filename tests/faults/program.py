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
"""

import os
import socket
import sys
import time


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
