// Kafka's own log cleaner on one partition directory, without a broker: the judge of the
// differential test (tests/kafka/test_cleaner_differential.py). Written against the
// internal API of Apache Kafka 4.1.2-4.4.0 (org.apache.kafka.storage.internals.log: UnifiedLog,
// LogCleanerManager.cleanableOffsets, Cleaner.doClean), run by the JDK's source launcher:
//
//   java -cp 'libs/*' tests/kafka/KafkaClean.java PARTITION_DIR[:PARTITION_DIR...] NOW_MS CONFIG_FILE \
//        LOG_START RECOVERY_POINT HIGH_WATERMARK FIRST_DIRTY [DEDUPE_BUFFER_BYTES]
//
// CONFIG_FILE holds the topic's configs (KEY=VALUE). The log is opened as a broker opens it
// after a clean shutdown, its high watermark set, and cleaned once, from FIRST_DIRTY (-1:
// the log start) to what Kafka's LogCleanerManager.cleanableOffsets allows at NOW_MS, with
// an offset map of DEDUPE_BUFFER_BYTES (default 64 MiB: one pass for the tests' logs). A map
// too small for the dirty section's keys takes several passes, as a broker's cleaner thread
// does over its next cycles (each pass cleans up to where its map filled). Prints one JSON
// line: the offsets, the passes, the bytes its passes read (CleanerStats.bytesRead) and the
// seconds its passes took (System.nanoTime: the rules' clock is fixed at NOW_MS). Several
// partition dirs (joined by File.pathSeparator) are cleaned one after the other in the one
// JVM, as one cleaner thread takes its logs (bench/kafka_cleaner.py), one line each.

import java.io.File;
import java.io.FileReader;
import java.lang.reflect.Method;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Supplier;

import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.log.Cleaner;
import org.apache.kafka.storage.internals.log.CleanerStats;
import org.apache.kafka.storage.internals.log.LogCleanerManager;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.LogOffsetsListener;
import org.apache.kafka.storage.internals.log.LogToClean;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;
import org.apache.kafka.storage.internals.log.SkimpyOffsetMap;
import org.apache.kafka.storage.internals.log.UnifiedLog;
import org.apache.kafka.storage.internals.utils.Throttler;
import org.apache.kafka.storage.log.metrics.BrokerTopicStats;

public class KafkaClean {
    /** The clock fixed at the round's `now` (the rules read it through Time). */
    static final class FixedTime implements Time {
        private final long now;

        FixedTime(long now) {
            this.now = now;
        }

        public long milliseconds() {
            return now;
        }

        public long nanoseconds() {
            return System.nanoTime();
        }

        public void sleep(long ms) {
        }

        public void waitObject(Object obj, Supplier<Boolean> condition, long deadlineMs) {
        }
    }

    /** A record component of a non-public Kafka class, by its accessor. */
    static Object field(Object record, String name) throws Exception {
        Method accessor = record.getClass().getDeclaredMethod(name);
        accessor.setAccessible(true);
        return accessor.invoke(record);
    }

    public static void main(String[] args) throws Exception {
        for (String path : args[0].split(File.pathSeparator)) {
            clean(new File(path), args);
        }
    }

    static void clean(File dir, String[] args) throws Exception {
        long now = Long.parseLong(args[1]);
        Properties props = new Properties();
        try (FileReader reader = new FileReader(args[2])) {
            props.load(reader);
        }
        long logStart = Long.parseLong(args[3]);
        long recoveryPoint = Long.parseLong(args[4]);
        long highWatermark = Long.parseLong(args[5]);
        long firstDirtyArg = Long.parseLong(args[6]);
        int bufferBytes = args.length > 7 ? Integer.parseInt(args[7]) : 64 * 1024 * 1024;

        Time time = new FixedTime(now);
        KafkaScheduler scheduler = new KafkaScheduler(1);
        scheduler.startup();
        LogConfig config = new LogConfig(props);
        UnifiedLog log = UnifiedLog.create(dir, config, logStart, recoveryPoint, scheduler,
                new BrokerTopicStats(), time, 900_000, new ProducerStateManagerConfig(86_400_000, false),
                600_000, new LogDirFailureChannel(1), true, Optional.empty(),
                new ConcurrentHashMap<String, Integer>(), false, LogOffsetsListener.NO_OP_OFFSETS_LISTENER);
        try {
            log.updateHighWatermark(Math.min(highWatermark, log.logEndOffset()));
            Optional<Long> checkpoint = firstDirtyArg < 0 ? Optional.empty() : Optional.of(firstDirtyArg);
            // package-private since 4.3: called by reflection (the class path is one module)
            Method cleanable = LogCleanerManager.class.getDeclaredMethod(
                    "cleanableOffsets", UnifiedLog.class, Optional.class, long.class);
            cleanable.setAccessible(true);
            Object offsets = cleanable.invoke(null, log, checkpoint, now);
            long firstDirty = (Long) field(offsets, "firstDirtyOffset");
            long firstUncleanable = (Long) field(offsets, "firstUncleanableDirtyOffset");
            boolean forceUpdate = (Boolean) field(offsets, "forceUpdateCheckpoint");
            long nextDirty = firstDirty;
            int passes = 0;
            long bytesRead = 0;
            long nanos = 0;
            if (firstUncleanable > firstDirty) {
                Cleaner cleaner = new Cleaner(0, new SkimpyOffsetMap(bufferBytes, "MD5"),
                        1024 * 1024, 16 * 1024 * 1024, 0.9,
                        new Throttler(Double.MAX_VALUE, 300, "cleaner-io", "bytes", time), time, tp -> { });
                while (nextDirty < firstUncleanable) {
                    LogToClean toClean = new LogToClean(log, nextDirty, firstUncleanable, forceUpdate);
                    long started = System.nanoTime();
                    Map.Entry<Long, CleanerStats> result = cleaner.doClean(toClean, now);
                    nanos += System.nanoTime() - started;
                    bytesRead += result.getValue().bytesRead();
                    passes++;
                    if (result.getKey() <= nextDirty) {
                        break;  // no progress: the map holds nothing (an empty dirty section)
                    }
                    nextDirty = result.getKey();
                }
            }
            log.flush(true);
            System.out.println("{\"first_dirty\":" + firstDirty
                    + ",\"first_uncleanable\":" + firstUncleanable
                    + ",\"next_dirty\":" + nextDirty + ",\"passes\":" + passes
                    + ",\"bytes_read\":" + bytesRead + ",\"seconds\":" + (nanos / 1e9) + "}");
        } finally {
            log.close();
            scheduler.shutdown();
        }
    }
}
