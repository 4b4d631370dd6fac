"""How the platform marks its Dagster runs, and which run statuses count as not ended.

Every run the platform starts carries :data:`TRIGGER_TAG`: ``cli`` for ``bq-platform run``
(with :data:`PID_TAG`, the process that runs it in-process), ``automation`` for the sensor.
"""

import dagster as dg

TRIGGER_TAG = "bq_platform/trigger"
PID_TAG = "bq_platform/pid"
CLI_TRIGGER = "cli"
AUTOMATION_TRIGGER = "automation"
#: Statuses of a run that has not ended (queued, starting, running or being canceled).
IN_PROGRESS_STATUSES = (
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
)
