"""``bq-platform`` as users run it: concurrent runs, quiet output, one message per failure."""

import gzip
import json

import dagster as dg
import pytest
from click.testing import CliRunner

import bq_platform.cli.instance as instance_module
import bq_platform.cli.main as cli_module
import bq_platform.cli.runner as runner_module
from bq_platform.cli.instance import dagster_yaml, ensure_dagster_yaml
from bq_platform.cli.main import main
from bq_platform.cli.runner import PipelineRunner
from bq_platform.lib.core import layout
from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.cli.cli_home import NASA, SLICE_LINES, CliHome
from bq_platform_tests.lib.hourly_build.test_retention import lake

#: Set-up chatter that a default run must not print.
NOISE = ("alembic", " WARN ", " - dagster - ", "Traceback", "log4j", "setLogLevel")


def assert_quiet(output: str) -> None:
    for noise in NOISE:
        assert noise not in output, f"{noise!r} in:\n{output}"


@pytest.mark.spark
def test_two_concurrent_runs_on_a_fresh_home_end_cleanly(tmp_path, access_logs):
    home = CliHome(tmp_path)
    home.land_slice(access_logs, tmp_path)

    first, second = home.start("run"), home.start("run")
    codes = first.wait(), second.wait()

    outputs = first.output + "\n---\n" + second.output
    assert codes == (0, 0), outputs
    assert "waiting up to 3600 s" in outputs  # the second waited for the first's lock
    assert sum(row[2] for row in home.audit()) == SLICE_LINES
    rows, distinct = home.pageviews()
    assert rows == distinct > 0
    # The instance works afterwards: a third run reads it and finds the day up to date.
    third = home.cli("run")
    assert third.returncode == 0, third.stdout
    assert "1995-08-01: skip" in third.stdout
    runs = home.runs()
    assert len(runs) == 2 and {r.status for r in runs} == {dg.DagsterRunStatus.SUCCESS}
    # Default output: the plan, one line per step, the summary.
    assert_quiet(outputs)
    assert len(first.lines) < 40, first.output


@pytest.mark.spark
def test_a_corrupt_landed_file_fails_at_once_with_one_message(tmp_path, access_logs):
    home = CliHome(tmp_path)
    home.land_slice(access_logs, tmp_path)
    (data_key,) = [
        p for p in (home.lake / layout.LANDING_PREFIX).rglob("*.log.gz") if "T04" in str(p)
    ]
    data_key.write_bytes(gzip.compress(b"not what the manifest says\n"))

    result = home.cli("run")

    assert result.returncode == 1
    assert result.stdout.count("LandingError") == 1, result.stdout
    assert data_key.name[:32] in result.stdout  # names the file
    assert f"bq-platform land --site {NASA} <folder>/nasa-slice.log" in result.stdout
    assert_quiet(result.stdout)
    (hourly,) = [r for r in home.runs() if r.job_name == "pageviews_hourly_job"]
    with dg.DagsterInstance.from_config(str(home.dagster_home)) as instance:
        events = instance.all_logs(hourly.run_id)
    retries = [e for e in events if e.dagster_event and e.dagster_event.is_step_up_for_retry]
    assert retries == []


@pytest.mark.spark
def test_a_landed_file_without_its_manifest_is_named_with_the_command_that_lands_it(
    tmp_path, access_logs
):
    """The run names the site, the hour, the file and the ``land`` command, once and without
    a traceback; that command, then ``run``, publishes the day whole."""
    home = CliHome(tmp_path)
    home.land_slice(access_logs, tmp_path)
    (manifest,) = (home.lake / layout.LANDING_PREFIX).rglob("hour=1995-08-01T04/*.manifest.json")
    manifest.unlink()
    data_file = manifest.with_name(manifest.name.replace(".manifest.json", ".log.gz"))

    result = home.cli("run")

    assert result.returncode == 1, result.stdout
    command = f"bq-platform land --site {NASA} <folder>/nasa-slice.log"
    (line,) = [line for line in result.stdout.splitlines() if data_file.name in line]
    assert f"{NASA} 1995-08-01T04: landed file {data_file} has no manifest" in line
    assert "FAILED" in line and command in line
    assert "DagsterAssetCheckFailedError" not in result.stdout
    assert_quiet(result.stdout)

    relanded = home.cli(*command.replace("<folder>", str(tmp_path)).split()[1:])
    assert relanded.returncode == 0, relanded.stdout
    again = home.cli("run")
    assert again.returncode == 0, again.stdout
    assert sum(row[2] for row in home.audit()) == SLICE_LINES


