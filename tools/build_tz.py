"""Build core/tz.dat (zone name -> POSIX TZ rule) from the TZif files of the tzdata PyPI package."""

import os
import struct
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "core", "tz.dat")
DOC = os.path.join(REPO, "docs", "timezones.md")
DOC_BEGIN = "<!-- build_tz: governed-from table begin -->"
DOC_END = "<!-- build_tz: governed-from table end -->"
FIRST_YEAR, END_YEAR = 2000, 2038  # the window tests/test_tz.py compares against zoneinfo


def tzdata_root():
    """Folder of the installed tzdata package (holds zoneinfo/ and the zones list)."""
    import tzdata

    return os.path.dirname(tzdata.__file__)


def zone_names():
    """Every zone name the tzdata package lists, canonical and backward links alike."""
    with open(os.path.join(tzdata_root(), "zones")) as f:
        return [line.strip() for line in f if line.strip()]


def read_tzif(data):
    """(transition times of the v2+ body, [(utoff, isdst)] per transition, footer string) of TZif bytes."""
    if data[:4] != b"TZif" or data[4:5] < b"2":
        raise ValueError("not a TZif v2+ file")

    def counts(off):
        return struct.unpack(">6l", data[off + 20:off + 44])

    isut, isstd, leap, timecnt, typecnt, charcnt = counts(0)
    off = 44 + timecnt * 5 + typecnt * 6 + charcnt + leap * 8 + isstd + isut  # skip the 32-bit body
    isut, isstd, leap, timecnt, typecnt, charcnt = counts(off)
    off += 44
    times = struct.unpack(">%dq" % timecnt, data[off:off + 8 * timecnt])
    off += 8 * timecnt
    idx = data[off:off + timecnt]
    off += timecnt
    types = [struct.unpack(">lBB", data[off + 6 * i:off + 6 * i + 6])[:2] for i in range(typecnt)]
    off += 6 * typecnt + charcnt + leap * 12 + isstd + isut
    rest = data[off:]
    if rest[:1] != b"\n":
        raise ValueError("TZif footer missing")
    footer = rest[1:rest.index(b"\n", 1)].decode("ascii")
    return list(times), [types[i] for i in idx], footer


def zone_data(name):
    """read_tzif of a zone of the installed tzdata package."""
    with open(os.path.join(tzdata_root(), "zoneinfo", *name.split("/")), "rb") as f:
        return read_tzif(f.read())


def governed_from(times):
    """First UTC second from which only the footer rule applies (after the last explicit transition)."""
    return times[-1] + 1 if times else None


def build():
    """Read every zone, check each rule parses on our evaluator, return (header lines, rules, zones)."""
    sys.path.insert(0, REPO)
    from core.tz import Rule

    import tzdata

    names = sorted(zone_names())
    footers = {}
    for name in names:
        footer = zone_data(name)[2]
        if not footer:
            raise SystemExit("%s has no footer rule: cannot ship it" % name)
        Rule(footer)  # refuse to ship what the device cannot parse
        footers[name] = footer
    rules = sorted(set(footers.values()))
    index = {r: i for i, r in enumerate(rules)}
    header = [
        "# Meter Plus time zone table: zone name -> POSIX TZ rule (RFC 8536 footer of the TZif file).",
        "# Source: tzdata %s (IANA %s), built by tools/build_tz.py; do not edit." % (
            tzdata.__version__, tzdata.IANA_VERSION),
        "# Lines: '=N RULE' defines rule N (N counts from 0, in order), then 'NAME N' per zone sorted by name.",
        "# Only the current rule is kept: history before a zone's last explicit transition is not (docs/timezones.md).",
        "# %d zones, %d distinct rules." % (len(names), len(rules)),
    ]
    return header, rules, [(n, index[footers[n]]) for n in names]


def write_table(header, rules, zones, path=OUT):
    with open(path, "w") as f:
        for line in header:
            f.write(line + "\n")
        for i, r in enumerate(rules):
            f.write("=%d %s\n" % (i, r))
        for n, i in zones:
            f.write("%s %d\n" % (n, i))


def governed_table(names):
    """Markdown rows of the zones whose footer rule starts after FIRST_YEAR-01-01."""
    start = 946684800  # 2000-01-01 UTC
    end = 2145916800  # 2038-01-01 UTC
    rows = []
    for name in sorted(names):
        times, _types, footer = zone_data(name)
        g = governed_from(times)
        if g is None or g <= start:
            continue
        if g >= end:
            when = "explicit transitions until %s: only the years the rule governs (see above)" % (
                time.strftime("%Y", time.gmtime(times[-1])))
        else:
            when = "after %s UTC" % time.strftime("%Y-%m-%d %H:%M", time.gmtime(times[-1]))
        rows.append("| %s | `%s` | %s |" % (name, footer, when))
    return rows


def update_doc(names, path=DOC):
    """Replace the generated table between the markers of docs/timezones.md."""
    with open(path) as f:
        text = f.read()
    a = text.index(DOC_BEGIN) + len(DOC_BEGIN)
    b = text.index(DOC_END)
    rows = governed_table(names)
    table = "\n%d zones:\n\n| Zone | Shipped rule | Compared with zoneinfo |\n|---|---|---|\n%s\n" % (
        len(rows), "\n".join(rows))
    with open(path, "w") as f:
        f.write(text[:a] + table + text[b:])


def main():
    header, rules, zones = build()
    write_table(header, rules, zones)
    print("wrote %s: %d zones, %d rules, %d bytes" % (OUT, len(zones), len(rules), os.path.getsize(OUT)))
    if os.path.exists(DOC):
        update_doc([n for n, _ in zones])
        print("updated the governed-from table in %s" % DOC)


if __name__ == "__main__":
    main()
