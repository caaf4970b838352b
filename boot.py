"""Boot: make CIRCUITPY writable for the firmware unless the button is held, then finish or undo an update."""

import json
import os

import board
import digitalio
import storage

# docs/ota.md. boot.py is the update anchor: it is never replaced over the network and imports no application file.
JOURNAL = "ota/journal"
MAX_TRIAL_BOOTS = 3   # boots a new version gets to prove itself before it is rolled back
NEVER_SWITCHED = ("boot.py", "ota_keys.txt")   # the anchor and the trusted update keys: changed over USB only
# What this boot.py's switch can do; the OTA service reads it before it stages an update (docs/ota.md, "Twins").
# 2: the journal's "gone" files (a module's other form, core/x.py beside a new core/x.mpy) go to ota/prev with the
# switch and come back with a rollback. A boot.py without the constant (1) only switches the staged files.
SWITCH_VERSION = 2


def code_may_write(button_pressed):
    """The firmware owns the drive except when the user holds the button to recover it over USB."""
    return not button_pressed


class DriveFs:
    """The few file operations the switch needs, on the real drive (tests pass a fake with the same methods)."""

    def exists(self, path):
        try:
            os.stat(path)
            return True
        except OSError:
            return False

    def rename(self, src, dst):
        os.rename(src, dst)

    def remove(self, path):
        os.remove(path)

    def mkdir(self, path):
        os.mkdir(path)

    def read(self, path):
        with open(path) as f:
            return f.read()

    def write(self, path, text):
        with open(path, "w") as f:
            f.write(text)


def _makedirs(fs, path):
    """Create the folders above path (ota/prev/core/x.py -> ota, ota/prev, ota/prev/core)."""
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if not fs.exists(d):
            fs.mkdir(d)


def _remove_quiet(fs, path):
    if fs.exists(path):
        fs.remove(path)


def read_journal(fs):
    """The journal dict, from ota/journal or a complete ota/journal.tmp; None when no update is in progress."""
    for path in (JOURNAL, JOURNAL + ".tmp"):
        if fs.exists(path):
            try:
                doc = json.loads(fs.read(path))
            except (OSError, ValueError):
                continue
            if isinstance(doc, dict) and "phase" in doc:
                return doc
    return None


def write_journal(fs, doc):
    """Replace the journal so that a cut at any step leaves the old or the new one readable (FAT: remove first)."""
    tmp = JOURNAL + ".tmp"
    _makedirs(fs, JOURNAL)
    fs.write(tmp, json.dumps(doc))
    _remove_quiet(fs, JOURNAL)
    fs.rename(tmp, JOURNAL)


def drop_journal(fs):
    """End the update: the commit point of a good version or of a finished rollback."""
    _remove_quiet(fs, JOURNAL + ".tmp")
    _remove_quiet(fs, JOURNAL)


def switch_files(fs, files):
    """Roll forward: every staged file replaces the live one, whose old copy goes to ota/prev (idempotent)."""
    for path in files:
        staged = "ota/stage/" + path
        if path in NEVER_SWITCHED or not fs.exists(staged):
            continue  # already switched (or never to be: the manifest check refuses these paths too)
        prev = "ota/prev/" + path
        if fs.exists(path):
            if fs.exists(prev):
                fs.remove(path)   # not reachable with a clean ota/prev: keep the older copy as the backup
            else:
                _makedirs(fs, prev)
                fs.rename(path, prev)
        _makedirs(fs, path)
        fs.rename(staged, path)


def set_aside(fs, gone, files):
    """Move the files the update takes away (a module's other form, which would win or outlive it) to ota/prev."""
    for path in gone:
        if path in NEVER_SWITCHED or path in files or not fs.exists(path):
            continue  # already set aside (a boot after a cut), or never to be
        prev = "ota/prev/" + path
        if fs.exists(prev):
            fs.remove(path)   # not reachable with a clean ota/prev: keep the older copy as the backup
        else:
            _makedirs(fs, prev)
            fs.rename(path, prev)


def restore_files(fs, files, new_files):
    """Roll back: every saved old file returns (set-aside twins too), files the update added are removed
    (idempotent)."""
    for path in files:
        prev = "ota/prev/" + path
        if fs.exists(prev):
            _remove_quiet(fs, path)
            fs.rename(prev, path)
        elif path in new_files:
            _remove_quiet(fs, path)


def _note_rollback(fs, doc):
    bad = []
    if fs.exists("ota/bad"):
        try:
            bad = json.loads(fs.read("ota/bad"))
        except (OSError, ValueError):
            bad = []
    if doc.get("to") not in bad:
        bad.append(doc.get("to"))
    fs.write("ota/bad", json.dumps(bad[-8:]))
    fs.write("ota/result", json.dumps({"event": "rolled_back", "version": doc.get("to"), "back_to": doc.get("from"),
                                       "boots": doc.get("boots", 0)}))


def update_step(fs, max_boots=MAX_TRIAL_BOOTS):
    """One boot's share of an update: finish a switch, count a trial boot, or roll back. Returns the phase seen."""
    doc = read_journal(fs)
    if doc is None:
        return None
    phase = doc.get("phase")
    files = doc.get("files") or []
    gone = doc.get("gone") or []
    if phase == "switch":
        set_aside(fs, gone, files)   # first: a cut between the two steps leaves no twin that wins over a new file
        switch_files(fs, files)
        doc["phase"] = "trial"
        doc["boots"] = 1
        write_journal(fs, doc)
        return "switch"
    if phase == "trial":
        if doc.get("boots", 0) >= max_boots:
            doc["phase"] = "rollback"
            write_journal(fs, doc)
            phase = "rollback"
        else:
            doc["boots"] = doc.get("boots", 0) + 1
            write_journal(fs, doc)
            return "trial"
    if phase == "rollback":
        restore_files(fs, files + gone, doc.get("new") or [])
        _note_rollback(fs, doc)
        drop_journal(fs)
        return "rollback"
    return phase


def main():
    pin = digitalio.DigitalInOut(getattr(board, "BUTTON", board.IO0))
    pin.switch_to_input(pull=digitalio.Pull.UP)
    pressed = not pin.value  # the BOOT button pulls the pin low
    pin.deinit()
    # readonly=False means the code may write and USB sees the drive read-only.
    may_write = code_may_write(pressed)
    storage.remount("/", readonly=not may_write)
    if may_write:
        try:
            update_step(DriveFs())
        except Exception as exc:  # never keep the old firmware from starting; code.py reports ota/journal
            try:
                with open("ota/boot_error", "w") as f:
                    f.write(repr(exc))
            except OSError:
                pass


if __name__ == "__main__":
    main()