def test_deadletters_counts_then_samples_of_the_current_attempts(tmp_path, monkeypatch):
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    monkeypatch.delenv("BQ_PLATFORM_ENV", raising=False)
    lake(tmp_path)  # two hours, each with a superseded attempt holding the same lines

    result = CliRunner().invoke(main, ["deadletters", "--limit", "1"])

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "2 dead letters in 2 hours"
    assert lines[1].split() == ["2", "malformed"]
    assert lines[3].split()[:4] == ["site", "hour", "line", "reason"]
    assert lines[4].split() == [
        "ksc.nasa.gov",
        "1995-08-01T05",
        "1",
        "malformed",
        "landing/x.log.gz",
    ]
    assert lines[5].strip() == "garbage"
    assert len(lines) == 6

    only = CliRunner().invoke(
        main, ["deadletters", "--start", "1995-08-01T06", "--end", "1995-08-01T06"]
    )
    assert only.output.splitlines()[0] == "1 dead letters in 1 hours"
    none = CliRunner().invoke(main, ["deadletters", "--reason", "bad_status"])
    assert none.output.strip() == "no dead letters in 2 hours with reason bad_status"


def test_run_refuses_a_broken_dagster_yaml_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    (tmp_path / "dh").mkdir()
    (tmp_path / "dh" / "dagster.yaml").write_text(json.dumps(["not", "a", "mapping"]))

    result = CliRunner().invoke(main, ["run"])

    assert result.exit_code == 1
    assert "dagster.yaml" in result.output and "Traceback" not in result.output


def test_run_after_the_data_folder_moved_keeps_its_history_there(tmp_path, monkeypatch):
    """The instance keeps its history in Dagster's default files, relative to its home: after
    the data folder is moved, runs use the new place and never create the old one again."""
    for name in ("BQ_PLATFORM_ENV", "DAGSTER_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path / "before"))
    first = CliRunner().invoke(main, ["run"])
    assert first.exit_code == 0, first.output
    (tmp_path / "before").rename(tmp_path / "after")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # dagster_home() exported the old one
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path / "after"))

    moved = CliRunner().invoke(main, ["run"])

    assert moved.exit_code == 0, moved.output
    assert (tmp_path / "after" / "dagster_home" / "history" / "runs").is_dir()
    assert not (tmp_path / "before").exists()


def test_home_prepares_the_dagster_home_for_make_dev(tmp_path, monkeypatch):
    """``make dev`` runs ``bq-platform home`` before ``dagster dev``: it prints the home, also
    after the folder was moved, and names a broken ``dagster.yaml``."""
    old, new = tmp_path / "old" / "dagster_home", tmp_path / "new" / "dagster_home"
    old.mkdir(parents=True)
    ensure_dagster_yaml(old)
    old.parent.rename(tmp_path / "new")
    monkeypatch.setenv("DAGSTER_HOME", str(new))

    moved = CliRunner().invoke(main, ["home"])
    again = CliRunner().invoke(main, ["home"])
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "bad"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "dagster.yaml").write_text("- a list\n")
    bad = CliRunner().invoke(main, ["home"])

    assert moved.exit_code == 0 and again.exit_code == 0, moved.output
    assert moved.stdout == again.stdout == f"{new}\n"
    assert moved.stderr == again.stderr == ""
    assert (new / "dagster.yaml").read_text() == dagster_yaml()
    assert bad.exit_code == 1 and "dagster.yaml" in bad.output and "Traceback" not in bad.output
    assert not (tmp_path / "old").exists()


@pytest.mark.parametrize("command", [["summary"], ["run"], ["deadletters"]])
def test_an_unset_production_variable_is_one_message_naming_it(tmp_path, monkeypatch, command):
    """Outside a Dagster run a ``dg.EnvVar`` field is the variable's name: the CLI resolves
    the production settings itself, and refuses to go on without them."""
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    monkeypatch.setenv("BQ_PLATFORM_ENV", "prod")
    monkeypatch.setenv("BQ_PLATFORM_GCP_PROJECT", "p")
    monkeypatch.setenv("BQ_PLATFORM_BQ_DATASET", "d")
    monkeypatch.setenv("BQ_PLATFORM_VISITOR_KEY", "k")
    monkeypatch.delenv("BQ_PLATFORM_BUCKET", raising=False)

    result = CliRunner().invoke(main, command)

    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1, result.output
    assert "set BQ_PLATFORM_BUCKET (README" in result.output


