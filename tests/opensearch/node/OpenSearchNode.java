// A single OpenSearch node for dlock's tests, started from the jars of pom.xml beside this file
// (no tarball, no container): `java -cp CLASSPATH OpenSearchNode DIR HTTP_PORT`.
//
// The node keeps its home and data under DIR, serves HTTP on 127.0.0.1:HTTP_PORT (the Netty
// transport, given as a classpath plugin, as the distribution loads it as a module) and runs
// Painless scripts (lang-painless, a classpath plugin too). It forms a cluster of its own
// (discovery.type=single-node); its transport port is any free one. It prints `http PORT` once it
// serves HTTP, `port taken` (exit 3) if the HTTP port is taken, `start failed` (exit 1, the
// exception on stderr) if it fails otherwise, and stops when its stdin
// closes or on SIGTERM.

import java.io.InputStream;
import java.net.BindException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.painless.PainlessPlugin;
import org.opensearch.plugins.Plugin;
import org.opensearch.transport.Netty4Plugin;

public class OpenSearchNode extends Node {
    OpenSearchNode(Environment environment, Collection<Class<? extends Plugin>> plugins) {
        super(environment, plugins, true);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: OpenSearchNode DIR HTTP_PORT");
            System.exit(2);
        }
        Path dir = Paths.get(args[0]).toAbsolutePath();
        String httpPort = args[1];
        Settings settings = Settings.builder()
            .put("cluster.name", "dlock-tests")
            .put("node.name", "dlock-test-node")
            .put("path.home", dir.resolve("home").toString())
            .put("path.data", dir.resolve("data").toString())
            .put("path.logs", dir.resolve("logs").toString())
            .put("discovery.type", "single-node")
            .put("network.host", "127.0.0.1")
            .put("http.port", httpPort)
            .put("transport.port", "0")
            // Not a production node: neither a disk nearly full nor a swap file stops it.
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .put("bootstrap.memory_lock", false)
            // Its warnings (a shard that fails to recover, say) on stdout, which the test keeps.
            .put("logger.level", "WARN")
            .build();
        LogConfigurator.registerErrorListener();
        LogConfigurator.configureWithoutConfig(settings);
        Environment environment =
            InternalSettingsPreparer.prepareEnvironment(settings, Collections.emptyMap(), null, () -> "dlock-test-node");
        List<Class<? extends Plugin>> plugins = List.of(Netty4Plugin.class, PainlessPlugin.class);
        // A node that fails to start says why and exits: its thread pools would keep the JVM
        // alive, silent, after the main thread's exception.
        Node node;
        try {
            node = new OpenSearchNode(environment, plugins);
            Runtime.getRuntime().addShutdownHook(new Thread(() -> stop(node)));
            node.start();
        } catch (Throwable e) {
            for (Throwable cause = e; cause != null; cause = cause.getCause()) {
                if (cause instanceof BindException) {
                    System.out.println("port taken");
                    System.out.flush();
                    Runtime.getRuntime().halt(3);
                }
            }
            System.err.println("the node did not start:");
            e.printStackTrace();
            System.err.flush();
            System.out.println("start failed");
            System.out.flush();
            Runtime.getRuntime().halt(1);
            return;
        }
        System.out.println("http " + httpPort);
        System.out.flush();
        // Stops the node when the test (the parent) closes our stdin, or ends.
        InputStream in = System.in;
        byte[] buffer = new byte[256];
        while (in.read(buffer) >= 0) {
        }
        System.exit(0);
    }

    private static void stop(Node node) {
        try {
            node.close();
            node.awaitClose(10, TimeUnit.SECONDS);
        } catch (Exception e) {
            // Stopping anyway.
        }
    }
}
