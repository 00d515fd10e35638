package tierlog.spark;

/**
 * A query the Python planner refused (bad options, lost data...), or a planner that is not
 * installed; the message starts with the tierlog error's type name.
 */
public final class PlanningException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    public PlanningException(String message) {
        super(message);
    }
}
