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
 *       RemoteLogManager.createRemoteStorageManager / configureRSM do) into FILE, and its
 *       transaction index beside it (FILE's name with .txnindex for .log) when it has
 *       aborted transactions; one JSON line per segment (bytes written, or the error).
 *   replace --server-properties P --log-dir D --bootstrap HOST:PORT --replace ID=NEW=F [...]
 *       each served segment ID replaced by its erased copy in folder F under the id NEW, one
 *       after the other with one RLMM (see replace()); one JSON line per step, or the error
 *       of a segment (the others are still replaced).
 *   resolve --server-properties P --log-dir D --bootstrap HOST:PORT --segment ID --new-id NEW
 *           --partition TOPIC_ID:TOPIC:N
 *       a replacement of ID by NEW that a crash interrupted, finished or undone (see resolve()).
 *
 * Exit 0 when every step worked, 2 on bad arguments, 3 when the metadata cannot be read, 4
 * when a fetch (the other segments' lines are still written), a replacement or a resolution
 * failed (the steps done are written).
 */

import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.file.Files;
import java.nio.file.Path;
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
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.BiFunction;

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
import org.apache.kafka.server.log.remote.metadata.storage.ClassLoaderAwareRemoteLogMetadataManager;
import org.apache.kafka.server.log.remote.storage.ClassLoaderAwareRemoteStorageManager;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadataManager;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemoteLogManagerConfig;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
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
        if (args[0].equals("replace")) {
            System.exit(replace(props, opts, segments, out));
        }
        if (args[0].equals("resolve")) {
            System.exit(resolve(props, opts, segments, out));
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
                    // its aborted transactions too (a rewrite carries them over), when it has any
                    if (!m.isTxnIdxEmpty() && into.getName().endsWith(".log")) {
                        String name = into.getName();
                        File txn = new File(into.getParentFile(), name.substring(0, name.length() - 4) + ".txnindex");
                        try (InputStream index = rsm.fetchIndex(m, RemoteStorageManager.IndexType.TRANSACTION)) {
                            Files.copy(index, txn.toPath());
                        }
                    }
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

    /**
     * Replace remote segments by their erased copies (each --replace OLD=NEW=DIR: the files
     * segment.log, segment.index, segment.timeindex, segment.txnindex when it has one, in DIR),
     * one after the other with one RLMM caught up once a partition, through the
     * cluster's RLMM (--bootstrap) and the broker's RSM, in the order that keeps one whole
     * segment served at every step: the copy under a new segment id with the old one's start
     * and end offsets, leader epochs and max timestamp (COPY_SEGMENT_STARTED, copyLogSegmentData,
     * COPY_SEGMENT_FINISHED: Kafka's RemoteLogLeaderEpochState maps the start offset to the
     * newer id, the old one becomes unreferenced), then the old one retired
     * (DELETE_SEGMENT_STARTED, whose offset mapping is removed only if it still names the old id,
     * deleteLogSegmentData, DELETE_SEGMENT_FINISHED). The producer snapshot and the leader
     * epoch checkpoint are the old segment's, fetched through the RSM (the offsets and the
     * producers' last batches stay). One JSON line per step done; a segment that fails has
     * its error line and the next one is replaced still.
     */
    static int replace(Properties props, Map<String, List<String>> opts,
                       Map<String, RemoteLogSegmentMetadata> segments, PrintStream out) throws Exception {
        int brokerId = brokerId(props);
        RemoteStorageManager rsm = storageManager(props);
        File rlmmDir = Files.createTempDirectory("kafka-compactor-rlmm-").toFile();
        RemoteLogMetadataManager rlmm = metadataManager(props, opts.get("bootstrap").get(0), brokerId, rlmmDir);
        boolean failed = false;
        try {
            Map<TopicIdPartition, Map<String, RemoteLogSegmentMetadata>> live = new HashMap<>();
            for (String triple : opts.getOrDefault("replace", List.of())) {
                String[] parts = triple.split("=", 3);
                String oldId = parts[0];
                try {
                    RemoteLogSegmentMetadata listed = segments.get(oldId);
                    if (listed == null) {
                        throw new IllegalStateException("the remote log metadata names no segment " + oldId);
                    }
                    TopicIdPartition tp = listed.topicIdPartition();
                    if (!live.containsKey(tp)) {
                        live.put(tp, live(rlmm, tp));
                    }
                    replaceOne(rsm, rlmm, live.get(tp).get(oldId), oldId,
                        new RemoteLogSegmentId(tp, Uuid.fromString(parts[1])), live.get(tp),
                        new File(parts[2]), brokerId, out);
                } catch (Exception e) {
                    out.println("{\"segment_id\": " + quote(oldId) + ", \"error\": " + quote(e.toString()) + "}");
                    failed = true;
                }
            }
            return failed ? 4 : 0;
        } finally {
            rlmm.close();
            rsm.close();
        }
    }

    /** One replacement, its steps in order (see replace()). */
    static void replaceOne(RemoteStorageManager rsm, RemoteLogMetadataManager rlmm, RemoteLogSegmentMetadata old,
                           String oldId, RemoteLogSegmentId newId, Map<String, RemoteLogSegmentMetadata> live,
                           File dir, int brokerId, PrintStream out) throws Exception {
        // the cluster's word, not the log dir's copy of it: the broker's expiration task
        // may have retired the segment since (RLMExpirationTask)
        if (old == null || old.state() != RemoteLogSegmentState.COPY_SEGMENT_FINISHED) {
            throw new IllegalStateException("segment " + oldId + " is no longer served ("
                + (old == null ? "deleted" : old.state().name()) + " in the cluster's remote log metadata)");
        }
        if (live.containsKey(newId.id().toString())) {
            throw new IllegalStateException("segment id " + newId.id() + " is taken");
        }
        Path snapshot = dir.toPath().resolve("segment.snapshot");
        try (InputStream in = rsm.fetchIndex(old, RemoteStorageManager.IndexType.PRODUCER_SNAPSHOT)) {
            Files.copy(in, snapshot);
        }
        byte[] epochs;
        try (InputStream in = rsm.fetchIndex(old, RemoteStorageManager.IndexType.LEADER_EPOCH)) {
            epochs = in.readAllBytes();
        }
        File txn = new File(dir, "segment.txnindex");
        File log = new File(dir, "segment.log");
        // as RemoteLogManager.copyLogSegment: a transaction index only when it has entries,
        // and the metadata says whether it has (a fetch of an absent one fails)
        boolean txnEmpty = !txn.exists() || txn.length() == 0;
        LogSegmentData data = new LogSegmentData(log.toPath(), dir.toPath().resolve("segment.index"),
            dir.toPath().resolve("segment.timeindex"),
            txnEmpty ? Optional.empty() : Optional.of(txn.toPath()), snapshot, ByteBuffer.wrap(epochs));
        RemoteLogSegmentMetadata copy = new RemoteLogSegmentMetadata(newId, old.startOffset(),
            old.endOffset(), old.maxTimestampMs(), brokerId, System.currentTimeMillis(),
            (int) log.length(), old.segmentLeaderEpochs(), txnEmpty);
        rlmm.addRemoteLogSegmentMetadata(copy).get();
        done(out, "copy_started", oldId, newId);
        Optional<RemoteLogSegmentMetadata.CustomMetadata> custom = rsm.copyLogSegmentData(copy, data);
        done(out, "copied", oldId, newId);
        rlmm.updateRemoteLogSegmentMetadata(new RemoteLogSegmentMetadataUpdate(newId,
            System.currentTimeMillis(), custom, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, brokerId)).get();
        done(out, "copy_finished", oldId, newId);
        retire(rlmm, rsm, old, brokerId, out, "", oldId, newId);
    }

    /**
     * Settle a replacement a crash interrupted (--segment OLD --new-id NEW), by the cluster's
     * remote log metadata now: a copy not yet finished is retired (undone: the old segment was
     * served all along), a finished copy has the old segment retired (finished: the copy is
     * what the broker serves). One JSON line: what was found and done.
     */
    static int resolve(Properties props, Map<String, List<String>> opts,
                       Map<String, RemoteLogSegmentMetadata> segments, PrintStream out) throws Exception {
        String oldId = opts.get("segment").get(0);
        String newIdText = opts.get("new-id").get(0);
        String[] parts = opts.get("partition").get(0).split(":", 3);
        TopicIdPartition tp = new TopicIdPartition(Uuid.fromString(parts[0]), Integer.parseInt(parts[2]), parts[1]);
        int brokerId = brokerId(props);
        RemoteStorageManager rsm = storageManager(props);
        File dir = Files.createTempDirectory("kafka-compactor-rlmm-").toFile();
        RemoteLogMetadataManager rlmm = metadataManager(props, opts.get("bootstrap").get(0), brokerId, dir);
        try {
            Map<String, RemoteLogSegmentMetadata> live = live(rlmm, tp);
            RemoteLogSegmentMetadata old = live.get(oldId);
            RemoteLogSegmentMetadata copy = live.get(newIdText);
            RemoteLogSegmentId newId = new RemoteLogSegmentId(tp, Uuid.fromString(newIdText));
            String found = "{\"old_state\": " + (old == null ? "null" : quote(old.state().name()))
                + ", \"new_state\": " + (copy == null ? "null" : quote(copy.state().name())) + "}";
            out.println(found);
            if (copy != null && copy.state() == RemoteLogSegmentState.COPY_SEGMENT_FINISHED) {
                if (old != null) {
                    retire(rlmm, rsm, old, brokerId, out, "", oldId, newId);
                }
                done(out, "finished", oldId, newId);
            } else {
                if (copy != null) {
                    retire(rlmm, rsm, copy, brokerId, out, "undo_", oldId, newId);
                }
                done(out, "undone", oldId, newId);
            }
            return 0;
        } catch (Exception e) {
            out.println("{\"error\": " + quote(e.toString()) + "}");
            return 4;
        } finally {
            rlmm.close();
            rsm.close();
        }
    }

    /**
     * Retire a segment as RemoteLogManager.deleteRemoteLogSegment does (DELETE_SEGMENT_STARTED,
     * deleteLogSegmentData, DELETE_SEGMENT_FINISHED); each step is idempotent, as the
     * state machine allows a self transition (RemoteLogSegmentState.isValidTransition), so a
     * retirement the broker's expiration task began too ends the same.
     */
    static void retire(RemoteLogMetadataManager rlmm, RemoteStorageManager rsm, RemoteLogSegmentMetadata m,
                       int brokerId, PrintStream out, String prefix, String oldId, RemoteLogSegmentId newId)
            throws Exception {
        rlmm.updateRemoteLogSegmentMetadata(new RemoteLogSegmentMetadataUpdate(m.remoteLogSegmentId(),
            System.currentTimeMillis(), m.customMetadata(), RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
            brokerId)).get();
        done(out, prefix + "delete_started", oldId, newId);
        try {
            rsm.deleteLogSegmentData(m);
        } catch (RemoteResourceNotFoundException gone) {
            // deleted already (by a run a crash stopped after this step, or by the broker)
        }
        done(out, prefix + "deleted", oldId, newId);
        rlmm.updateRemoteLogSegmentMetadata(new RemoteLogSegmentMetadataUpdate(m.remoteLogSegmentId(),
            System.currentTimeMillis(), m.customMetadata(), RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
            brokerId)).get();
        done(out, prefix + "delete_finished", oldId, newId);
    }

    /** Segment id -> metadata of a partition as the cluster's RLMM has it once caught up. */
    static Map<String, RemoteLogSegmentMetadata> live(RemoteLogMetadataManager rlmm, TopicIdPartition tp)
            throws Exception {
        rlmm.onPartitionLeadershipChanges(Set.of(tp), Set.of());
        long deadline = System.currentTimeMillis() + 120_000;
        while (!rlmm.isReady(tp)) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the RLMM did not catch up with " + tp);
            }
            Thread.sleep(100);
        }
        Map<String, RemoteLogSegmentMetadata> out = new LinkedHashMap<>();
        rlmm.listRemoteLogSegments(tp).forEachRemaining(m -> out.put(m.remoteLogSegmentId().id().toString(), m));
        return out;
    }

    static int brokerId(Properties props) {
        return Integer.parseInt(props.getProperty("node.id", props.getProperty("broker.id", "-1")).trim());
    }

    /**
     * A step done: its line; then, for the crash tests only, the process dies at once (no
     * cleanup, as a kill -9) when KAFKA_COMPACTOR_TIER_HALT_AFTER names this step.
     */
    static void done(PrintStream out, String name, String oldId, RemoteLogSegmentId newId) {
        out.println(step(name, oldId, newId));
        if (name.equals(System.getenv("KAFKA_COMPACTOR_TIER_HALT_AFTER"))) {
            out.flush();
            Runtime.getRuntime().halt(137);
        }
    }

    static String step(String name, String oldId, RemoteLogSegmentId newId) {
        return "{\"step\": " + quote(name) + ", \"segment_id\": " + quote(oldId)
            + ", \"new_segment_id\": " + quote(newId.id().toString()) + "}";
    }

    /**
     * The cluster's RemoteLogMetadataManager, made and configured as RemoteLogManager's
     * configureRLMM does for a broker: its rlmm.config.* settings, the cluster reached at
     * bootstrap, this broker's id, a log dir of its own.
     */
    static RemoteLogMetadataManager metadataManager(Properties props, String bootstrap, int brokerId,
                                                    File dir) throws Exception {
        RemoteLogManagerConfig config = config(props);
        RemoteLogMetadataManager rlmm = RemoteTier.<RemoteLogMetadataManager>plugin(
            config.remoteLogMetadataManagerClassName(), config.remoteLogMetadataManagerClassPath(),
            ClassLoaderAwareRemoteLogMetadataManager::new);
        Map<String, Object> rlmmProps = new HashMap<>(config.remoteLogMetadataManagerProps());
        rlmmProps.put(TopicBasedRemoteLogMetadataManagerConfig.REMOTE_LOG_METADATA_COMMON_CLIENT_PREFIX
                      + "bootstrap.servers", bootstrap);
        rlmmProps.put(TopicBasedRemoteLogMetadataManagerConfig.BROKER_ID, brokerId);
        rlmmProps.put(TopicBasedRemoteLogMetadataManagerConfig.LOG_DIR, dir.getAbsolutePath());
        rlmm.configure(rlmmProps);
        return rlmm;
    }

    /** The broker's RemoteStorageManager, made and configured as RemoteLogManager makes it. */
    static RemoteStorageManager storageManager(Properties props) throws Exception {
        RemoteLogManagerConfig config = config(props);
        RemoteStorageManager rsm = RemoteTier.<RemoteStorageManager>plugin(
            config.remoteStorageManagerClassName(), config.remoteStorageManagerClassPath(),
            ClassLoaderAwareRemoteStorageManager::new);
        Map<String, Object> rsmProps = new HashMap<>(config.remoteStorageManagerProps());
        rsmProps.put("broker.id", brokerId(props));
        rsm.configure(rsmProps);
        return rsm;
    }

    static RemoteLogManagerConfig config(Properties props) {
        return new RemoteLogManagerConfig(
            new AbstractConfig(RemoteLogManagerConfig.configDef(), new HashMap<>(props), false));
    }

    /**
     * A plugin the broker names: from its own class path through a ChildFirstClassLoader,
     * wrapped so its calls run with that loader (RemoteLogManager.createRemoteStorageManager
     * and createRemoteLogMetadataManager), else from the broker's class path.
     */
    @SuppressWarnings("unchecked")
    static <T> T plugin(String className, String classPath, BiFunction<T, ClassLoader, T> wrap)
            throws Exception {
        if (classPath != null && !classPath.trim().isEmpty()) {
            ClassLoader loader = new ChildFirstClassLoader(classPath, RemoteTier.class.getClassLoader());
            return wrap.apply((T) loader.loadClass(className).getDeclaredConstructor().newInstance(), loader);
        }
        return (T) Class.forName(className).getDeclaredConstructor().newInstance();
    }

    /** The remote log metadata topic's partition count the RLMM hashes with (its config). */
    static int metadataPartitions(Properties props) {
        RemoteLogManagerConfig config = config(props);
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
