// Kafka's own serialization of the two broker records that carry cordoned log dirs (KIP-1066,
// Kafka 4.3+): RegisterBrokerRecord v4 with the directory ids given as arguments, then
// BrokerRegistrationChangeRecord v3 with the first of them only, printed as the hex of a metadata record value (frame
// version 1, api key, version, message). The judge of the tool's decoder
// (tests/kafka/test_releases.py).
//
//   java -cp 'libs/*' tests/kafka/CordonedRecords.java DIRECTORY_ID...

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metadata.BrokerRegistrationChangeRecord;
import org.apache.kafka.common.metadata.RegisterBrokerRecord;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;

public class CordonedRecords {
    static String value(ApiMessage message, short version) {
        ObjectSerializationCache cache = new ObjectSerializationCache();
        ByteBuffer buffer = ByteBuffer.allocate(3 + message.size(cache, version));
        buffer.put((byte) 1).put((byte) message.apiKey()).put((byte) version);
        message.write(new ByteBufferAccessor(buffer), cache, version);
        return HexFormat.of().formatHex(buffer.array());
    }

    public static void main(String[] args) {
        List<Uuid> dirs = new ArrayList<>();
        for (String arg : args) {
            dirs.add(Uuid.fromString(arg));
        }
        RegisterBrokerRecord.BrokerFeatureCollection features = new RegisterBrokerRecord.BrokerFeatureCollection();
        features.add(new RegisterBrokerRecord.BrokerFeature().setName("metadata.version")
                .setMinSupportedVersion((short) 7).setMaxSupportedVersion((short) 30));
        System.out.println(value(new RegisterBrokerRecord().setBrokerId(1).setBrokerEpoch(7)
                .setIncarnationId(Uuid.randomUuid()).setFeatures(features)
                .setCordonedLogDirs(dirs), (short) 4));
        System.out.println(value(new BrokerRegistrationChangeRecord().setBrokerId(1).setBrokerEpoch(7)
                .setCordonedLogDirs(dirs.subList(0, 1)), (short) 3));
    }
}
