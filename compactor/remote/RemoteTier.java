/*
 * The remote tier of a broker (KIP-405) read through Kafka's own classes: the tool's one JVM
 * helper for tiered storage, run by compactor.remote.tier (never by hand).
 *
 *   list  --server-properties P --log-dir D [--partition TOPIC_ID:TOPIC:N ...]
 *       the remote segments the broker's remote log metadata names: the records of the
 *       __remote_log_metadata partitions in log dir D, decoded by Kafka's
 *       RemoteLogMetadataSerde and folded by Kafka's RemotePartitionMetadataStore (what the
 *       topic-based RLMM's consumer task does with them); one JSON line per segment; then,
 *       for each --partition, the metadata partition Kafka's RemoteLogMetadataTopicPartitioner
 *       puts its records in and whether that partition is in D.
 *   fetch --server-properties P --log-dir D --segment ID=FILE [--segment ID=FILE ...]
 *       each named segment's log data, fetched through the broker's own RemoteStorageManager
 *       (its class, class path and rsm.config.* settings from P, loaded and configured as
 *       RemoteLogManager.createRemoteStorageManager / configureRSM do) into FILE; one JSON
 *       line per segment (bytes written, or the error).
 *
 * Exit 0 when every step worked, 2 on bad arguments, 3 when the metadata cannot be read, 4
 * when a fetch failed (the other segments' lines are still written).
 */

import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.record.FileRecords;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.utils.ChildFirstClassLoader;
import org.apache.kafka.server.log.remote.metadata.storage.RemoteLogMetadataTopicPartitioner;
import org.apache.kafka.server.log.remote.metadata.storage.RemotePartitionMetadataStore;
import org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManagerConfig;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.ClassLoaderAwareRemoteStorageManager;
import org.apache.kafka.server.log.remote.storage.RemoteLogManagerConfig;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

