// The Extendable ZooKeeper priority queue driven by Apache ZooKeeper's own
// Java client (issue 25's target): N consumer sessions dequeue as fast as
// they can while PRODUCERS sessions keep about DEPTH elements queued.
//
//   java -cp <zookeeper jars>:<dir> PqBench extension|recipe HOSTS CONSUMERS WARMUP_S MEASURED_S
//
// extension: getData /queue/next, one call (examples/extensions/priority_queue.lua);
// recipe: getChildren, getData of the smallest, delete with its version, on
// NoNode/BadVersion the next candidate, then a fresh listing. Prints one
// JSON line: dequeues/s in the measured window, calls per dequeue, empties.
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;

public class PqBench {
    static final String QUEUE = "/queue";
    static final int DEPTH = 100;
    static final int PRODUCERS = 4;
    static final AtomicLong queued = new AtomicLong();
    static volatile boolean measuring = false;
    static volatile boolean done = false;

    static ZooKeeper connect(String hosts) throws Exception {
        CountDownLatch up = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(hosts, 30000, e -> {
            if (e.getState() == Watcher.Event.KeeperState.SyncConnected) up.countDown();
        });
        if (!up.await(20, TimeUnit.SECONDS)) throw new IllegalStateException("no session");
        return zk;
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], hosts = args[1];
        int consumers = Integer.parseInt(args[2]);
        double warmup = Double.parseDouble(args[3]), measured = Double.parseDouble(args[4]);
        boolean extension = mode.equals("extension");
        ZooKeeper admin = connect(hosts);
        if (!extension && admin.exists(QUEUE, false) == null) {
            admin.create(QUEUE, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
        }
        AtomicLong dequeues = new AtomicLong(), calls = new AtomicLong(), empties = new AtomicLong();
        // Creates go out asynchronously from PRODUCERS sessions, up to the
        // depth missing, so the queue stays full however fast the
        // consumers are (the "empty" count says when it did not).
        java.util.concurrent.Semaphore room = new java.util.concurrent.Semaphore(DEPTH);
        List<Thread> producers = new ArrayList<>();
        List<ZooKeeper> producerSessions = new ArrayList<>();
        for (int p = 0; p < PRODUCERS; p++) {
            ZooKeeper producer = connect(hosts);
            producerSessions.add(producer);
            final int seed = p;
            Thread produce = new Thread(() -> {
                Random rng = new Random(seed);
                byte[] item = new byte[16];
                try {
                    while (!done) {
                        if (!room.tryAcquire(10, TimeUnit.MILLISECONDS)) continue;
                        // Both sides order by the priority's two digits, then arrival.
                        producer.create(QUEUE + "/node-" + String.format("%02d", rng.nextInt(10)) + "-",
                            item, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT_SEQUENTIAL,
                            (rc, path, ctx, name) -> {
                                if (rc == 0) queued.incrementAndGet(); else room.release();
                            }, null);
                    }
                } catch (Exception e) {
                    if (!done) { System.err.println("producer: " + e); System.exit(1); }
                }
            });
            producers.add(produce);
            produce.start();
        }
        while (queued.get() < DEPTH) Thread.sleep(5);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            ZooKeeper zk = connect(hosts);
            Thread t = new Thread(() -> {
                try {
                    while (!done) {
                        long[] made = extension ? dequeueByExtension(zk) : dequeueByRecipe(zk);
                        if (measuring) {
                            calls.addAndGet(made[1]);
                            if (made[0] == 1) dequeues.incrementAndGet(); else empties.incrementAndGet();
                        }
                        if (made[0] == 1) { queued.decrementAndGet(); room.release(); }
                    }
                    zk.close();
                } catch (Exception e) {
                    if (!done) { System.err.println("consumer: " + e); System.exit(1); }
                }
            });
            threads.add(t);
            t.start();
        }
        Thread.sleep((long) (warmup * 1000));
        measuring = true;
        long started = System.nanoTime();
        Thread.sleep((long) (measured * 1000));
        measuring = false;
        double seconds = (System.nanoTime() - started) / 1e9;
        done = true;
        for (Thread t : threads) t.join(5000);
        for (Thread t : producers) t.join(5000);
        for (ZooKeeper z : producerSessions) z.close();
        admin.close();
        long d = dequeues.get();
        System.out.printf("{\"mode\": \"%s\", \"consumers\": %d, \"dequeues_per_s\": %.1f, "
            + "\"calls_per_dequeue\": %.2f, \"empty\": %d}%n",
            mode, consumers, d / seconds, d == 0 ? 0.0 : (double) calls.get() / d, empties.get());
        System.exit(0);
    }

    /** {1 if an element was taken else 0, calls made}. */
    static long[] dequeueByExtension(ZooKeeper zk) throws Exception {
        try {
            zk.getData(QUEUE + "/next", false, null);
            return new long[] {1, 1};
        } catch (KeeperException.NoNodeException e) {
            return new long[] {0, 1};
        }
    }

    static long[] dequeueByRecipe(ZooKeeper zk) throws Exception {
        long calls = 1;
        List<String> children = zk.getChildren(QUEUE, false);
        Collections.sort(children);
        for (String child : children) {
            String path = QUEUE + "/" + child;
            Stat stat = new Stat();
            try {
                calls++;
                zk.getData(path, false, stat);
                calls++;
                zk.delete(path, stat.getVersion());
                return new long[] {1, calls};
            } catch (KeeperException.NoNodeException | KeeperException.BadVersionException e) {
                // Another consumer took it: the next candidate.
            }
        }
        return new long[] {0, calls};
    }
}
