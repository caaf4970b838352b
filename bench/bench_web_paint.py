"""First paint of the web interface on a slow phone: headless Chromium (Debian's /usr/bin/chromium driven by
Playwright) with the CPU throttled 4x and the network shaped through the DevTools protocol, against the host
runtime serving the committed web/index.html.gz. No cache: every load fetches the whole page.

Two network profiles: "fast3g" is Chrome's Fast 3G preset as Puppeteer defines it (1.44 Mbit/s down, 562.5 ms
round trip), a pessimistic stand-in for a phone on a weak link; "wifi" is a phone on home WiFi reaching the device,
held to 2 Mbit/s (the order of what the ESP32-S3's HTTP server sends) and a 40 ms round trip. Figures: the median of
RUNS loads of first contentful paint in ms (the page's first pixels: it is one file, so that is the interface drawn
by the app, not a blank shell).

    python -m bench.bench_web_paint            (or make bench ARGS=web_paint)
"""

import os
import statistics
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
RUNS = 7
PROFILES = {
    "fast3g": {"latency": 562.5, "downloadThroughput": 1.44e6 / 8, "uploadThroughput": 0.675e6 / 8},
    "wifi": {"latency": 40, "downloadThroughput": 2e6 / 8, "uploadThroughput": 2e6 / 8},
}


def measure(url, profile, runs=RUNS):
    """Median first contentful paint (ms) of `runs` cold loads of url."""
    from playwright.sync_api import sync_playwright

    fcp = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            for _ in range(runs):
                ctx = b.new_context(viewport={"width": 360, "height": 740}, locale="de-DE", is_mobile=True)
                page = ctx.new_page()
                cdp = ctx.new_cdp_session(page)
                cdp.send("Network.enable")
                cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
                cdp.send("Network.emulateNetworkConditions", dict(offline=False, **PROFILES[profile]))
                cdp.send("Emulation.setCPUThrottlingRate", {"rate": 4})
                page.goto(url + "/", wait_until="commit")
                page.locator("main h1").wait_for(timeout=60000)
                fcp.append(page.evaluate(
                    "(performance.getEntriesByName('first-contentful-paint')[0] || {startTime: -1}).startTime"))
                ctx.close()
        finally:
            b.close()
    return statistics.median(fcp)


def main():
    from tests.hostproc import HostProcess

    size = os.path.getsize(os.path.join(ROOT, "web", "index.html.gz"))
    h = HostProcess(os.path.join(tempfile.mkdtemp(prefix="paint-"), "drive")).start()
    try:
        out = []
        for name in PROFILES:
            fcp = measure(h.url, name)
            print("%s: first contentful paint %.0f ms (median of %d cold loads, CPU 4x slower, 360 px)"
                  % (name, fcp, RUNS))
            out.append("%s_fcp_ms=%.0f" % (name, fcp))
    finally:
        h.stop()
    return "web_paint: gzip_bytes=%d %s" % (size, " ".join(out))


if __name__ == "__main__":
    import sys

    sys.path[:0] = [ROOT]
    print(main())