@pytest.mark.parametrize(
    "command", [["summary"], ["deadletters"], ["land-tree", "--workers", "1", "."]]
)
def test_an_unknown_environment_is_one_message(tmp_path, monkeypatch, command):
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    monkeypatch.setenv("BQ_PLATFORM_ENV", "staging")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "site.example").mkdir()
    (tmp_path / "site.example" / "a.log").write_text("")

    result = CliRunner().invoke(main, command)

    assert result.exit_code == 1, result.output
    assert result.output == "Error: BQ_PLATFORM_ENV must be 'local' or 'prod', got 'staging'\n"


def one_landed_day(tmp_path, monkeypatch) -> None:
    """A local home in ``tmp_path`` whose landing zone holds one day (1995-08-01) of 3 lines."""
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    monkeypatch.delenv("BQ_PLATFORM_ENV", raising=False)
    log = tmp_path / "a.log"
    log.write_bytes(b'a - - [01/Aug/1995:04:00:01 +0000] "GET / HTTP/1.0" 200 1\n' * 3)
    land_file(LocalObjectStore(tmp_path / "lake"), "s", log)


def test_run_scans_the_landing_zone_once_for_its_plan_and_summary(tmp_path, monkeypatch):
    """A run that processed nothing (here: its batches stubbed) summarizes the landed days it
    planned, without a second scan of every landed manifest."""
    one_landed_day(tmp_path, monkeypatch)
    scans: list[int] = []
    real_scan = runner_module.scan_window
    monkeypatch.setattr(
        runner_module,
        "scan_window",
        lambda store, lookback_days: scans.append(1) or real_scan(store, lookback_days),
    )
    summaries: list[list] = []
    monkeypatch.setattr(PipelineRunner, "_run_batch", lambda self, batch, *_: True)
    monkeypatch.setattr(PipelineRunner, "print_summary", lambda self, days: summaries.append(days))

    result = CliRunner().invoke(main, ["run"])

    assert result.exit_code == 0, result.output
    assert "1995-08-01: due" in result.output
    assert len(scans) == 1
    assert [[str(d) for d in days] for days in summaries] == [["1995-08-01"]]


def test_run_marks_dead_runs_failed_before_any_new_run(tmp_path, monkeypatch):
    one_landed_day(tmp_path, monkeypatch)
    events: list[str] = []
    monkeypatch.setattr(
        instance_module, "fail_dead_runs", lambda i: events.append("dead runs") or []
    )
    monkeypatch.setattr(
        PipelineRunner, "_run_batch", lambda self, batch, *_: events.append("build") or True
    )
    monkeypatch.setattr(PipelineRunner, "print_summary", lambda self, days: None)

    result = CliRunner().invoke(main, ["run"])

    assert result.exit_code == 0, result.output
    assert events == ["dead runs", "build"]


