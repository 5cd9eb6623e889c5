// A contender on Apache Curator's LeaderLatch, speaking the harness protocol of protocol.py.
// Compiled by benchmarks/zookeeper_failover.py against Debian's /usr/share/java curator jars.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.CountDownLatch;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorLatch {
    static synchronized void say(String word) {
        System.out.println(word + " " + System.nanoTime());
        System.out.flush();
    }

    public static void main(String[] argv) throws Exception {
        String hosts = null, path = null, id = null;
        double sessionTimeout = 2.0;
        for (int i = 0; i + 1 < argv.length; i += 2) {
            switch (argv[i]) {
                case "--hosts": hosts = argv[i + 1]; break;
                case "--path": path = argv[i + 1]; break;
                case "--id": id = argv[i + 1]; break;
                case "--session-timeout": sessionTimeout = Double.parseDouble(argv[i + 1]); break;
                default: throw new IllegalArgumentException("unknown option " + argv[i]);
            }
        }
        int timeoutMs = (int) (sessionTimeout * 1000);
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(hosts)
                .sessionTimeoutMs(timeoutMs)
                .connectionTimeoutMs(timeoutMs)
                .retryPolicy(new ExponentialBackoffRetry(50, 10, 1000))
                .build();
        client.start();
        client.blockUntilConnected();

        CountDownLatch released = new CountDownLatch(1);
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.trim().equals("release")) released.countDown();
                }
            } catch (Exception ignored) {
            }
            Runtime.getRuntime().halt(0); // the harness is gone
        });
        stdin.setDaemon(true);
        stdin.start();

        LeaderLatch latch = new LeaderLatch(client, path, id);
        CountDownLatch leading = new CountDownLatch(1);
        latch.addListener(new LeaderLatchListener() {
            @Override public void isLeader() { say("LEADER"); leading.countDown(); }
            @Override public void notLeader() { }
        });
        latch.start();
        say("JOINED");
        leading.await();
        released.await();
        say("RELEASING");
        latch.close(); // deletes the latch node: the next in line is told
        client.close();
        Runtime.getRuntime().halt(0);
    }
}
