"""boot.py's update switch and rollback over a fake drive: a power cut after any file operation still boots a whole
old or a whole new application, a trial that never proves itself is rolled back, the data files are never touched."""

import json
import os
import runpy

import pytest

BOOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "boot.py")
B = runpy.run_path(BOOT, run_name="boot_under_test")

OLD = {"code.py": "old code", "core/version.py": "V='0.1.0'", "core/a.py": "old a", "services/x.py": "x",
       "settings.json": '{"device_name": "kept"}', "history.bin": "HIST"}
NEW = {"code.py": "new code", "core/version.py": "V='0.2.0'", "core/a.py": "old a", "services/x.py": "x",
       "services/ota/new.py": "brand new", "settings.json": '{"device_name": "kept"}', "history.bin": "HIST"}
CHANGED = ["code.py", "core/version.py", "services/ota/new.py"]


class PowerCut(Exception):
    pass


class FakeFs:
    """A drive as a dict; FAT rules (rename onto an existing name fails); a cut after a number of mutations.

    A cut during write() leaves a torn file (the first half of the text)."""

    def __init__(self, files, cut_after=None):
        self.files = dict(files)
        self.dirs = set()
        for p in files:
            self._add_parents(p)
        self.ops = 0
        self.cut_after = cut_after

    def _add_parents(self, path):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.dirs.add("/".join(parts[:i]))

    def _mutate(self):
        if self.cut_after is not None and self.ops >= self.cut_after:
            raise PowerCut()
        self.ops += 1

    def exists(self, path):
        return path in self.files or path in self.dirs

    def rename(self, src, dst):
        self._mutate()
        if dst in self.files or dst in self.dirs:
            raise OSError(17, "EEXIST")
        if src not in self.files:
            raise OSError(2, "ENOENT")
        parent = dst.rpartition("/")[0]
        if parent and parent not in self.dirs:
            raise OSError(2, "ENOENT")
        self.files[dst] = self.files.pop(src)

    def remove(self, path):
        self._mutate()
        if path not in self.files:
            raise OSError(2, "ENOENT")
        del self.files[path]

    def mkdir(self, path):
        self._mutate()
        if self.exists(path):
            raise OSError(17, "EEXIST")
        self.dirs.add(path)

    def read(self, path):
        if path not in self.files:
            raise OSError(2, "ENOENT")
        return self.files[path]

    def write(self, path, text):
        if self.cut_after is not None and self.ops >= self.cut_after:
            self.files[path] = text[: len(text) // 2]
            raise PowerCut()
        self.ops += 1
        self.files[path] = text


def live_app(fs):
    return {p: t for p, t in fs.files.items() if not p.startswith("ota/")}


def staged_drive():
    """The drive right after the application committed an update (docs/ota.md step 5)."""
    files = dict(OLD)
    for p in CHANGED:
        files["ota/stage/" + p] = NEW[p]
    fs = FakeFs(files)
    B["write_journal"](fs, {"phase": "switch", "from": "0.1.0", "to": "0.2.0", "files": CHANGED,
                            "new": ["services/ota/new.py"]})
    return fs


def boot(fs, max_boots=3):
    return B["update_step"](fs, max_boots)


def test_switch_then_trial_then_good():
    fs = staged_drive()
    assert boot(fs) == "switch"
    assert live_app(fs) == NEW
    assert B["read_journal"](fs)["phase"] == "trial" and B["read_journal"](fs)["boots"] == 1
    assert fs.files["ota/prev/code.py"] == "old code"
    assert boot(fs) == "trial" and B["read_journal"](fs)["boots"] == 2
    B["drop_journal"](fs)                   # what the healthy new version does
    assert boot(fs) is None and live_app(fs) == NEW


def test_unhealthy_trial_is_rolled_back_after_max_boots():
    fs = staged_drive()
    phases = [boot(fs) for _ in range(5)]
    assert phases == ["switch", "trial", "trial", "rollback", None]
    assert live_app(fs) == OLD
    assert json.loads(fs.files["ota/bad"]) == ["0.2.0"]
    assert json.loads(fs.files["ota/result"])["event"] == "rolled_back"
    assert not fs.exists("ota/journal")


def test_no_journal_no_change():
    fs = FakeFs(dict(OLD, **{"ota/stage/code.py": "garbage of an unfinished download"}))
    assert boot(fs) is None
    assert live_app(fs) == OLD


def _run_until_done(fs, boots_before_good):
    """Boot repeatedly (power restored) until the update settled; the new version marks itself good after
    boots_before_good trial boots (None: never healthy)."""
    fs.cut_after = None
    for _ in range(10):
        phase = boot(fs)
        assert live_app(fs) in (OLD, NEW)
        j = B["read_journal"](fs)
        if j is None:
            return
        if j["phase"] == "trial" and boots_before_good is not None and j["boots"] >= boots_before_good:
            B["drop_journal"](fs)
            return
    raise AssertionError("update never settled: %r" % B["read_journal"](fs), phase)


@pytest.mark.parametrize("healthy", [1, None], ids=["healthy", "crashing"])
def test_power_cut_after_every_operation_boots_old_or_new(healthy):
    """Cut after operation k of the whole switch + trial (+ rollback), for every k: every boot sees a whole version."""
    # count the operations of an uninterrupted run
    ref = staged_drive()
    ref.ops = 0
    _run_until_done(ref, healthy)
    total = ref.ops
    assert total > 10
    for k in range(total + 1):
        fs = staged_drive()
        fs.ops = 0
        fs.cut_after = k
        try:
            for _ in range(6):
                boot(fs)
                assert live_app(fs) in (OLD, NEW), k  # what code.py would import after this boot
                j = B["read_journal"](fs)
                if j is None:
                    break
                if j["phase"] == "trial" and healthy is not None:
                    B["drop_journal"](fs)
        except PowerCut:
            pass
        _run_until_done(fs, healthy)
        assert live_app(fs) == (NEW if healthy else OLD), k
        assert fs.files["settings.json"] == OLD["settings.json"] and fs.files["history.bin"] == "HIST"


def test_torn_journal_tmp_is_ignored_and_complete_tmp_is_used():
    fs = FakeFs(OLD)
    B["write_journal"](fs, {"phase": "trial", "boots": 1, "files": []})
    fs.files["ota/journal.tmp"] = '{"phase": "rollb'          # cut while writing the next one
    assert B["read_journal"](fs)["phase"] == "trial"
    del fs.files["ota/journal"]
    assert B["read_journal"](fs) is None                       # torn tmp and no journal: nothing in progress
    fs.files["ota/journal.tmp"] = '{"phase": "rollback", "files": []}'
    assert B["read_journal"](fs)["phase"] == "rollback"       # cut between remove and rename


def test_real_drive_fs(tmp_path, monkeypatch):
    """The same switch on a real folder through DriveFs (os calls only, as on the device)."""
    monkeypatch.chdir(tmp_path)
    fake = staged_drive()
    for p, t in fake.files.items():
        os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
        with open(p, "w") as f:
            f.write(t)
    fs = B["DriveFs"]()
    assert boot(fs) == "switch"
    with open("core/version.py") as f:
        assert f.read() == "V='0.2.0'"
    for _ in range(3):
        boot(fs)
    with open("core/version.py") as f:
        assert f.read() == "V='0.1.0'"
    assert not os.path.exists("services/ota/new.py")


def test_the_switch_never_replaces_boot_py_or_the_keys_file():
    """Defence in depth: even a journal that names them (the manifest check refuses such a manifest) changes neither."""
    files = dict(OLD, **{"boot.py": "anchor", "ota_keys.txt": "trusted keys\n", "ota/stage/boot.py": "evil",
                         "ota/stage/ota_keys.txt": "attacker key\n", "ota/stage/code.py": "new code"})
    fs = FakeFs(files)
    B["write_journal"](fs, {"phase": "switch", "from": "0.1.0", "to": "0.2.0",
                            "files": ["boot.py", "ota_keys.txt", "code.py"], "new": []})
    assert boot(fs) == "switch"
    assert fs.files["boot.py"] == "anchor" and fs.files["ota_keys.txt"] == "trusted keys\n"
    assert fs.files["code.py"] == "new code"
    from services.ota.manifest import PROTECTED

    assert set(PROTECTED) == set(B["NEVER_SWITCHED"])   # boot.py imports nothing of the application: two lists


# ---- twins: a module's compiled (.mpy) and source (.py) forms (docs/ota.md, "Twins") -------------------------------
# CircuitPython imports core/a.py before core/a.mpy, so an update that installs one form sets the other aside
# (journal "gone"); a rollback brings it back and removes what the update added.

TWIN_OLD = {"code.py": "old code", "core/a.py": "a as source (an earlier update)", "core/a.mpy": "C a old",
            "core/b.mpy": "C b", "meter/m.mpy": "C m old", "settings.json": "{}", "history.bin": "HIST"}
TWIN_NEW = {"code.py": "new code", "core/a.mpy": "C a new", "core/b.mpy": "C b", "core/c.mpy": "C c new module",
            "meter/m.mpy": "C m old", "settings.json": "{}", "history.bin": "HIST"}
SOURCE_NEW = {"code.py": "new code", "core/a.py": "a new source", "core/b.py": "b source", "meter/m.py": "m source",
              "settings.json": "{}", "history.bin": "HIST"}
# (old drive, new drive, staged files, new files, set aside): an .mpy update over a drive an earlier .py update
# left with twins (core/a.py set aside), and a .py update over it (every .mpy of a module it ships set aside: stale)
TWINS = {
    "mpy_over_py": (TWIN_OLD, TWIN_NEW, ["code.py", "core/a.mpy", "core/c.mpy"], ["core/c.mpy"], ["core/a.py"]),
    "py_over_mpy": (TWIN_OLD, SOURCE_NEW, ["code.py", "core/a.py", "core/b.py", "meter/m.py"],
                    ["core/b.py", "meter/m.py"], ["core/a.mpy", "core/b.mpy", "meter/m.mpy"]),
}


def twin_drive(name):
    old, new, staged, added, gone = TWINS[name]
    files = dict(old)
    for p in staged:
        files["ota/stage/" + p] = new[p]
    fs = FakeFs(files)
    B["write_journal"](fs, {"phase": "switch", "from": "0.1.0", "to": "0.2.0", "files": staged, "new": added,
                            "gone": gone})
    return fs


def test_the_boot_py_says_it_switches_twins():
    assert B["SWITCH_VERSION"] == 2      # services/ota/service.py stages an .mpy update only when this is 2 or more


@pytest.mark.parametrize("name", sorted(TWINS))
def test_a_twin_switch_sets_the_other_form_aside_and_a_rollback_brings_it_back(name):
    old, new, _staged, _added, gone = TWINS[name]
    fs = twin_drive(name)
    assert boot(fs) == "switch"
    assert live_app(fs) == new
    for p in gone:
        assert fs.files["ota/prev/" + p] == old[p]
    assert [boot(fs) for _ in range(4)] == ["trial", "trial", "rollback", None]
    assert live_app(fs) == old          # the twins are back, the new module and the new source files are gone


@pytest.mark.parametrize("healthy", [1, None], ids=["healthy", "crashing"])
@pytest.mark.parametrize("name", sorted(TWINS))
def test_power_cut_after_every_operation_of_a_twin_switch_and_rollback(name, healthy):
    old, new = TWINS[name][0], TWINS[name][1]
    ref = twin_drive(name)
    ref.ops = 0
    _settle(ref, healthy, old, new)
    total = ref.ops
    assert total > 10
    for k in range(total + 1):
        fs = twin_drive(name)
        fs.ops = 0
        fs.cut_after = k
        try:
            for _ in range(6):
                boot(fs)
                assert live_app(fs) in (old, new), k
                j = B["read_journal"](fs)
                if j is None:
                    break
                if j["phase"] == "trial" and healthy is not None:
                    B["drop_journal"](fs)
        except PowerCut:
            pass
        _settle(fs, healthy, old, new)
        assert live_app(fs) == (new if healthy else old), k


def _settle(fs, boots_before_good, old, new):
    fs.cut_after = None
    for _ in range(10):
        boot(fs)
        assert live_app(fs) in (old, new)
        j = B["read_journal"](fs)
        if j is None:
            return
        if j["phase"] == "trial" and boots_before_good is not None and j["boots"] >= boots_before_good:
            B["drop_journal"](fs)
            return
    raise AssertionError("update never settled: %r" % B["read_journal"](fs))


def test_a_journal_without_gone_switches_as_before():
    """A journal written by a firmware before twins (no "gone"): the other form stays where it is."""
    fs = twin_drive("mpy_over_py")
    doc = B["read_journal"](fs)
    del doc["gone"]
    B["write_journal"](fs, doc)
    boot(fs)
    assert fs.files["core/a.py"] == TWIN_OLD["core/a.py"] and fs.files["core/a.mpy"] == "C a new"
