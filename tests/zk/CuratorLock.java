// Takes an Apache Curator lock, for dlock's interop tests (compiled by the test).
//
// usage: CuratorLock CONNECT PATH try|timeout|wait HELD_MARKER RELEASE_FILE [mutex|write|read]
//   try:     one attempt without waiting; exits 3 (printing "busy") if the lock is held.
//   timeout: waits up to 1s (watching the node ahead), then as try.
//   wait:    waits up to 60s for the lock.
//   mutex (the default): InterProcessMutex; write, read: the halves of InterProcessReadWriteLock;
//   semaphore: a lease of InterProcessSemaphoreV2 with one lease.
// Once it holds the lock it writes HELD_MARKER, waits (at most 60s) for RELEASE_FILE to appear,
// releases and exits 0.

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;

public class CuratorLock {
    public static void main(String[] args) throws Exception {
        CuratorFramework client =
                CuratorFrameworkFactory.newClient(args[0], 5000, 5000, new RetryNTimes(3, 100));
        client.start();
        String recipe = args.length > 5 ? args[5] : "mutex";
        long wait = args[2].equals("try") ? 0 : args[2].equals("timeout") ? 1000 : 60000;
        if (recipe.equals("semaphore")) {
            InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, args[1], 1);
            Lease lease = semaphore.acquire(wait, TimeUnit.MILLISECONDS);
            if (lease == null) {
                busy(client);
            }
            holdUntilReleased(args);
            semaphore.returnLease(lease);
            client.close();
            return;
        }
        InterProcessLock lock;
        switch (recipe) {
            case "mutex":
                lock = new InterProcessMutex(client, args[1]);
                break;
            case "write":
                lock = new InterProcessReadWriteLock(client, args[1]).writeLock();
                break;
            case "read":
                lock = new InterProcessReadWriteLock(client, args[1]).readLock();
                break;
            default:
                throw new IllegalArgumentException("unknown recipe " + recipe);
        }
        if (!lock.acquire(wait, TimeUnit.MILLISECONDS)) {
            busy(client);
        }
        holdUntilReleased(args);
        lock.release();
        client.close();
    }

    static void busy(CuratorFramework client) {
        System.out.println("busy");
        client.close();
        System.exit(3);
    }

    static void holdUntilReleased(String[] args) throws Exception {
        Files.writeString(Paths.get(args[3]), "held");
        Path release = Paths.get(args[4]);
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!Files.exists(release) && System.nanoTime() < end) {
            Thread.sleep(10);
        }
    }
}
