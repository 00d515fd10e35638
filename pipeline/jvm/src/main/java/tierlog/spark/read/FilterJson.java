package tierlog.spark.read;

import java.sql.Timestamp;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import tierlog.spark.Planners;

/**
 * Pushed filters as the JSON the Python planner reads back into PySpark's filter objects
 * (tierlog/pipeline/filters_json.py): {@code {"op", "column", "value"}}, or {@code "values"}
 * for IN; a timestamp as {@code {"epoch_us": n}}. Only the comparisons and values that can
 * bound a scan are sent; the planner decides what they bound.
 */
final class FilterJson {
    private FilterJson() {}

    /** The JSON text of every filter {@link #of} understands. */
    static String all(Filter[] filters) {
        List<Map<String, Object>> encoded = new ArrayList<>();
        for (Filter filter : filters) {
            Map<String, Object> one = of(filter);
            if (one != null) {
                encoded.add(one);
            }
        }
        return Planners.toJson(encoded);
    }

    /** One filter as a JSON-ready map, or null when it cannot bound a scan. */
    static Map<String, Object> of(Filter filter) {
        if (filter instanceof In in) {
            List<Object> values = new ArrayList<>();
            for (Object value : in.values()) {
                Object plain = plain(value);
                if (plain == null) {
                    return null;
                }
                values.add(plain);
            }
            return encoded("In", in.attribute(), "values", values);
        }
        String op;
        String column;
        Object value;
        if (filter instanceof EqualTo f) {
            op = "EqualTo";
            column = f.attribute();
            value = f.value();
        } else if (filter instanceof GreaterThan f) {
            op = "GreaterThan";
            column = f.attribute();
            value = f.value();
        } else if (filter instanceof GreaterThanOrEqual f) {
            op = "GreaterThanOrEqual";
            column = f.attribute();
            value = f.value();
        } else if (filter instanceof LessThan f) {
            op = "LessThan";
            column = f.attribute();
            value = f.value();
        } else if (filter instanceof LessThanOrEqual f) {
            op = "LessThanOrEqual";
            column = f.attribute();
            value = f.value();
        } else {
            return null;
        }
        Object plain = plain(value);
        return plain == null ? null : encoded(op, column, "value", plain);
    }

    private static Map<String, Object> encoded(String op, String column, String key, Object value) {
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("op", op);
        result.put("column", column);
        result.put(key, value);
        return result;
    }

    private static Object plain(Object value) {
        if (value instanceof String || value instanceof Integer || value instanceof Long) {
            return value;
        }
        if (value instanceof Short || value instanceof Byte) {
            return ((Number) value).intValue();
        }
        if (value instanceof Timestamp timestamp) {
            return Map.of("epoch_us", ChronoUnit.MICROS.between(Instant.EPOCH, timestamp.toInstant()));
        }
        if (value instanceof Instant instant) {
            return Map.of("epoch_us", ChronoUnit.MICROS.between(Instant.EPOCH, instant));
        }
        return null;
    }
}
