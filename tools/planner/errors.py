"""The planner's one error type: every message names the file, line and field it refuses."""


class PlanError(Exception):
    """A bad profile, trace or argument. str() is the whole message, e.g.
    `trace.csv:7: ContextTokens: not a whole number ('12x')`."""


def where(path, line=None, field=None):
    parts = [str(path)]
    if line is not None:
        parts[0] += ":%d" % line
    if field:
        parts.append(field)
    return ": ".join(parts)
