"""A local pipeline in a temporary folder, driven through the code location's definitions.

``pipeline`` gives the definitions loaded against ``BQ_PLATFORM_HOME=<tmp>``, a Dagster
instance, the object store, helpers that land crafted CLF lines and execute the run requests
a sensor returns (as the daemon would, in process), and a Spark resource that counts the
sessions the runs set up.
"""

import dataclasses
import datetime as dt
import gzip
import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import dagster as dg
import pytest

from bq_platform.defs.pageviews.spark_build import SparkResource
from bq_platform.defs.resources import build_resources
from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse

SITE = "example.org"
_files = itertools.count()


class CountingSparkResource(SparkResource):
    """The project's Spark resource, recording each run that sets up a session."""

    setups: ClassVar[list[str]] = []

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        CountingSparkResource.setups.append(context.run_id if context.dagster_run else "")
        super().setup_for_execution(context)


@dataclasses.dataclass
class Pipeline:
    home: Path
    store: LocalObjectStore
    instance: dg.DagsterInstance
    definitions: dg.Definitions
    resources: dict[str, Any]

    def land(self, hour: dt.datetime, lines: int, path: str = "/index.html") -> None:
        """Land a file of ``lines`` CLF page requests, all in ``hour`` (UTC)."""
        stamp = hour.strftime("%d/%b/%Y:%H")
        tag = next(_files)
        text = "".join(
            f'h{tag}-{i}.example - - [{stamp}:{i % 60:02d}:{i % 60:02d} +0000] "GET {path} '
            f'HTTP/1.0" 200 {100 + i}\n'
            for i in range(lines)
        )
        file = self.home / f"in-{tag}.log.gz"
        file.write_bytes(gzip.compress(text.encode()))
        land_file(self.store, SITE, file)

    def evaluate(
        self, sensor: dg.SensorDefinition, instance: dg.DagsterInstance | None = None
    ) -> Any:
        """One tick of ``sensor`` (no cursor) against ``instance`` (default: the pipeline's)."""
        with dg.build_sensor_context(
            cursor=None, instance=instance or self.instance, resources=self.resources
        ) as context:
            return sensor(context)

    def execute(self, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
        """Run a sensor's run request in process, as the daemon would launch it."""
        job = self.definitions.resolve_job_def(request.job_name)
        result = job.execute_in_process(
            instance=self.instance,
            tags=request.tags,
            partition_key=request.partition_key,
            raise_on_error=False,
        )
        assert result.success, [
            e.step_failure_data.error.message for e in result.all_events if e.is_step_failure
        ]
        return result

    def execute_all(self, requests: Sequence[dg.RunRequest]) -> list[dg.ExecuteInProcessResult]:
        return [self.execute(r) for r in requests]

    def query(self, sql: str) -> list[dict[str, Any]]:
        wh = DuckDBWarehouse(self.home / "warehouse.duckdb")
        try:
            return wh.query(sql)
        finally:
            wh.close()


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark) -> Iterator[Pipeline]:
    """Definitions and resources bound to ``tmp_path``; a persistent test instance."""
    home = tmp_path / "bqp"
    home.mkdir()
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(home))
    monkeypatch.delenv("BQ_PLATFORM_ENV", raising=False)
    from bq_platform.definitions import defs

    resources = build_resources("local")
    resources["spark"] = CountingSparkResource(spark_config=resources["spark"].spark_config)
    CountingSparkResource.setups.clear()
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        loaded = defs()
        definitions = dg.Definitions(
            assets=loaded.assets,
            asset_checks=loaded.asset_checks,
            jobs=loaded.jobs,
            sensors=loaded.sensors,
            schedules=loaded.schedules,
            resources=resources,
            executor=loaded.executor,
        )
        yield Pipeline(home, LocalObjectStore(home / "lake"), instance, definitions, resources)
