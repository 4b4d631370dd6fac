"""Traffic classes: the values of ``traffic_class`` on every row of ``pageviews``.

- :data:`BOT`: the line's user agent matches an entry of the pinned crawler-user-agents list
  (:mod:`bq_platform.lib.traffic.crawlers`); ``bot_reason`` names that entry.
- :data:`SUSPECTED_BOT`: not on the list, but one of the heuristics of
  :mod:`bq_platform.lib.traffic.heuristics` marks the line; ``bot_reason`` names the heuristic
  and its threshold.
- :data:`HUMAN`: neither; ``bot_reason`` is null.

The list wins over the heuristics: a line that both match is :data:`BOT`. Rows are classified,
never dropped.
"""

HUMAN = "human"
BOT = "bot"
SUSPECTED_BOT = "suspected_bot"

#: Every traffic class, in the order reports list them.
TRAFFIC_CLASSES: tuple[str, ...] = (HUMAN, BOT, SUSPECTED_BOT)
#: The classes counted as ``bot_pageviews`` (everything but :data:`HUMAN`).
BOT_CLASSES: frozenset[str] = frozenset({BOT, SUSPECTED_BOT})
