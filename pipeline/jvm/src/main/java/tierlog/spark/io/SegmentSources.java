package tierlog.spark.io;

import com.fasterxml.jackson.databind.JsonNode;

/** A split's source from the planner's JSON (split_json.py's {@code "source"}). */
public final class SegmentSources {
    private SegmentSources() {}

    public static SegmentSource of(JsonNode source) {
        String kind = source.get("kind").asText();
        String name = source.get("name").asText();
        long base = source.get("base").asLong();
        if (kind.equals("file")) {
            return new FileSource(source.get("path").asText(), base, name);
        }
        throw new IllegalArgumentException("unknown segment source kind " + kind + " for " + name);
    }
}
