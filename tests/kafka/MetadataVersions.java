// Kafka's own metadata.version feature levels, from the jars of one release: the judge of
// compactor.cluster.release (tests/kafka/test_releases.py). Prints one JSON line:
// {"latest_production": LEVEL, "levels": {"LEVEL": "X.Y-IVn", ...}}.
//
//   java -cp 'libs/*' tests/kafka/MetadataVersions.java

import org.apache.kafka.server.common.MetadataVersion;

public class MetadataVersions {
    public static void main(String[] args) {
        StringBuilder levels = new StringBuilder();
        for (MetadataVersion v : MetadataVersion.values()) {
            levels.append(levels.length() == 0 ? "" : ",")
                    .append('"').append(v.featureLevel()).append("\":\"").append(v.version()).append('"');
        }
        System.out.println("{\"latest_production\":" + MetadataVersion.latestProduction().featureLevel()
                + ",\"levels\":{" + levels + "}}");
    }
}
