/*
 * The judge of compactor.remote.tier.counted_twice (tests/kafka/test_remote_rules.py): reads
 * scenarios, one a line (TARGET;START-END:EPOCH@OFFSET,...|...), feeds Kafka's own
 * RemoteLogMetadataCache the finished segments and then an erased copy of segment TARGET, and
 * prints whether the old segment is still listed finished for one of the leader epochs (what
 * RLMExpirationTask.buildRetentionSizeData adds up). In the cache's package: its methods are
 * package-private.
 */
package org.apache.kafka.server.log.remote.metadata.storage;

import java.io.*;
import java.util.*;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.*;

public class CountedTwice {
    static RemoteLogSegmentMetadata finish(RemoteLogMetadataCache cache, RemoteLogSegmentMetadata m)
            throws Exception {
        cache.addCopyInProgressSegment(m);
        cache.updateRemoteLogSegmentMetadata(new RemoteLogSegmentMetadataUpdate(m.remoteLogSegmentId(),
            0L, Optional.empty(), RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0));
        return m;
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        TopicIdPartition tp = new TopicIdPartition(Uuid.randomUuid(), 0, "t");
        for (String line; (line = in.readLine()) != null; ) {
            String[] parts = line.split(";");
            RemoteLogMetadataCache cache = new RemoteLogMetadataCache();
            cache.markInitialized();
            List<RemoteLogSegmentMetadata> segments = new ArrayList<>();
            Set<Integer> epochs = new TreeSet<>();
            for (String s : parts[1].split("\\|")) {
                String[] x = s.split(":");
                String[] range = x[0].split("-");
                TreeMap<Integer, Long> map = new TreeMap<>();
                for (String e : x[1].split(",")) {
                    String[] eo = e.split("@");
                    map.put(Integer.parseInt(eo[0]), Long.parseLong(eo[1]));
                }
                epochs.addAll(map.keySet());
                segments.add(finish(cache, new RemoteLogSegmentMetadata(
                    new RemoteLogSegmentId(tp, Uuid.randomUuid()), Long.parseLong(range[0]),
                    Long.parseLong(range[1]), 0L, 0, 0L, 100, map, false)));
            }
            RemoteLogSegmentMetadata old = segments.get(Integer.parseInt(parts[0]));
            finish(cache, new RemoteLogSegmentMetadata(new RemoteLogSegmentId(tp, Uuid.randomUuid()),
                old.startOffset(), old.endOffset(), 0L, 0, 1L, 90, old.segmentLeaderEpochs(), false));
            boolean counted = false;
            for (int epoch : epochs) {
                Iterator<RemoteLogSegmentMetadata> it = cache.listRemoteLogSegments(epoch);
                while (it.hasNext()) {
                    RemoteLogSegmentMetadata m = it.next();
                    counted |= m.remoteLogSegmentId().equals(old.remoteLogSegmentId())
                        && m.state() == RemoteLogSegmentState.COPY_SEGMENT_FINISHED;
                }
            }
            System.out.println(counted);
        }
    }
}
