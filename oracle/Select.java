// SELECT every row of a live table, for cleave's cluster benchmarks (issue 35;
// scripts/bench-cluster-cleanup.sh):
//
//   Select --host H --port P --table KS.T
//
// reads every row through the node at H:P only (consistency ONE, paged), the coordinator
// fetching each token from the replica that owns it, and prints `## count=N sum=S xor=X`
// over the first 8 bytes of the MD5 of each row's `<token>\t<column value>...` (blobs as
// hex): the same rows give the same line whatever nodes and sstables hold them, as
// `Oracle dump --digest` does for sstables. A row that two replicas hold is one row here
// (the coordinator reconciles them): doubles are for `Oracle dump --digest` of each node.
//
// The client is the DataStax Java driver 3.x that Cassandra 5.0 ships shaded in lib/ (for
// sstableloader); 4.x's runtime jars from Maven Central do not include it, hence a file of
// its own, compiled against 5.0's jars only (Oracle.java compiles against every line).

import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.datastax.driver.core.Cluster;
import com.datastax.driver.core.ColumnMetadata;
import com.datastax.driver.core.ConsistencyLevel;
import com.datastax.driver.core.Row;
import com.datastax.driver.core.Session;
import com.datastax.driver.core.SimpleStatement;
import com.datastax.driver.core.SocketOptions;
import com.datastax.driver.core.Statement;
import com.datastax.driver.core.TableMetadata;
import com.datastax.driver.core.policies.RoundRobinPolicy;
import com.datastax.driver.core.policies.WhiteListPolicy;

import org.apache.cassandra.utils.ByteBufferUtil;

public final class Select {
    public static void main(String[] args) throws Exception {
        Map<String, String> o = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                usage();
            }
            o.put(args[i].substring(2), args[i + 1]);
        }
        String[] kt = o.getOrDefault("table", "").split("\\.");
        if (args.length % 2 != 0 || !o.containsKey("host") || !o.containsKey("port") || kt.length != 2) {
            usage();
        }
        InetSocketAddress at = new InetSocketAddress(o.get("host"), Integer.parseInt(o.get("port")));
        Cluster cluster = Cluster.builder()
                .addContactPointsWithPorts(Collections.singletonList(at))
                .withLoadBalancingPolicy(new WhiteListPolicy(new RoundRobinPolicy(), Collections.singletonList(at)))
                .withSocketOptions(new SocketOptions().setReadTimeoutMillis(300_000))
                .withoutJMXReporting()
                .withoutMetrics()
                .build();
        long count = 0, sum = 0, xor = 0;
        try {
            Session session = cluster.connect();
            TableMetadata t = cluster.getMetadata().getKeyspace(kt[0]).getTable(kt[1]);
            List<String> key = new ArrayList<>();
            for (ColumnMetadata c : t.getPartitionKey()) {
                key.add(c.getName());
            }
            List<String> cols = new ArrayList<>();
            for (ColumnMetadata c : t.getColumns()) {
                cols.add(c.getName());
            }
            Statement st = new SimpleStatement("SELECT token(" + String.join(", ", key) + "), "
                    + String.join(", ", cols) + " FROM " + kt[0] + "." + kt[1])
                    .setFetchSize(5000)
                    .setConsistencyLevel(ConsistencyLevel.ONE);
            MessageDigest md5 = MessageDigest.getInstance("MD5");
            StringBuilder b = new StringBuilder();
            for (Row r : session.execute(st)) {
                b.setLength(0);
                for (int i = 0; i <= cols.size(); i++) {
                    if (i > 0) {
                        b.append('\t');
                    }
                    Object v = r.getObject(i);
                    b.append(v instanceof ByteBuffer ? ByteBufferUtil.bytesToHex((ByteBuffer) v) : String.valueOf(v));
                }
                long x = ByteBuffer.wrap(md5.digest(b.toString().getBytes(StandardCharsets.UTF_8))).getLong();
                count++;
                sum += x;
                xor ^= x;
            }
        } finally {
            cluster.close();
        }
        System.out.println("## count=" + count + " sum=" + Long.toUnsignedString(sum) + " xor=" + Long.toUnsignedString(xor));
        System.exit(0);
    }

    static void usage() {
        System.err.println("usage: Select --host H --port P --table KEYSPACE.TABLE");
        System.exit(2);
    }
}