def test_land_tree_prints_one_line_per_site_in_order_and_one_message_per_failure(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BQ_PLATFORM_ENV", raising=False)
    tree = tmp_path / "tree"
    line = b'a - - [01/Aug/1995:04:00:01 +0000] "GET / HTTP/1.0" 200 1\n'
    for site, lines in (("b.example", 2), ("a.example", 3), ("c.example", 4)):
        (tree / site).mkdir(parents=True)
        (tree / site / "access.log").write_bytes(line * lines)

    result = CliRunner().invoke(main, ["land-tree", "--workers", "2", str(tree)])

    assert result.exit_code == 0, result.output
    assert [row.split(":")[0] for row in result.output.splitlines()] == [
        "a.example",
        "b.example",
        "c.example",
    ]
    assert "c.example: 1 files, 4 new lines in 1 hours (1 objects written" in result.output

    (tree / "b.example" / "broken.log.gz").write_bytes(b"\x1f\x8bnot gzip")
    failed = CliRunner().invoke(main, ["land-tree", str(tree)])
    assert failed.exit_code == 1
    assert failed.output.count("broken.log.gz") == 1, failed.output
    assert "Traceback" not in failed.output
    assert failed.output.splitlines()[0].startswith("a.example: 1 files, 0 new lines")


@pytest.mark.parametrize(
    ("argv", "status", "says"),
    [(["--help"], 0, "Usage: bq-platform"), (["no-such-command"], 2, "No such command")],
)
def test_the_console_script_keeps_the_status(capsys, argv, status, says):
    with pytest.raises(SystemExit) as exited:
        cli_module.main(args=argv, prog_name="bq-platform")

    assert exited.value.code == status
    printed = capsys.readouterr()
    assert says in printed.out + printed.err


LINE = b'a - - [01/Aug/1995:04:00:01 +0000] "GET / HTTP/1.0" 200 1\n'


def test_land_tree_lands_names_past_255_bytes_and_their_growth_once(tmp_path, monkeypatch):
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BQ_PLATFORM_ENV", raising=False)
    tree = tmp_path / "tree"
    (tree / "a.example").mkdir(parents=True)
    umlauts = tree / "a.example" / ("ü" * 80)
    umlauts.write_bytes(LINE * 3)
    (tree / "a.example" / ("a" * 251 + ".log")).write_bytes(LINE * 2)

    first = CliRunner().invoke(main, ["land-tree", "--workers", "1", str(tree)])
    umlauts.write_bytes(LINE * 10)  # the log grew
    grown = CliRunner().invoke(main, ["land-tree", "--workers", "1", str(tree)])

    assert (first.exit_code, grown.exit_code) == (0, 0), first.output + grown.output
    assert first.output.startswith("a.example: 2 files, 5 new lines in 1 hours")
    assert grown.output.startswith("a.example: 2 files, 7 new lines in 1 hours")
    store = LocalObjectStore(tmp_path / "home" / "lake")
    assert (
        sum(
            json.loads(store.read_bytes(key))["lines"]
            for key in store.list_keys(layout.LANDING_PREFIX)
            if key.endswith(layout.LANDED_MANIFEST_SUFFIX)
        )
        == 12
    )


def test_land_tree_names_the_failing_file_on_its_site_line_and_lands_the_rest(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BQ_PLATFORM_ENV", raising=False)
    tree = tmp_path / "tree"
    for site, name, lines in (
        ("a.example", "access.log", 2),
        ("b.example", "good.log", 3),
        ("b.example", "full-disk.log", 4),
        ("c.example", "access.log", 5),
    ):
        (tree / site).mkdir(parents=True, exist_ok=True)
        (tree / site / name).write_bytes(LINE * lines)
    refused = layout.landing_registry_key("b.example", "full-disk.log")
    real_write = LocalObjectStore.write_bytes

    def write_bytes(store, key, data):
        if key == refused:
            raise OSError(28, "No space left on device", store.uri(key))
        real_write(store, key, data)

    monkeypatch.setattr(LocalObjectStore, "write_bytes", write_bytes)
    failed = CliRunner().invoke(main, ["land-tree", "--workers", "1", str(tree)])
    monkeypatch.setattr(LocalObjectStore, "write_bytes", real_write)
    again = CliRunner().invoke(main, ["land-tree", "--workers", "1", str(tree)])

    assert failed.exit_code == 1, failed.output
    rows = failed.output.splitlines()
    assert [row.split(":")[0] for row in rows] == ["a.example", "b.example", "c.example", "Error"]
    assert rows[1].startswith("b.example: 2 files, 3 new lines in 1 hours")
    assert f"1 FAILED: {tree / 'b.example' / 'full-disk.log'}: OSError: [Errno 28]" in rows[1]
    assert "land the file again" in rows[1]
    assert rows[2].startswith("c.example: 1 files, 5 new lines")
    assert rows[3].startswith("Error: 1 of 3 sites have files that did not land (b.example")
    assert failed.output.count("full-disk.log") == 1 and "Traceback" not in failed.output
    assert again.exit_code == 0, again.output
    assert again.output.splitlines()[1].startswith("b.example: 2 files, 4 new lines in 1 hours")


def test_land_names_the_file_that_failed_and_lands_the_others(tmp_path, monkeypatch):
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BQ_PLATFORM_ENV", raising=False)
    good, broken = tmp_path / "good.log", tmp_path / "broken.log.gz"
    good.write_bytes(LINE * 3)
    broken.write_bytes(b"\x1f\x8bnot gzip")

    result = CliRunner().invoke(main, ["land", "--site", "s.example", str(broken), str(good)])

    assert result.exit_code == 1
    assert (
        result.stdout
        == "s.example: 3 new lines in 1 hours (1 objects written, 0 already there, 0 repaired)\n"
    )
    assert f"{broken}: cannot read" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("Error: 1 of 2 files did not land (above)")
    assert result.output.count("broken.log.gz") == 1 and "Traceback" not in result.output


@pytest.mark.parametrize("site", ["x\n", "epa.gov\n", "../escape", "a/b", ""])
def test_land_refuses_a_site_name_with_a_trailing_newline_and_writes_nothing(
    tmp_path, monkeypatch, site
):
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BQ_PLATFORM_ENV", raising=False)
    log = tmp_path / "access.log"
    log.write_bytes(LINE * 3)

    result = CliRunner().invoke(main, ["land", "--site", site, str(log)])

    assert result.exit_code == 1
    assert "invalid site name" in result.output and "Traceback" not in result.output
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != log]
    assert written == []
