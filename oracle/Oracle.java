// Cassandra's own writer and reader, for cleave's oracle tests (issue 30; docs/testenv.md,
// "Cassandra's own writer and reader").
//
// One source for every line (4.0, 4.1, 5.0): the tests compile it with `javac --release 11`
// against each version's jars and run it on that line's JVM. Where the APIs differ between
// lines (Descriptor, openNoValidation, key enumeration, the per-key iterator, the 5.0-only
// client Config for BTI) it goes through reflection, so no per-line source variant is needed.
//
//   write --out DIR --family F [--partitions N] [--rows R] [--value-bytes V] [--seed S]
//         [--compression lz4|zstd|snappy|deflate|none] [--chunk-kb K] [--format big|bti]
//         [--sorted true]
//   dump  [--mode linear|index|both] [--digest true] FILE-Data.db...
//   schema   (each family: name, columns, table options; tab-separated)
//
// `write --sorted true` (families with a one-column key: blob_ck, int_ck2desc) adds the
// partitions in token order through the writer's `sorted()` mode, which writes as it goes
// instead of buffering the whole table in the heap: how a parent of hundreds of MiB is made
// in a 1 GiB JVM as one sstable. Each partition's rows then come from a Random of its own
// (seed, p), so the content is the same whatever the order.
//
// `dump` prints, per sstable and per pass, a header line `# <pass> <file> <metadata>` and one
// line per partition: `<token>\t<key hex>\t<key text>\t<body>`, where the body is Cassandra's
// own `toString(metadata, true)` of the partition deletion, static row, rows and range
// tombstone markers (timestamps, TTLs and local deletion times included), or `EMPTY` for a
// partition with nothing in it (cleave's filler partitions are such). Errors go to stderr with
// exit status 3 and the failing file named, so a test can assert that the reader threw.
// `--digest true` prints, instead of the partition lines, one line per sstable and pass:
// `## count=N empty=E min=T max=T sum=S xor=X`, where N counts the non-empty partitions, E the
// empty ones, T their tokens' range, and S (the sum mod 2^64) and X (the xor) combine the
// first 8 bytes of the MD5 of each non-empty partition's `<token>\t<key hex>\t<body>`: the
// same partitions give the same S and X whatever the files they are split into, so a big
// parent is compared with its children without holding its rows.

import java.io.File;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.function.Supplier;

import org.apache.cassandra.config.Config;
import org.apache.cassandra.config.DatabaseDescriptor;
import org.apache.cassandra.db.DecoratedKey;
import org.apache.cassandra.db.Slices;
import org.apache.cassandra.db.filter.ColumnFilter;
import org.apache.cassandra.db.rows.Row;
import org.apache.cassandra.db.rows.Unfiltered;
import org.apache.cassandra.db.rows.UnfilteredRowIterator;
import org.apache.cassandra.io.sstable.CQLSSTableWriter;
import org.apache.cassandra.io.sstable.Descriptor;
import org.apache.cassandra.io.sstable.ISSTableScanner;
import org.apache.cassandra.io.sstable.format.SSTableReader;
import org.apache.cassandra.io.sstable.metadata.StatsMetadata;
import org.apache.cassandra.schema.TableMetadata;
import org.apache.cassandra.schema.TableMetadataRef;
import org.apache.cassandra.utils.ByteBufferUtil;
import org.apache.cassandra.utils.FBUtilities;