public final class RemoteTier {
    private RemoteTier() { }

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        Map<String, List<String>> opts = options(args);
        if (args.length == 0 || !opts.containsKey("server-properties") || !opts.containsKey("log-dir")) {
            System.err.println("usage: RemoteTier list|fetch --server-properties P --log-dir D "
                               + "[--segment ID=FILE ...]");
            System.exit(2);
        }
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(opts.get("server-properties").get(0))) {
            props.load(in);
        }
        Map<String, RemoteLogSegmentMetadata> segments;
        try {
            segments = segments(new File(opts.get("log-dir").get(0)));
        } catch (Exception e) {
            out.println("{\"error\": " + quote("the remote log metadata cannot be read: " + e) + "}");
            System.exit(3);
            return;
        }
        if (args[0].equals("list")) {
            for (RemoteLogSegmentMetadata m : segments.values()) {
                out.println(describe(m));
            }
            // where each asked partition's metadata lives (the RLMM's own partitioner), and
            // whether that __remote_log_metadata partition is in this log dir at all
            RemoteLogMetadataTopicPartitioner partitioner =
                new RemoteLogMetadataTopicPartitioner(metadataPartitions(props));
            for (String asked : opts.getOrDefault("partition", List.of())) {
                String[] parts = asked.split(":", 3);
                TopicIdPartition tp = new TopicIdPartition(
                    Uuid.fromString(parts[0]), Integer.parseInt(parts[2]), parts[1]);
                int n = partitioner.metadataPartition(tp);
                File dir = new File(opts.get("log-dir").get(0),
                    TopicBasedRemoteLogMetadataManagerConfig.REMOTE_LOG_METADATA_TOPIC_NAME + "-" + n);
                out.println("{\"metadata_of\": " + quote(parts[1] + "-" + parts[2])
                            + ", \"metadata_partition\": " + n + ", \"present\": " + dir.isDirectory() + "}");
            }
            return;
        }
        if (!args[0].equals("fetch")) {
            System.err.println("unknown command " + args[0]);
            System.exit(2);
        }
        boolean failed = false;
        RemoteStorageManager rsm = storageManager(props);
        try {
            for (String pair : opts.getOrDefault("segment", List.of())) {
                String id = pair.substring(0, pair.indexOf('='));
                File into = new File(pair.substring(pair.indexOf('=') + 1));
                RemoteLogSegmentMetadata m = segments.get(id);
                if (m == null) {
                    out.println("{\"segment_id\": " + quote(id) + ", \"error\": "
                                + quote("the remote log metadata names no such segment") + "}");
                    failed = true;
                    continue;
                }
                try (InputStream in = rsm.fetchLogSegment(m, 0);
                     OutputStream to = new FileOutputStream(into)) {
                    long n = in.transferTo(to);
                    out.println("{\"segment_id\": " + quote(id) + ", \"bytes\": " + n + "}");
                } catch (Exception e) {
                    out.println("{\"segment_id\": " + quote(id) + ", \"error\": " + quote(e.toString()) + "}");
                    failed = true;
                }
            }
        } finally {
            rsm.close();
        }
        System.exit(failed ? 4 : 0);
    }

    /** The broker's RemoteStorageManager, made and configured as RemoteLogManager makes it. */
    static RemoteStorageManager storageManager(Properties props) throws Exception {
        Map<Object, Object> all = new HashMap<>(props);
        RemoteLogManagerConfig config = new RemoteLogManagerConfig(
            new AbstractConfig(RemoteLogManagerConfig.configDef(), all, false));
        String classPath = config.remoteStorageManagerClassPath();
        RemoteStorageManager rsm;
        if (classPath != null && !classPath.trim().isEmpty()) {
            ClassLoader loader = new ChildFirstClassLoader(classPath, RemoteTier.class.getClassLoader());
            rsm = new ClassLoaderAwareRemoteStorageManager(
                (RemoteStorageManager) loader.loadClass(config.remoteStorageManagerClassName())
                    .getDeclaredConstructor().newInstance(), loader);
        } else {
            rsm = (RemoteStorageManager) Class.forName(config.remoteStorageManagerClassName())
                .getDeclaredConstructor().newInstance();
        }
        Map<String, Object> rsmProps = new HashMap<>(config.remoteStorageManagerProps());
        rsmProps.put("broker.id", Integer.valueOf(props.getProperty("node.id", props.getProperty("broker.id", "-1")).trim()));
        rsm.configure(rsmProps);
        return rsm;
    }

    /** The remote log metadata topic's partition count the RLMM hashes with (its config). */
    static int metadataPartitions(Properties props) {
        Map<Object, Object> all = new HashMap<>(props);
        RemoteLogManagerConfig config = new RemoteLogManagerConfig(
            new AbstractConfig(RemoteLogManagerConfig.configDef(), all, false));
        Object n = config.remoteLogMetadataManagerProps().get(
            TopicBasedRemoteLogMetadataManagerConfig.REMOTE_LOG_METADATA_TOPIC_PARTITIONS_PROP);
        return n == null ? TopicBasedRemoteLogMetadataManagerConfig.DEFAULT_REMOTE_LOG_METADATA_TOPIC_PARTITIONS
                         : Integer.parseInt(n.toString().trim());
    }

    /** Segment id -> its metadata now, from every __remote_log_metadata partition of the log dir. */
    static Map<String, RemoteLogSegmentMetadata> segments(File logDir) throws Exception {
        String topic = TopicBasedRemoteLogMetadataManagerConfig.REMOTE_LOG_METADATA_TOPIC_NAME;
        RemoteLogMetadataSerde serde = new RemoteLogMetadataSerde();
        RemotePartitionMetadataStore store = new RemotePartitionMetadataStore();
        Set<TopicIdPartition> seen = new LinkedHashSet<>();
        File[] dirs = logDir.listFiles((d, name) -> name.startsWith(topic + "-")
                                                    && name.substring(topic.length() + 1).matches("\\d+"));
        if (dirs == null) {
            throw new IllegalArgumentException(logDir + " is not a readable directory");
        }
        for (File dir : dirs) {
            TreeMap<Long, File> logs = new TreeMap<>();
            for (File f : dir.listFiles((d, name) -> name.endsWith(".log"))) {
                logs.put(Long.parseLong(f.getName().substring(0, f.getName().length() - 4)), f);
            }
            for (File f : logs.values()) {
                try (FileRecords records = FileRecords.open(f, false)) {
                    for (RecordBatch batch : records.batches()) {
                        if (batch.isControlBatch()) {
                            continue;
                        }
                        for (Record r : batch) {
                            if (!r.hasValue()) {
                                continue;
                            }
                            byte[] value = new byte[r.valueSize()];
                            r.value().get(value);
                            RemoteLogMetadata m = serde.deserialize(value);
                            if (seen.add(m.topicIdPartition())) {
                                store.maybeLoadPartition(m.topicIdPartition());
                            }
                            if (m instanceof RemoteLogSegmentMetadata s) {
                                store.handleRemoteLogSegmentMetadata(s);
                            } else if (m instanceof RemoteLogSegmentMetadataUpdate u) {
                                store.handleRemoteLogSegmentMetadataUpdate(u);
                            } else if (m instanceof RemotePartitionDeleteMetadata d) {
                                store.handleRemotePartitionDeleteMetadata(d);
                            }
                        }
                    }
                }
            }
        }
        // listRemoteLogSegments is package-private: what the RLMM answers the broker with
        Method list = RemotePartitionMetadataStore.class.getDeclaredMethod(
            "listRemoteLogSegments", TopicIdPartition.class);
        list.setAccessible(true);
        Map<String, RemoteLogSegmentMetadata> out = new LinkedHashMap<>();
        for (TopicIdPartition tp : seen) {
            store.markInitialized(tp);
            Iterator<?> it;
            try {
                it = (Iterator<?>) list.invoke(store, tp);
            } catch (java.lang.reflect.InvocationTargetException e) {
                continue;  // the partition was deleted from the remote tier
            }
            List<RemoteLogSegmentMetadata> sorted = new ArrayList<>();
            it.forEachRemaining(m -> sorted.add((RemoteLogSegmentMetadata) m));
            sorted.sort((a, b) -> Long.compare(a.startOffset(), b.startOffset()));
            for (RemoteLogSegmentMetadata m : sorted) {
                out.put(m.remoteLogSegmentId().id().toString(), m);
            }
        }
        return out;
    }

    static String describe(RemoteLogSegmentMetadata m) {
        TopicIdPartition tp = m.topicIdPartition();
        StringBuilder epochs = new StringBuilder("{");
        for (Map.Entry<Integer, Long> e : m.segmentLeaderEpochs().entrySet()) {
            if (epochs.length() > 1) {
                epochs.append(", ");
            }
            epochs.append(quote(e.getKey().toString())).append(": ").append(e.getValue());
        }
        epochs.append("}");
        String custom = m.customMetadata()
            .map(c -> quote(Base64.getEncoder().encodeToString(c.value()))).orElse("null");
        return "{\"topic\": " + quote(tp.topic()) + ", \"topic_id\": " + quote(tp.topicId().toString())
            + ", \"partition\": " + tp.partition()
            + ", \"segment_id\": " + quote(m.remoteLogSegmentId().id().toString())
            + ", \"start_offset\": " + m.startOffset() + ", \"end_offset\": " + m.endOffset()
            + ", \"state\": " + quote(m.state().name()) + ", \"size_bytes\": " + m.segmentSizeInBytes()
            + ", \"max_timestamp_ms\": " + m.maxTimestampMs() + ", \"broker_id\": " + m.brokerId()
            + ", \"event_timestamp_ms\": " + m.eventTimestampMs()
            + ", \"leader_epochs\": " + epochs + ", \"custom_metadata\": " + custom
            + ", \"txn_index_empty\": " + m.isTxnIdxEmpty() + "}";
    }

    static Map<String, List<String>> options(String[] args) {
        Map<String, List<String>> out = new HashMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                System.err.println("expected an option, got " + args[i]);
                System.exit(2);
            }
            out.computeIfAbsent(args[i].substring(2), k -> new ArrayList<>()).add(args[i + 1]);
        }
        return out;
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
