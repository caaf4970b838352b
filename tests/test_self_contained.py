"""The project carries its own test data: a clone with no sibling folders passes (issue 9)."""

import os
import re
import subprocess

from tests import CAPTURES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_capture_in_the_index_is_in_the_project():
    with open(os.path.join(CAPTURES, "INDEX.tsv"), encoding="utf-8") as f:
        rows = [line.split("\t") for line in f.read().splitlines()[1:] if line.strip()]
    assert len(rows) >= 20
    for row in rows:
        assert os.path.isfile(os.path.join(CAPTURES, row[0])), row[0]


def test_nothing_in_the_project_reads_a_folder_outside_it():
    files = subprocess.run(["git", "ls-files", "*.py", "Makefile", ".ci/*", "tools/*", "*.toml"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    assert files
    outside = re.compile(r"""\.\./shared|["']shared["']|meter-captures""")
    offenders = []
    for rel in files:
        if rel == "tests/test_self_contained.py":
            continue
        with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if outside.search(line):
                    offenders.append("%s:%d: %s" % (rel, n, line.strip()))
    assert not offenders, "\n".join(offenders)
