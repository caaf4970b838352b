"""services/logs/flash_log.py: batched appends, bounded size with one rotation, CSV escaping, reading back in order."""

import os

import pytest

from services.logs.flash_log import HEADER, FlashLog, csv_field, iso_utc


@pytest.fixture
def drive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # files are relative to the drive root, as on the device
    return tmp_path


def entries(flog, n, text="message", level="info", t0=1000):
    for i in range(n):
        flog.sink((t0 + i * 1000, level, "%s %d" % (text, i)))


def test_batched_not_written_per_line(drive):
    flog = FlashLog()
    flog.batch_bytes = 200
    entries(flog, 3)
    flog.poll(0)
    assert not os.path.exists("logs/log.csv")  # below the batch: RAM only
    entries(flog, 10, t0=5000)
    flog.poll(1)
    assert flog.counters["flushes"] == 1
    text = open("logs/log.csv").read()
    assert text.startswith(HEADER) and text.count("\n") == 14


def test_flush_after_flush_ms_even_when_small(drive):
    flog = FlashLog()
    entries(flog, 1)
    flog.poll(0)
    flog.poll(flog.flush_ms - 1)
    assert not os.path.exists("logs/log.csv")
    flog.poll(flog.flush_ms)
    assert os.path.exists("logs/log.csv")


def test_a_line_after_days_of_quiet_is_written_within_flush_ms(drive):
    """The hour counts from the first waiting line: a stamp from a flush days ago must not look like the future."""
    from tests.steppedclock import SteppedClock

    clock = SteppedClock()
    flog = FlashLog()
    entries(flog, 1)
    flog.flush()
    flog.poll(clock())
    for _ in range(260):  # ~3.1 days without a log line, polled (coarsely) as the supervisor does
        clock.advance(1 << 20)
        flog.poll(clock())
    os.remove("logs/log.csv")
    flog.sink((clock(), "warning", "after the quiet"))
    flog.poll(clock())
    clock.advance(flog.flush_ms - 1)
    flog.poll(clock())
    assert not os.path.exists("logs/log.csv")
    clock.advance(1)
    flog.poll(clock())
    assert "after the quiet" in open("logs/log.csv").read()


def test_bounded_and_rotated(drive):
    flog = FlashLog()
    flog.max_bytes = 500
    for round_ in range(20):
        entries(flog, 5, text="round %d" % round_)
        flog.flush()
        assert os.path.getsize("logs/log.csv") <= 500
    assert flog.counters["rotations"] >= 2
    assert os.path.getsize("logs/log.1.csv") <= 500
    assert sorted(os.listdir("logs")) == ["log.1.csv", "log.csv"] and os.listdir(".") == ["logs"]
    text = "".join(flog.chunks())
    assert text.startswith(HEADER) and text.count(HEADER) == 1
    assert "round 19" in text and "round 0 " not in text  # the oldest went with the rotation
    lines = text.splitlines()[1:]
    rounds = [int(ln.split(",")[3].split()[1]) for ln in lines]
    assert rounds == sorted(rounds)  # oldest first across both files


def test_ram_buffer_bounded(drive):
    flog = FlashLog()
    flog.max_buffer = 300
    flog.batch_bytes = 10 ** 6
    entries(flog, 50)
    assert flog.counters["dropped"] > 0
    assert sum(len(x) for x in flog._lines) <= 300


def test_levels_and_time_columns(drive):
    flog = FlashLog(wall_time=lambda: 1767225600)  # 2026-01-01T00:00:00Z
    flog.min_level = "warning"
    flog.sink((2500, "info", "skipped"))
    flog.sink((2500, "warning", 'comma, and "quote"'))
    flog.flush()
    assert open("logs/log.csv").read() == HEADER + '2026-01-01T00:00:00Z,2,warning,"comma, and ""quote"""\n'


def test_unsynced_clock_leaves_time_empty(drive):
    flog = FlashLog(wall_time=lambda: None)
    flog.sink((0, "error", "x"))
    assert "".join(flog.chunks()) == HEADER + ",0,error,x\n"  # not yet written lines are included


def test_an_older_firmwares_root_files_are_served_first_until_the_first_rotation(drive):
    with open("log.1.csv", "w") as f:
        f.write(HEADER + ",1,info,oldest\n")
    with open("log.csv", "w") as f:
        f.write(HEADER + ",2,info,older\n")
    flog = FlashLog()
    flog.max_bytes = 300
    flog.sink((3000, "info", "newer"))
    flog.flush()
    assert os.listdir("logs") == ["log.csv"]
    text = "".join(flog.chunks())
    assert text.count(HEADER) == 1 and text.index("oldest") < text.index("older") < text.index("newer")
    entries(flog, 20, text="round")
    flog.flush()
    entries(flog, 5, text="after")
    flog.flush()                           # the first rotation: the root files are past what the log keeps
    assert flog.counters["rotations"] >= 1
    assert not os.path.exists("log.csv") and not os.path.exists("log.1.csv")
    assert "oldest" not in "".join(flog.chunks())


def test_csv_and_iso_helpers():
    assert csv_field("plain") == "plain"
    assert csv_field("a\nb") == '"a\nb"'
    assert iso_utc(0) == "1970-01-01T00:00:00Z"
