package org.storeval.testbed;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hdfs.DFSConfigKeys;
import org.apache.hadoop.hdfs.DistributedFileSystem;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.protocol.DatanodeInfo;
import org.apache.hadoop.hdfs.protocol.LocatedBlock;
import org.apache.hadoop.hdfs.protocol.LocatedBlocks;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.net.NetUtils;

/**
 * A MiniDFSCluster (one NameNode, N DataNodes) on 127.0.0.1 for the storeval testbed.
 *
 * <pre>
 * java -cp ... org.storeval.testbed.MiniCluster --datanodes N --replication R
 *      --rpc-port P --http-port P --control-port P --base-dir DIR [--bind ADDRESS]
 * </pre>
 *
 * {@code --bind ADDRESS} (default 127.0.0.1) puts the cluster on an emulated host: the launcher runs inside that
 * host's network namespace and ADDRESS is the host's address there. The datanodes and the control port listen on
 * ADDRESS; the datanodes register with the NameNode at ADDRESS, so the NameNode records ADDRESS as their IP and
 * hands it out to clients on other hosts. MiniDFSCluster writes 127.0.0.1 into every address it configures, so
 * Hadoop's own resolver is told that 127.0.0.1 and localhost mean ADDRESS ({@code NetUtils.addStaticResolution}):
 * the datanodes' ports bind ADDRESS and the datanodes connect to the NameNode there. The NameNode's RPC and HTTP
 * ports (WebHDFS, JMX) bind 0.0.0.0 of the namespace ({@code dfs.namenode.rpc-bind-host}, {@code http-bind-host}):
 * MiniDFSCluster's own clients hold the NameNode's address already resolved to the loopback, and Jetty resolves
 * addresses itself. Reached at ADDRESS and at the namespace's own loopback, nowhere else.
 *
 * stdout carries only this launcher's lines ({@code READY <rpc-port>}, {@code STOPPED}); Hadoop logs to
 * stderr at WARN. Control protocol on 127.0.0.1:control-port, one command per line, each answered by a line
 * {@code OK ...} or {@code ERR <reason>} ({@code datanodes} and {@code blocks} answer {@code OK <n>} and then n lines):
 * <ul>
 *   <li>{@code datanodes} - one line per datanode in start order: {@code <transfer-port> alive|stopped}</li>
 *   <li>{@code stop-datanode <transfer-port>} / {@code start-datanode <transfer-port>} (restart keeps the ports)</li>
 *   <li>{@code blocks <path>} - one line per block: {@code <offset> <length> <port>,<port>,...}</li>
 *   <li>{@code ping} and {@code shutdown}</li>
 * </ul>
 * SIGTERM shuts the cluster down cleanly (shutdown hook).
 */
public final class MiniCluster {

    /** One datanode as started: its transfer port (its name for the control protocol) and, while stopped, its properties. */
    private static final class Node {
        final int port;
        MiniDFSCluster.DataNodeProperties stopped;

        Node(int port) {
            this.port = port;
        }
    }

    private static PrintStream out;
    private static MiniDFSCluster cluster;
    private static final List<Node> nodes = new ArrayList<>();
    private static boolean down;

