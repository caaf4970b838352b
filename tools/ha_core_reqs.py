"""Requirements of the Home Assistant integrations a headless Core loads with MQTT and the recorder (run by
tools/ha_core_env.sh with the Home Assistant venv's python): one pip requirement a line, on stdout.

Home Assistant installs an integration's requirements itself at setup unless told not to; the test environment
installs them up front (pinned by Home Assistant's own package_constraints.txt) so a start never goes to PyPI."""

import json
import sys
from pathlib import Path

import homeassistant.bootstrap as bootstrap

SKIP = {"sentry", "isal"}   # stage-1 integrations set up only when configuration.yaml names them


def main(extra):
    components = Path(bootstrap.__file__).parent / "components"
    todo = [*bootstrap.CORE_INTEGRATIONS, *bootstrap.LOGGING_AND_HTTP_DEPS_INTEGRATIONS,
            *bootstrap.DEFAULT_INTEGRATIONS, *extra]
    seen, reqs = set(), set()
    while todo:
        domain = todo.pop()
        if domain in seen or domain in SKIP:
            continue
        seen.add(domain)
        manifest = components / domain / "manifest.json"
        if not manifest.exists():
            continue
        doc = json.loads(manifest.read_text())
        reqs.update(doc.get("requirements", []))
        todo += doc.get("dependencies", []) + doc.get("after_dependencies", [])
    print("\n".join(sorted(reqs)))


if __name__ == "__main__":
    main(sys.argv[1:])
