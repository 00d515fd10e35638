package tierlog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.util.function.Function;

/**
 * The driver's planner: installed by {@code tierlog.pipeline.register(spark)} from Python, used
 * by every scan of the JVM. One per JVM, as there is one SparkContext per driver JVM; a new
 * registration replaces the old one (a new Python session over the same JVM).
 */
public final class Planners {
    public static final ObjectMapper JSON = new ObjectMapper();
    private static volatile Planner installed;

    private Planners() {}

    /** Called from Python (py4j) with the callback object that implements {@link Planner}. */
    public static void install(Planner planner) {
        installed = planner;
    }

    /** The answer of {@code call} on the installed planner, unwrapped from its envelope. */
    public static JsonNode ask(Function<Planner, String> call) {
        Planner planner = installed;
        if (planner == null) {
            throw new PlanningException(
                    "InvalidOptionError: format(\"tierlog\") has no planner in this JVM: call "
                            + "tierlog.pipeline.register(spark) in the Python driver first");
        }
        JsonNode answer;
        try {
            answer = JSON.readTree(call.apply(planner));
        } catch (IOException error) {
            throw new IllegalStateException("the tierlog planner answered malformed JSON", error);
        }
        JsonNode failure = answer.get("error");
        if (failure != null) {
            throw new PlanningException(
                    failure.path("type").asText() + ": " + failure.path("message").asText());
        }
        return answer.get("ok");
    }

    /** {@code value} as JSON text (options, filters and offsets passed to the planner). */
    public static String toJson(Object value) {
        try {
            return JSON.writeValueAsString(value);
        } catch (IOException error) {
            throw new IllegalStateException("cannot write " + value + " as JSON", error);
        }
    }
}
