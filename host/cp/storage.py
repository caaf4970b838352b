"""Stand-in for storage: remount() records who may write the drive; the host drive is always writable."""

mounted_readonly = False
usb_drive_enabled = True
calls = []


def remount(mount_path, readonly=False, *, disable_concurrent_write_protection=False):
    """Record the choice boot.py made (readonly=False means the code may write)."""
    global mounted_readonly
    calls.append((mount_path, readonly, disable_concurrent_write_protection))
    mounted_readonly = readonly


def disable_usb_drive():
    global usb_drive_enabled
    usb_drive_enabled = False


def enable_usb_drive():
    global usb_drive_enabled
    usb_drive_enabled = True


def getmount(mount_path):
    class _Mount:
        readonly = mounted_readonly
        label = "CIRCUITPY"

    return _Mount()