    public static void main(String[] args) throws Exception {
        out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
        System.setOut(System.err); // anything else that prints goes to stderr
        configureLogging();

        Map<String, String> opts = parseArgs(args);
        int datanodes = Integer.parseInt(opts.getOrDefault("datanodes", "1"));
        int replication = Integer.parseInt(opts.getOrDefault("replication", String.valueOf(Math.min(3, datanodes))));
        int rpcPort = Integer.parseInt(require(opts, "rpc-port"));
        int httpPort = Integer.parseInt(require(opts, "http-port"));
        int controlPort = Integer.parseInt(require(opts, "control-port"));
        File baseDir = new File(require(opts, "base-dir")).getAbsoluteFile();
        String bind = opts.getOrDefault("bind", "127.0.0.1");
        boolean placed = !bind.equals("127.0.0.1");

        // Bind the control port first: if it was lost in a race, fail before the cluster starts.
        ServerSocket control = new ServerSocket();
        control.setReuseAddress(true);
        control.bind(new InetSocketAddress(InetAddress.getByName(bind), controlPort));

        Configuration conf = new Configuration();
        conf.set(DFSConfigKeys.DFS_NAMENODE_RPC_ADDRESS_KEY, "127.0.0.1:" + rpcPort);
        conf.set(DFSConfigKeys.DFS_NAMENODE_HTTP_ADDRESS_KEY, "127.0.0.1:" + httpPort);
        conf.set(DFSConfigKeys.DFS_NAMENODE_HTTPS_ADDRESS_KEY, "127.0.0.1:0");
        conf.set(DFSConfigKeys.DFS_DATANODE_ADDRESS_KEY, "127.0.0.1:0");
        conf.set(DFSConfigKeys.DFS_DATANODE_HTTP_ADDRESS_KEY, "127.0.0.1:0");
        conf.set(DFSConfigKeys.DFS_DATANODE_HTTPS_ADDRESS_KEY, "127.0.0.1:0");
        conf.set(DFSConfigKeys.DFS_DATANODE_IPC_ADDRESS_KEY, "127.0.0.1:0");
        conf.setBoolean(DFSConfigKeys.DFS_PERMISSIONS_ENABLED_KEY, false);
        conf.setInt(DFSConfigKeys.DFS_REPLICATION_KEY, replication);
        conf.setLong(DFSConfigKeys.DFS_HEARTBEAT_INTERVAL_KEY, 1);
        conf.setInt(DFSConfigKeys.DFS_NAMENODE_HEARTBEAT_RECHECK_INTERVAL_KEY, 5000);
        // below the 20 s expiry (else a warning); reads do not avoid stale nodes unless dfs.namenode.avoid.read.stale.datanode
        conf.setLong(DFSConfigKeys.DFS_NAMENODE_STALE_DATANODE_INTERVAL_KEY, 10_000);
        // as production clusters are set: a datanode silent past the stale interval gets no new blocks to write, so
        // a writer is not handed a dead one until the expiry and the recheck after it have removed it (~40 s here)
        conf.setBoolean(DFSConfigKeys.DFS_NAMENODE_AVOID_STALE_DATANODE_FOR_WRITE_KEY, true);
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, baseDir.getPath());
        if (placed) {
            // MiniDFSCluster writes 127.0.0.1 (and localhost) into every address it configures: Hadoop resolves both
            // to the host's address instead, so the NameNode and the datanodes listen there and the datanodes reach
            // the NameNode from there — the IP it records for them and hands out
            NetUtils.addStaticResolution("127.0.0.1", bind);
            NetUtils.addStaticResolution("localhost", bind);
            // the NameNode listens on the whole namespace: MiniDFSCluster's own clients hold its address resolved to
            // the loopback already, and Jetty resolves the HTTP address itself
            conf.set(DFSConfigKeys.DFS_NAMENODE_RPC_BIND_HOST_KEY, "0.0.0.0");
            conf.set(DFSConfigKeys.DFS_NAMENODE_HTTP_BIND_HOST_KEY, "0.0.0.0");
            // the host's address has no name: the NameNode must not refuse datanodes whose address it cannot resolve
            conf.setBoolean(DFSConfigKeys.DFS_NAMENODE_DATANODE_REGISTRATION_IP_HOSTNAME_CHECK_KEY, false);
            conf.set(DFSConfigKeys.DFS_DATANODE_HOST_NAME_KEY, bind);
        }

        try {
            cluster = new MiniDFSCluster.Builder(conf, baseDir)
                    .nameNodePort(rpcPort)
                    .nameNodeHttpPort(httpPort)
                    .numDataNodes(datanodes)
                    .checkDataNodeHostConfig(placed)
                    .format(true)
                    .build();
            cluster.waitActive();
        } catch (Throwable t) {
            // the cluster's threads would keep a half-started JVM alive: say why, and end it
            t.printStackTrace();
            System.exit(1);
        }
        for (DataNode dn : cluster.getDataNodes()) {
            nodes.add(new Node(dn.getXferPort()));
        }
        Runtime.getRuntime().addShutdownHook(new Thread(MiniCluster::shutdown, "storeval-shutdown"));

        StringBuilder ports = new StringBuilder();
        for (Node n : nodes) {
            ports.append(ports.length() == 0 ? "" : ",").append(n.port);
        }
        out.println("DATANODES " + ports);
        out.println("READY " + cluster.getNameNodePort());

