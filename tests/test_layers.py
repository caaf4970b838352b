"""The layers the folder names promise: core/ and meter/ import no driver or service, drivers/ import no service, so
a feature can be wired (and left out to save heap) without dragging in what sits above it."""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# package -> the top-level packages of the firmware it must not import
FORBIDDEN = {"core": ("drivers", "services"), "meter": ("drivers", "services"), "drivers": ("services",)}


def _imports(path):
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.lineno


def _modules(package):
    folder = os.path.join(ROOT, package)
    for dirpath, _dirs, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_lower_layer_imports_nothing_above_it(package):
    wrong = []
    for path in _modules(package):
        for top, line in _imports(path):
            if top in FORBIDDEN[package]:
                wrong.append("%s:%d imports %s" % (os.path.relpath(path, ROOT), line, top))
    assert wrong == []


def test_the_check_sees_an_upward_import(tmp_path):
    """The scan itself: a driver importing a service is found (the old drivers/ble_provision.py did)."""
    bad = tmp_path / "drivers"
    bad.mkdir()
    (bad / "x.py").write_text("import os\nfrom services.network import improv\n")
    found = [top for top, _line in _imports(str(bad / "x.py"))]
    assert found == ["os", "services"]
