"""What counts as a line's user agent.

A Combined log writes a missing ``User-Agent`` header as ``-`` (Apache's mod_log_config and
nginx's ``$http_user_agent`` both do); an empty quoted field is missing too. Either way the line
has no user agent, as for a Common Log Format line, which has no such field at all.
"""

#: Field values that mean "no user agent".
NO_USER_AGENT_VALUES: frozenset[str] = frozenset({"", "-"})


def has_user_agent(user_agent: str | None) -> bool:
    """True unless ``user_agent`` is None, ``''`` or ``'-'`` (any other text counts, blanks
    included)."""
    return user_agent is not None and user_agent not in NO_USER_AGENT_VALUES