        while (true) {
            try (Socket s = control.accept()) {
                serve(s);
            } catch (Exception e) {
                System.err.println("storeval control: " + e);
            }
            synchronized (MiniCluster.class) {
                if (down) {
                    break;
                }
            }
        }
        control.close();
        System.exit(0);
    }

    private static void serve(Socket s) throws Exception {
        s.setSoTimeout(600_000);
        BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
        PrintWriter w = new PrintWriter(new OutputStreamWriter(s.getOutputStream(), StandardCharsets.UTF_8), true);
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            String reply;
            try {
                reply = handle(line);
            } catch (Exception e) {
                reply = "ERR " + String.valueOf(e).replace('\n', ' ');
            }
            w.print(reply + "\n");
            w.flush();
            if (line.equals("shutdown")) {
                shutdown();
                return;
            }
        }
    }

    private static synchronized String handle(String line) throws Exception {
        String[] words = line.split("\\s+");
        String cmd = words[0];
        if (down) {
            return "ERR shutting down";
        }
        switch (cmd) {
            case "ping":
                return "OK " + cluster.getNameNodePort();
            case "datanodes": {
                StringBuilder b = new StringBuilder("OK " + nodes.size());
                for (Node n : nodes) {
                    b.append('\n').append(n.port).append(n.stopped == null ? " alive" : " stopped");
                }
                return b.toString();
            }
            case "stop-datanode": {
                Node n = node(words);
                if (n == null) {
                    return "ERR no datanode with transfer port " + arg(words);
                }
                if (n.stopped != null) {
                    return "ERR datanode " + n.port + " is already stopped";
                }
                int index = currentIndex(n.port);
                if (index < 0) {
                    return "ERR datanode " + n.port + " is not running";
                }
                n.stopped = cluster.stopDataNode(index);
                return "OK stopped " + n.port;
            }
            case "start-datanode": {
                Node n = node(words);
                if (n == null) {
                    return "ERR no datanode with transfer port " + arg(words);
                }
                if (n.stopped == null) {
                    return "ERR datanode " + n.port + " is not stopped";
                }
                if (!cluster.restartDataNode(n.stopped, true)) {
                    return "ERR datanode " + n.port + " did not restart";
                }
                n.stopped = null;
                int index = currentIndex(n.port);
                if (index < 0) {
                    return "ERR datanode " + n.port + " restarted on another port";
                }
                cluster.waitDatanodeFullyStarted(cluster.getDataNodes().get(index), 60_000);
                return "OK started " + n.port;
            }
            case "blocks": {
                if (words.length != 2) {
                    return "ERR usage: blocks <path>";
                }
                DistributedFileSystem fs = cluster.getFileSystem();
                String path = new Path(words[1]).toUri().getPath();
                LocatedBlocks located = fs.getClient().getLocatedBlocks(path, 0, Long.MAX_VALUE);
                StringBuilder b = new StringBuilder("OK " + located.locatedBlockCount());
                for (LocatedBlock lb : located.getLocatedBlocks()) {
                    b.append('\n').append(lb.getStartOffset()).append(' ').append(lb.getBlockSize()).append(' ');
                    DatanodeInfo[] locs = lb.getLocations();
                    for (int i = 0; i < locs.length; i++) {
                        b.append(i == 0 ? "" : ",").append(locs[i].getXferPort());
                    }
                }
                return b.toString();
            }
            case "shutdown":
                return "OK shutting down";
            default:
                return "ERR unknown command '" + cmd + "' (datanodes, stop-datanode P, start-datanode P, blocks PATH, ping, shutdown)";
        }
    }

    private static String arg(String[] words) {
        return words.length > 1 ? words[1] : "";
    }

    private static Node node(String[] words) {
        if (words.length != 2) {
            return null;
        }
        int port;
        try {
            port = Integer.parseInt(words[1]);
        } catch (NumberFormatException e) {
            return null;
        }
        for (Node n : nodes) {
            if (n.port == port) {
                return n;
            }
        }
        return null;
    }

    /** The index of the running datanode with this transfer port in the cluster's list now (it shifts after a stop). */
    private static int currentIndex(int port) {
        List<DataNode> running = cluster.getDataNodes();
        for (int i = 0; i < running.size(); i++) {
            if (running.get(i).getXferPort() == port) {
                return i;
            }
        }
        return -1;
    }

    private static void shutdown() {
        synchronized (MiniCluster.class) {
            if (down) {
                return;
            }
            down = true;
            if (cluster != null) {
                try {
                    cluster.shutdown();
                } catch (Throwable t) {
                    // during JVM shutdown (SIGTERM) Hadoop cannot unregister its own shutdown hooks: finish by parts
                    System.err.println("storeval shutdown: " + t);
                    try {
                        cluster.shutdownDataNodes();
                    } catch (Throwable t2) {
                        System.err.println("storeval shutdown datanodes: " + t2);
                    }
                    try {
                        cluster.shutdownNameNodes();
                    } catch (Throwable t3) {
                        System.err.println("storeval shutdown namenode: " + t3);
                    }
                }
            }
            out.println("STOPPED");
        }
    }

    private static void configureLogging() {
        Properties p = new Properties();
        p.setProperty("log4j.rootLogger", "WARN, stderr");
        p.setProperty("log4j.appender.stderr", "org.apache.log4j.ConsoleAppender");
        p.setProperty("log4j.appender.stderr.Target", "System.err");
        p.setProperty("log4j.appender.stderr.layout", "org.apache.log4j.PatternLayout");
        p.setProperty("log4j.appender.stderr.layout.ConversionPattern", "%d{ISO8601} %p %c{2}: %m%n");
        org.apache.log4j.LogManager.resetConfiguration();
        org.apache.log4j.PropertyConfigurator.configure(p);
    }

    private static Map<String, String> parseArgs(String[] args) {
        Map<String, String> opts = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                usage("bad argument " + args[i]);
            }
            opts.put(args[i].substring(2), args[++i]);
        }
        return opts;
    }

    private static String require(Map<String, String> opts, String key) {
        String v = opts.get(key);
        if (v == null) {
            usage("missing --" + key);
        }
        return v;
    }

    private static void usage(String why) {
        System.err.println("MiniCluster: " + why + "\nusage: MiniCluster --datanodes N [--replication R]"
                + " --rpc-port P --http-port P --control-port P --base-dir DIR");
        System.exit(2);
    }
}