public final class Oracle {
    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            usage();
        }
        Map<String, String> opts = new HashMap<>();
        List<String> files = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            if (args[i].startsWith("--")) {
                if (i + 1 >= args.length) {
                    usage();
                }
                opts.put(args[i].substring(2), args[++i]);
            } else {
                files.add(args[i]);
            }
        }
        try {
            switch (args[0]) {
                case "write":
                    write(opts);
                    break;
                case "dump":
                    digest = "true".equals(opts.get("digest")) || "rows".equals(opts.get("digest"));
                    rowDigest = "rows".equals(opts.get("digest"));
                    dump(opts.getOrDefault("mode", "both"), files);
                    break;
                case "version":
                    System.out.println(FBUtilities.getReleaseVersionString());
                    break;
                case "schema":
                    // The families' tables, for the live oracle's CREATE TABLE (one list:
                    // `families()`): `<name>\t<columns>\t<options after WITH ...>`.
                    for (Map.Entry<String, Family> e : families().entrySet()) {
                        System.out.println(e.getKey() + "\t" + e.getValue().columns + "\t" + e.getValue().extra);
                    }
                    break;
                default:
                    usage();
            }
        } catch (Throwable t) {
            while (t instanceof java.lang.reflect.InvocationTargetException && t.getCause() != null) {
                t = t.getCause();
            }
            System.out.flush();
            System.err.println("ORACLE-ERROR " + t);
            t.printStackTrace(System.err);
            System.exit(3);
        }
        System.out.flush();
        // Cassandra's non-daemon threads (e.g. the chunk cache, the writer's executors) would
        // keep the JVM alive.
        System.exit(0);
    }

    static void usage() {
        System.err.println("usage: Oracle write --out DIR --family F [...] | dump [--mode linear|index|both] FILE...");
        System.exit(2);
    }

    // ---------------------------------------------------------------- write

    /** A schema family: its CREATE TABLE body (after the table name), its statement, and rows. */
    interface RowGen {
        /** The bound values of the statement for row `r` of partition `p`. */
        List<Object> row(Random rnd, int p, int r, long ts);
    }

    static final class Family {
        final String columns;
        final String extra;
        final String statement;
        final RowGen gen;
        final boolean deletes;

        Family(String columns, String extra, String statement, boolean deletes, RowGen gen) {
            this.columns = columns;
            this.extra = extra;
            this.statement = statement;
            this.deletes = deletes;
            this.gen = gen;
        }
    }

    // Five years: far enough that no TTL cell expires while its parent sits in the cache, and
    // below 4.x's 2038 cap on local deletion times (CASSANDRA-14092).
    static final int TTL = 5 * 365 * 24 * 3600;

    static String text(Random rnd, int n) {
        StringBuilder sb = new StringBuilder(n);
        for (int i = 0; i < n; i++) {
            sb.append((char) ('a' + rnd.nextInt(26)));
        }
        return sb.toString();
    }

    static ByteBuffer blob(Random rnd, int n) {
        byte[] b = new byte[n];
        rnd.nextBytes(b);
        return ByteBuffer.wrap(b);
    }

    /** A random version-4 UUID from `rnd`. */
    static UUID uuid4(Random rnd) {
        long msb = (rnd.nextLong() & ~0xF000L) | 0x4000L;
        long lsb = (rnd.nextLong() & 0x3FFFFFFFFFFFFFFFL) | 0x8000000000000000L;
        return new UUID(msb, lsb);
    }

    /** A version-1 (time) UUID, as TimeUUIDType requires, with a time from `rnd`. */
    static UUID timeuuid(Random rnd) {
        long t = 0x01E0000000000000L + (rnd.nextLong() & 0x0000FFFFFFFFFFFFL);
        long msb = ((t & 0xFFFFFFFFL) << 32) | (((t >>> 32) & 0xFFFFL) << 16) | 0x1000L | ((t >>> 48) & 0x0FFFL);
        long lsb = (rnd.nextLong() & 0x3FFFFFFFFFFFFFFFL) | 0x8000000000000000L;
        return new UUID(msb, lsb);
    }

    /** TTL for a row: one in four rows expires (in five years), the others live forever. */
    static int ttl(Random rnd) {
        return rnd.nextInt(4) == 0 ? TTL : 0;
    }

    /** A value, or null one time in `nullEvery` (null binds write a cell tombstone). */
    static <T> T orNull(Random rnd, int nullEvery, T v) {
        return rnd.nextInt(nullEvery) == 0 ? null : v;
    }

    static int valueBytes = 64;

    static Map<String, Family> families() {
        Map<String, Family> f = new LinkedHashMap<>();
        String using = " USING TTL ? AND TIMESTAMP ?";
        // Partition keys are drawn from the partition index `p` through a per-partition Random,
        // so a family's keys are the same whatever the row count.
        f.put("uuid_plain", new Family("pk uuid PRIMARY KEY, v text, n int, b blob", "",
                "INSERT INTO %s (pk, v, n, b) VALUES (?, ?, ?, ?)" + using, false,
                (rnd, p, r, ts) -> Arrays.asList(uuid4(new Random(p)), orNull(rnd, 8, text(rnd, valueBytes)),
                        rnd.nextInt(), blob(rnd, valueBytes / 2), ttl(rnd), ts)));
        f.put("timeuuid_ck", new Family("pk timeuuid, ck int, v text, PRIMARY KEY (pk, ck)", "",
                "INSERT INTO %s (pk, ck, v) VALUES (?, ?, ?)" + using, false,
                (rnd, p, r, ts) -> Arrays.asList(timeuuid(new Random(p)), r * 3, orNull(rnd, 10, text(rnd, valueBytes)),
                        ttl(rnd), ts)));
        f.put("int_ck2desc", new Family("pk int, c1 text, c2 bigint, v text, PRIMARY KEY (pk, c1, c2)",
                " AND CLUSTERING ORDER BY (c1 DESC, c2 DESC)",
                "INSERT INTO %s (pk, c1, c2, v) VALUES (?, ?, ?, ?)" + using, false,
                (rnd, p, r, ts) -> Arrays.asList(p * 7919, "c" + (r % 5), (long) r * 1000003L,
                        text(rnd, valueBytes), ttl(rnd), ts)));
        f.put("bigint_static", new Family("pk bigint, ck int, s text static, v text, PRIMARY KEY (pk, ck)", "",
                "INSERT INTO %s (pk, ck, s, v) VALUES (?, ?, ?, ?)" + using, false,
                (rnd, p, r, ts) -> Arrays.asList(new Random(p).nextLong(), r, "static-" + p + "-" + r,
                        text(rnd, valueBytes), ttl(rnd), ts)));
        f.put("text_coll", new Family(
                "pk text, ck int, l list<int>, fs frozen<set<text>>, m map<text, int>, PRIMARY KEY (pk, ck)", "",
                "INSERT INTO %s (pk, ck, l, fs, m) VALUES (?, ?, ?, ?, ?)" + using, false,
                (rnd, p, r, ts) -> {
                    List<Integer> l = new ArrayList<>();
                    Set<String> fs = new LinkedHashSet<>();
                    Map<String, Integer> m = new TreeMap<>();
                    for (int i = 0; i < 1 + rnd.nextInt(4); i++) {
                        l.add(rnd.nextInt(1000));
                        fs.add(text(rnd, 8));
                        m.put(text(rnd, 6), rnd.nextInt());
                    }
                    return Arrays.asList("key-" + p + "-" + text(new Random(p), 12), r, l, fs, m, ttl(rnd), ts);
                }));
        f.put("blob_ck", new Family("pk blob, ck bigint, v text, PRIMARY KEY (pk, ck)", "",
                "INSERT INTO %s (pk, ck, v) VALUES (?, ?, ?)" + using, false,
                (rnd, p, r, ts) -> Arrays.asList(blob(new Random(p), 4 + p % 29), (long) r - 3,
                        text(rnd, valueBytes), ttl(rnd), ts)));
        f.put("text_int", new Family("a text, b int, ck int, v text, PRIMARY KEY ((a, b), ck)", "",
                "INSERT INTO %s (a, b, ck, v) VALUES (?, ?, ?, ?)" + using, false,
                (rnd, p, r, ts) -> Arrays.asList("a" + (p / 3), p % 3, r, text(rnd, valueBytes), ttl(rnd), ts)));
        f.put("int_bigint", new Family("a int, b bigint, ck int, s int static, v text, PRIMARY KEY ((a, b), ck)", "",
                "INSERT INTO %s (a, b, ck, s, v) VALUES (?, ?, ?, ?, ?)" + using, false,
                (rnd, p, r, ts) -> Arrays.asList(p / 2, (long) p * 31L, r, p + r, text(rnd, valueBytes), ttl(rnd), ts)));
        // Deletions: the writer takes one statement, so each kind of tombstone is its own family
        // (DELETE in CQLSSTableWriter needs 4.1+, CASSANDRA-14797).
        String tomb = "pk int, ck int, v text, PRIMARY KEY (pk, ck)";
        f.put("tomb_row", new Family(tomb, "", "DELETE FROM %s USING TIMESTAMP ? WHERE pk = ? AND ck = ?", true,
                (rnd, p, r, ts) -> Arrays.asList(ts, p, r)));
        f.put("tomb_range", new Family(tomb, "",
                "DELETE FROM %s USING TIMESTAMP ? WHERE pk = ? AND ck > ? AND ck <= ?", true,
                (rnd, p, r, ts) -> Arrays.asList(ts, p, r * 10, r * 10 + 5)));
        f.put("tomb_partition", new Family(tomb, "", "DELETE FROM %s USING TIMESTAMP ? WHERE pk = ?", true,
                (rnd, p, r, ts) -> Arrays.asList(ts, p)));
        f.put("tomb_cell", new Family(tomb, "", "DELETE v FROM %s USING TIMESTAMP ? WHERE pk = ? AND ck = ?", true,
                (rnd, p, r, ts) -> Arrays.asList(ts, p, r)));
        // Fixed-width keys without static columns (issue 32's row fillers): a timestamp key, and a
        // composite of int and uuid. Last, so the older families keep their index (write_opts).
        f.put("ts_plain", new Family("pk timestamp PRIMARY KEY, v text, n bigint", "",
                "INSERT INTO %s (pk, v, n) VALUES (?, ?, ?)" + using, false,
                (rnd, p, r, ts) -> Arrays.asList(new java.util.Date(1_600_000_000_000L + new Random(p).nextInt(1 << 30) * 1000L),
                        text(rnd, valueBytes), rnd.nextLong(), ttl(rnd), ts)));
        f.put("int_uuid", new Family("a int, b uuid, ck int, v text, PRIMARY KEY ((a, b), ck)", "",
                "INSERT INTO %s (a, b, ck, v) VALUES (?, ?, ?, ?)" + using, false,
                (rnd, p, r, ts) -> Arrays.asList(p / 2, uuid4(new Random(p)), r, text(rnd, valueBytes), ttl(rnd), ts)));
        return f;
    }

    static String compression(String codec, int chunkKb) {
        String cls;
        switch (codec) {
            case "none":
                return "{'enabled': 'false'}";
            case "lz4":
                cls = "LZ4Compressor";
                break;
            case "zstd":
                cls = "ZstdCompressor";
                break;
            case "snappy":
                cls = "SnappyCompressor";
                break;
            case "deflate":
                cls = "DeflateCompressor";
                break;
            default:
                throw new IllegalArgumentException("--compression " + codec + ": expected lz4, zstd, snappy, deflate or none");
        }
        return "{'class': '" + cls + "', 'chunk_length_in_kb': " + chunkKb + "}";
    }

    static void write(Map<String, String> o) throws Exception {
        String out = req(o, "out");
        String name = req(o, "family");
        int partitions = Integer.parseInt(o.getOrDefault("partitions", "100"));
        int rows = Integer.parseInt(o.getOrDefault("rows", "4"));
        long seed = Long.parseLong(o.getOrDefault("seed", "1"));
        valueBytes = Integer.parseInt(o.getOrDefault("value-bytes", "64"));
        String format = o.getOrDefault("format", "big");
        Family fam = families().get(name);
        if (fam == null) {
            throw new IllegalArgumentException("--family " + name + ": expected one of " + families().keySet());
        }
        if (isCassandra40()) {
            toolInitialization40(out);
        }
        if ("bti".equals(format)) {
            selectBti();
        } else if (!"big".equals(format)) {
            throw new IllegalArgumentException("--format " + format + ": expected big or bti");
        }
        String table = "oracle." + name;
        String create = "CREATE TABLE " + table + " (" + fam.columns + ") WITH compression = "
                + compression(o.getOrDefault("compression", "lz4"), Integer.parseInt(o.getOrDefault("chunk-kb", "16")))
                + fam.extra;
        new File(out).mkdirs();
        boolean sorted = "true".equals(o.get("sorted"));
        CQLSSTableWriter.Builder b = CQLSSTableWriter.builder()
                .inDirectory(out)
                .forTable(create)
                .using(String.format(fam.statement, table));
        CQLSSTableWriter w = (sorted ? b.sorted() : b.withBufferSizeInMB(512)).build();
        // Fixed timestamps (microseconds) so the same seed writes the same cells; only local
        // deletion times (now + TTL, or now for a DELETE) depend on the clock.
        long ts = 1_700_000_000_000_000L + seed * 1_000_000L;
        if (sorted) {
            for (int p : tokenOrder(name, partitions)) {
                Random rnd = new Random(seed * 0x9E3779B97F4A7C15L + p);
                int n = 1 + rnd.nextInt(rows);
                for (int r = 0; r < n; r++) {
                    w.addRow(fam.gen.row(rnd, p, r, ts++));
                }
            }
        } else {
            Random rnd = new Random(seed);
            for (int p = 0; p < partitions; p++) {
                int n = fam.deletes && name.equals("tomb_partition") ? 1 : 1 + rnd.nextInt(rows);
                for (int r = 0; r < n; r++) {
                    w.addRow(fam.gen.row(rnd, p, r, ts++));
                }
            }
        }
        w.close();
        System.out.println("wrote " + table + " to " + out);
    }

    /** The partition key of partition `p` as Cassandra serializes it (one-column keys). */
    static ByteBuffer keyBytes(String family, int p) {
        switch (family) {
            case "blob_ck":
                return blob(new Random(p), 4 + p % 29);
            case "int_ck2desc":
                return ByteBufferUtil.bytes(p * 7919);
            default:
                throw new IllegalArgumentException("--sorted: family " + family + " is not one of blob_ck, int_ck2desc");
        }
    }

    /**
     * Partitions 0..n-1 in the order the sorted writer needs: by Murmur3 token, then by key
     * bytes unsigned (DecoratedKey's order); a key drawn twice is written once.
     */
    static int[] tokenOrder(String family, int n) {
        long[] tok = new long[n];
        ByteBuffer[] key = new ByteBuffer[n];
        Integer[] idx = new Integer[n];
        for (int p = 0; p < n; p++) {
            key[p] = keyBytes(family, p);
            tok[p] = (Long) org.apache.cassandra.dht.Murmur3Partitioner.instance.getToken(key[p]).getTokenValue();
            idx[p] = p;
        }
        Arrays.sort(idx, (a, c) -> {
            int t = Long.compare(tok[a], tok[c]);
            return t != 0 ? t : ByteBufferUtil.compareUnsigned(key[a], key[c]);
        });
        int[] order = new int[n];
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (m > 0 && key[order[m - 1]].equals(key[idx[i]])) {
                continue;
            }
            order[m++] = idx[i];
        }
        return Arrays.copyOf(order, m);
    }

    static String req(Map<String, String> o, String k) {
        String v = o.get(k);
        if (v == null) {
            throw new IllegalArgumentException("--" + k + " is required");
        }
        return v;
    }

    /** 4.0 has only clientInitialization(boolean); 4.1 added the Supplier<Config> overload. */
    static boolean isCassandra40() {
        try {
            DatabaseDescriptor.class.getMethod("clientInitialization", boolean.class, Supplier.class);
            return false;
        } catch (NoSuchMethodException e) {
            return true;
        }
    }

    /**
     * 4.0.19's CQLSSTableWriter fails in client mode when it closes: MetadataCollector asks
     * StorageService.getLocalHostUUID(), whose static initialisation builds the CommitLog, which
     * wants data directories ("At least one DataFileDirectory must be specified"). A tool
     * initialisation from a minimal yaml with throwaway directories (beside `out`) gives it
     * what it asks for; CQLSSTableWriter's own clientInitialization(false) then returns early.
     */
    static void toolInitialization40(String out) throws Exception {
        File base = new File(new File(out).getAbsoluteFile().getParentFile(), ".oracle40-" + ProcessHandle.current().pid());
        File yaml = new File(base, "cassandra.yaml");
        base.mkdirs();
        String y = "cluster_name: oracle\n"
                + "partitioner: org.apache.cassandra.dht.Murmur3Partitioner\n"
                + "endpoint_snitch: SimpleSnitch\n"
                + "commitlog_sync: periodic\n"
                + "commitlog_sync_period_in_ms: 10000\n"
                + "seed_provider: [{class_name: org.apache.cassandra.locator.SimpleSeedProvider, parameters: [{seeds: \"127.0.0.1\"}]}]\n"
                + "data_file_directories: [" + base + "/data]\n"
                + "commitlog_directory: " + base + "/commitlog\n"
                + "saved_caches_directory: " + base + "/saved_caches\n"
                + "hints_directory: " + base + "/hints\n";
        java.nio.file.Files.write(yaml.toPath(), y.getBytes(java.nio.charset.StandardCharsets.UTF_8));
        System.setProperty("cassandra.config", yaml.toURI().toString());
        DatabaseDescriptor.toolInitialization();
        // The directories are only needed while the JVM runs; the tests never look at them.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> deleteTree(base)));
    }

    static void deleteTree(File f) {
        File[] kids = f.listFiles();
        if (kids != null) {
            for (File k : kids) {
                deleteTree(k);
            }
        }
        f.delete();
    }

    /**
     * 5.0 only: CQLSSTableWriter has no public format option before 5.0.5 (Builder.format is
     * protected in 5.0.4), and it writes DatabaseDescriptor.getSelectedSSTableFormat(). Its own
     * static clientInitialization(false) returns early when the descriptor is already
     * initialised, so a client Config with sstable.selected_format = bti set first wins.
     */
    static void selectBti() throws Exception {
        Config c = new Config();
        Object sstable = Config.class.getField("sstable").get(c);
        sstable.getClass().getField("selected_format").set(sstable, "bti");
        Supplier<Config> s = () -> c;
        Method m = DatabaseDescriptor.class.getMethod("clientInitialization", boolean.class, Supplier.class);
        m.invoke(null, true, s);
    }

    // ---------------------------------------------------------------- dump

    static void dump(String mode, List<String> files) throws Exception {
        DatabaseDescriptor.clientInitialization();
        if (!mode.equals("linear") && !mode.equals("index") && !mode.equals("both")) {
            throw new IllegalArgumentException("--mode " + mode + ": expected linear, index or both");
        }
        for (String f : files) {
            Descriptor desc = descriptor(f);
            TableMetadata md = org.apache.cassandra.tools.Util.metadataFromSSTable(desc);
            SSTableReader r = open(desc, md);
            if (!mode.equals("index")) {
                header("linear", f, r);
                try (ISSTableScanner s = r.getScanner()) {
                    while (s.hasNext()) {
                        try (UnfilteredRowIterator it = s.next()) {
                            partition(md, it);
                        }
                    }
                }
                summary();
            }
            if (!mode.equals("linear")) {
                header("index", f, r);
                for (DecoratedKey k : indexKeys(r, desc, md)) {
                    try (UnfilteredRowIterator it = rowIterator(r, md, k)) {
                        partition(md, it);
                    }
                }
                summary();
            }
        }
    }

    static void header(String pass, String file, SSTableReader r) {
        StatsMetadata s = r.getSSTableMetadata();
        System.out.println("# " + pass + " " + file + " version=" + r.descriptor.version
                + " repaired_at=" + s.repairedAt + " pending_repair=" + s.pendingRepair
                + " transient=" + s.isTransient);
    }

    static void partition(TableMetadata md, UnfilteredRowIterator it) {
        DecoratedKey k = it.partitionKey();
        List<String> items = items(md, it);
        if (rowDigest) {
            rowDigest(k, items);
            return;
        }
        StringBuilder b = new StringBuilder();
        for (String item : items) {
            b.append(item).append(" | ");
        }
        boolean empty = items.isEmpty();
        String body = empty ? "EMPTY" : b.toString().replace('\n', ' ');
        if (digest) {
            long t = (Long) k.getToken().getTokenValue();
            if (empty) {
                dEmpty++;
                return;
            }
            byte[] h = md5.digest((k.getToken() + "\t" + ByteBufferUtil.bytesToHex(k.getKey()) + "\t" + body)
                    .getBytes(java.nio.charset.StandardCharsets.UTF_8));
            long x = ByteBuffer.wrap(h).getLong();
            dCount++;
            dSum += x;
            dXor ^= x;
            dMin = Math.min(dMin, t);
            dMax = Math.max(dMax, t);
            return;
        }
        System.out.println(k.getToken() + "\t" + ByteBufferUtil.bytesToHex(k.getKey()) + "\t"
                + md.partitionKeyType.getString(k.getKey()).replace('\t', ' ').replace('\n', ' ') + "\t"
                + body);
    }

    /**
     * `--digest rows`: one digest item per row (and per partition deletion and static row),
     * not per partition, so that the digest of a set of sstables does not change when a
     * compaction or anticompaction merges one partition's rows from two sstables into one
     * (CQLSSTableWriter splits a partition across sstables when its buffer fills). Empty
     * partitions (cleave's fillers) add nothing.
     */
    static void rowDigest(DecoratedKey k, List<String> items) {
        if (items.isEmpty()) {
            dEmpty++;
            return;
        }
        String prefix = k.getToken() + "\t" + ByteBufferUtil.bytesToHex(k.getKey()) + "\t";
        for (String item : items) {
            byte[] h = md5.digest((prefix + item.replace('\n', ' ')).getBytes(java.nio.charset.StandardCharsets.UTF_8));
            long x = ByteBuffer.wrap(h).getLong();
            dCount++;
            dSum += x;
            dXor ^= x;
        }
        long t = (Long) k.getToken().getTokenValue();
        dMin = Math.min(dMin, t);
        dMax = Math.max(dMax, t);
    }

    /** The partition's deletion, static row and unfiltereds, each as Cassandra spells it. */
    static List<String> items(TableMetadata md, UnfilteredRowIterator it) {
        List<String> items = new ArrayList<>();
        if (!it.partitionLevelDeletion().isLive()) {
            items.add("DEL " + it.partitionLevelDeletion());
        }
        Row st = it.staticRow();
        if (st != null && !st.isEmpty()) {
            items.add("STATIC " + st.toString(md, true));
        }
        while (it.hasNext()) {
            Unfiltered u = it.next();
            String us = u.toString(md, true);
            // A table without clustering columns: the linear scanner's rows carry
            // Clustering.EMPTY ("EMPTY"), the per-key reads a zero-length clustering ("");
            // the same row, so one spelling.
            if (u.clustering().size() == 0) {
                us = us.replace("]: EMPTY | ", "]:  | ");
            }
            items.add(us);
        }
        return items;
    }

    static boolean rowDigest;
    static boolean digest;
    static final java.security.MessageDigest md5;
    static {
        try {
            md5 = java.security.MessageDigest.getInstance("MD5");
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new ExceptionInInitializerError(e);
        }
    }
    static long dCount, dEmpty, dSum, dXor, dMin = Long.MAX_VALUE, dMax = Long.MIN_VALUE;

    /** `--digest`: the summary line of the pass just read, and a fresh one for the next. */
    static void summary() {
        if (digest) {
            System.out.println("## count=" + dCount + " empty=" + dEmpty + " min=" + dMin + " max=" + dMax
                    + " sum=" + Long.toUnsignedString(dSum) + " xor=" + Long.toUnsignedString(dXor));
        }
        dCount = dEmpty = dSum = dXor = 0;
        dMin = Long.MAX_VALUE;
        dMax = Long.MIN_VALUE;
    }

    // ------------------------------------------------- per-line API differences

    /** 4.x: Descriptor.fromFilename(String); 5.0: Descriptor.fromFile(io.util.File). */
    static Descriptor descriptor(String path) throws Exception {
        try {
            return (Descriptor) Descriptor.class.getMethod("fromFilename", String.class).invoke(null, path);
        } catch (NoSuchMethodException e) {
            Class<?> fc = Class.forName("org.apache.cassandra.io.util.File");
            Object f = fc.getConstructor(String.class).newInstance(path);
            return (Descriptor) Descriptor.class.getMethod("fromFile", fc).invoke(null, f);
        }
    }

    /** 4.x: openNoValidation(desc, ref); 5.0: openNoValidation(owner, desc, ref). */
    static SSTableReader open(Descriptor desc, TableMetadata md) throws Exception {
        TableMetadataRef ref = TableMetadataRef.forOfflineTools(md);
        for (Method m : SSTableReader.class.getMethods()) {
            if (!m.getName().equals("openNoValidation")) {
                continue;
            }
            Class<?>[] p = m.getParameterTypes();
            if (p.length == 2 && p[0] == Descriptor.class && p[1] == TableMetadataRef.class) {
                return (SSTableReader) m.invoke(null, desc, ref);
            }
            if (p.length == 3 && p[1] == Descriptor.class && p[2] == TableMetadataRef.class) {
                return (SSTableReader) m.invoke(null, null, desc, ref);
            }
        }
        throw new IllegalStateException("no SSTableReader.openNoValidation(Descriptor, TableMetadataRef)");
    }

    /**
     * The keys in the partition index, in index order: 5.0 SSTableReader.keyReader() (BIG
     * Index.db or BTI Partitions.db); 4.x io.sstable.KeyIterator over Index.db.
     */
    @SuppressWarnings("unchecked")
    static List<DecoratedKey> indexKeys(SSTableReader r, Descriptor desc, TableMetadata md) throws Exception {
        List<DecoratedKey> keys = new ArrayList<>();
        Method kr;
        try {
            kr = SSTableReader.class.getMethod("keyReader");
        } catch (NoSuchMethodException e) {
            kr = null;
        }
        if (kr != null) {
            Object reader = kr.invoke(r);
            Class<?> c = Class.forName("org.apache.cassandra.io.sstable.KeyReader");
            Method key = c.getMethod("key");
            Method advance = c.getMethod("advance");
            Method exhausted = c.getMethod("isExhausted");
            try {
                while (!(Boolean) exhausted.invoke(reader)) {
                    keys.add(md.partitioner.decorateKey((ByteBuffer) key.invoke(reader)));
                    advance.invoke(reader);
                }
            } finally {
                c.getMethod("close").invoke(reader);
            }
            return keys;
        }
        Class<?> c = Class.forName("org.apache.cassandra.io.sstable.KeyIterator");
        Object it = c.getConstructor(Descriptor.class, TableMetadata.class).newInstance(desc, md);
        try {
            Iterator<DecoratedKey> i = (Iterator<DecoratedKey>) it;
            while (i.hasNext()) {
                keys.add(i.next());
            }
        } finally {
            c.getMethod("close").invoke(it);
        }
        return keys;
    }

    /**
     * The partition of `k` found through the index: rowIterator (4.1+) or iterator (4.0), with
     * SSTableReadsListener.NOOP_LISTENER (io.sstable.format in 4.x, io.sstable in 5.0).
     */
    static UnfilteredRowIterator rowIterator(SSTableReader r, TableMetadata md, DecoratedKey k) throws Exception {
        Class<?> listener;
        try {
            listener = Class.forName("org.apache.cassandra.io.sstable.SSTableReadsListener");
        } catch (ClassNotFoundException e) {
            listener = Class.forName("org.apache.cassandra.io.sstable.format.SSTableReadsListener");
        }
        Object noop = listener.getField("NOOP_LISTENER").get(null);
        for (String name : new String[] {"rowIterator", "iterator"}) {
            try {
                Method m = r.getClass().getMethod(name, DecoratedKey.class, Slices.class, ColumnFilter.class,
                        boolean.class, listener);
                return (UnfilteredRowIterator) m.invoke(r, k, Slices.ALL, ColumnFilter.all(md), false, noop);
            } catch (NoSuchMethodException e) {
                // the other line's name
            }
        }
        throw new IllegalStateException("no SSTableReader.rowIterator/iterator(DecoratedKey, ...)");
    }
}
