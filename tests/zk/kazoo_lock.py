# Takes one of kazoo's lock recipes, for dlock's interop tests (run with Debian's python3-kazoo).
#
# usage: kazoo_lock.py HOSTS PATH RECIPE try|wait HELD_MARKER RELEASE_FILE [PATTERN,...]
#   RECIPE: lock (kazoo's Lock), read (ReadLock), write (WriteLock), semaphore (Semaphore with
#           max_leases=1), or lease: the node a
#           Semaphore lease is (an ephemeral child named by a bare uuid4().hex), here one whose
#           name ends in ten digits, as about one in a hundred do.
#   try:  one attempt without waiting; exits 3 (printing "busy") if the lock is held.
#   wait: waits up to 60s for the lock.
#   PATTERN,...: kazoo's extra_lock_patterns, the other clients' node names it must wait for.
# Once it holds the lock it writes HELD_MARKER, waits (at most 60s) for RELEASE_FILE to appear,
# releases and exits 0.

import logging
import os
import sys
import threading
import time

from kazoo.client import KazooClient

# kazoo logs every dropped connection on stderr when it stops; the test needs none of it.
logging.disable(logging.CRITICAL)


def main():
    # Bounded whatever happens (kazoo retries a vanished server for ever): the test never hangs.
    watchdog = threading.Timer(150, lambda: os._exit(4))
    watchdog.daemon = True
    watchdog.start()
    hosts, path, recipe, how, held, release = sys.argv[1:7]
    patterns = [p for p in (sys.argv[7] if len(sys.argv) > 7 else "").split(",") if p]
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=30)
    if recipe == "lease":
        client.ensure_path(path)
        node = path + "/" + "5f0c2a9e41d34b7c8e6f012345678901"
        client.create(node, b"", ephemeral=True)
        lock = None
    else:
        if recipe == "semaphore":
            lock = client.Semaphore(path, "kazoo", max_leases=1)
        else:
            make = {"lock": client.Lock, "read": client.ReadLock, "write": client.WriteLock}
            lock = make[recipe](path, "kazoo", extra_lock_patterns=patterns)
        got = lock.acquire(blocking=False) if how == "try" else lock.acquire(timeout=60)
        if not got:
            print("busy", flush=True)
            client.stop()
            sys.exit(3)
    with open(held, "w") as f:
        f.write("held")
    end = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < end:
        time.sleep(0.01)
    if lock is not None:
        lock.release()
    client.stop()
    client.close()
    os._exit(0)


if __name__ == "__main__":
    main()
