#!/usr/bin/python3
"""Loads a self-contained HTML report in headless Chromium and checks it (issue 13).

The mixtape HTML report must open in a real browser without errors and without
the network, so this script drives Debian's Chromium over the DevTools Protocol
(--remote-debugging-pipe: NUL-terminated JSON on fds 3 and 4) and fails on
  - an uncaught exception, console.error/console.assert, or an error log entry;
  - any request other than the page itself or a data: URL (no external script,
    style, font or image);
  - a --require-plot ID whose <svg id=ID> is missing or draws nothing;
  - with --summary, a DOM metric (data-metric/data-value) that differs from the
    summary of the `mixtape train --log` JSON lines it was made from.
It prints the DOM it read as a `dom: {...}` JSON line.
Exit status: 0 pass, 1 fail, 77 skipped (Chromium is not installed).

usage: browser_check.py PAGE.html [--summary METRICS.jsonl] [--require-plot ID ...] [--timeout S]
"""
import argparse, fcntl, json, math, os, pathlib, select, shutil, signal, subprocess, sys, tempfile, time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions"]

# Returns the plots (svg ids and how many shapes each draws) and the metrics of the page.
DOM_JS = """(() => {
  const shapes = {};
  for (const s of document.querySelectorAll('svg[id]'))
    shapes[s.id] = s.querySelectorAll('path, polyline, rect, circle').length;
  const metrics = [...document.querySelectorAll('[data-metric]')].map(e => {
    const r = e.closest('[data-run]');
    return {run: r ? r.getAttribute('data-run') : '', metric: e.getAttribute('data-metric'),
            value: e.hasAttribute('data-value') ? e.getAttribute('data-value') : e.textContent.trim()};
  });
  return {svgs: Object.keys(shapes), shapes: shapes, metrics: metrics};
})()"""

# summary key -> (how to compare, relative tolerance, absolute tolerance)
CHECKS = {"steps": ("exact", 0, 0), "skipped_steps": ("exact", 0, 0), "final_loss": ("close", 1e-6, 1e-9),
          "test_accuracy": ("close", 1e-6, 0), "validation_loss": ("close", 1e-6, 0),
          "peak_memory_bytes": ("exact", 0, 0), "final_scale": ("close", 1e-6, 0)}


class Browser:
    """Chromium with a CDP connection over a pair of pipes."""

    def __init__(self, exe, timeout):
        self.timeout, self.next_id, self.buf, self.events = timeout, 0, b"", []
        self.profile = tempfile.mkdtemp(prefix="browser-check-")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def child_fds():  # runs in the child: its fd 3 reads our commands, fd 4 writes its replies
            r, w = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome_r, from_chrome_w))
            os.dup2(r, 3)
            os.dup2(w, 4)  # dup2 leaves 3 and 4 inheritable; Python's own fds are close-on-exec
            os.close(r)
            os.close(w)

        self.log = os.path.join(self.profile, "stderr.log")
        try:
            with open(self.log, "wb") as log:
                self.proc = subprocess.Popen([exe, *FLAGS, "--user-data-dir=" + self.profile,
                                              "--remote-debugging-pipe", "about:blank"],
                                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=False,
                                             preexec_fn=child_fds, start_new_session=True)
        except BaseException:
            shutil.rmtree(self.profile, ignore_errors=True)
            raise
        finally:
            os.close(to_chrome_r)
            os.close(from_chrome_w)

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # Chromium and the helpers it started
        except ProcessLookupError:
            pass
        self.proc.wait()
        for fd in (self.to_chrome, self.from_chrome):
            os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)

    def log_tail(self, lines=10):
        with open(self.log, errors="replace") as f:
            return "".join([l for l in f if "dbus" not in l][-lines:])  # no D-Bus here: noise

    def _read(self, deadline):
        """The next message from Chromium; raises TimeoutError after the deadline."""
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_chrome], [], [], left)[0]:
                raise TimeoutError()
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe (crashed?)")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, session=None, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError("Chromium has exited (status %s)" % self.proc.poll()) from None
        seconds = max(self.timeout, 30)  # starting takes seconds on a busy machine
        deadline = time.monotonic() + seconds
        while True:
            try:
                reply = self._read(deadline)
            except TimeoutError:
                raise TimeoutError("Chromium did not answer %s in %g s" % (method, seconds)) from None
            if reply.get("id") != self.next_id:
                self.events.append(reply)
            elif "error" in reply:
                raise RuntimeError("%s failed: %s" % (method, reply["error"].get("message")))
            else:
                return reply.get("result", {})

    def wait_for(self, method, seconds):
        """Collects events until `method` arrives (True) or `seconds` pass (False)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                self.events.append(self._read(deadline))
                if self.events[-1].get("method") == method:
                    return True
        except TimeoutError:
            return False


def page_failures(events, page_url):
    """The errors and the requests for anything but the page itself among the CDP events."""
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            text = (d.get("exception", {}).get("description") or d.get("text", "")).split("\n")[0]
            out.append("uncaught exception: %s (%s:%s)" % (text, d.get("url", ""), d.get("lineNumber", 0) + 1))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            out.append("console.%s: %s" % (p["type"], text))
        elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
            out.append("log error: %s %s" % (p["entry"].get("text"), p["entry"].get("url", "")))
        elif m == "Network.requestWillBeSent":
            url = p["request"]["url"]
            if url.split("#")[0] != page_url and not url.startswith("data:"):
                out.append("the page is not self-contained: it requests %s" % url)
    return out


def expected_metrics(path):
    """The values of CHECKS found in a `mixtape train --log` file, and the run's precision."""
    steps, summary = [], None
    with open(path) as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                if "summary" in rec:
                    summary = rec["summary"]
                elif "step" in rec and "loss" in rec:
                    steps.append(rec)
    if summary is None:
        raise RuntimeError("%s has no summary line" % path)
    want = {k: summary[k] for k in CHECKS if k in summary}
    if steps:
        want["final_loss"] = steps[-1]["loss"]
    return want, summary.get("config", {}).get("precision")


def matches(kind, rel, abs_tol, got, want):
    got = float(got)
    want = math.nan if want is None else float(want)  # JSON writes a NaN as null
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    return got == want if kind == "exact" else math.isclose(got, want, rel_tol=rel, abs_tol=abs_tol)


def compare_summary(dom, path):
    want, precision = expected_metrics(path)
    runs = list(dict.fromkeys(m["run"] for m in dom["metrics"]))
    run = precision if precision in runs else (runs[0] if runs else "")
    print("summary: comparing run %r of the page with %s" % (run, path))
    failures = []
    for key, value in want.items():
        shown = [m["value"] for m in dom["metrics"] if m["run"] == run and m["metric"] == key]
        if not shown:
            failures.append("metric %s (expected %s) is not on the page for run %r" % (key, value, run))
        for got in shown:
            try:
                ok = matches(*CHECKS[key], got, value)
            except ValueError:
                ok = False
            print("  %-18s page %-24s log %-24s %s" % (key, got, value, "ok" if ok else "MISMATCH"))
            if not ok:
                failures.append("metric %s: the page shows %s, the log says %s" % (key, got, value))
    return failures


def check(args, exe):
    page = pathlib.Path(args.page).resolve()
    if not page.is_file():
        return ["no such page: %s" % args.page]
    url = page.as_uri()
    browser = Browser(exe, args.timeout)
    try:
        for _ in range(50):  # the about:blank tab may take a moment to appear
            targets = [t for t in browser.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]
            if targets:
                break
            time.sleep(0.1)
        else:
            targets = [browser.call("Target.createTarget", url="about:blank")]
        session = browser.call("Target.attachToTarget", targetId=targets[0]["targetId"], flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.call(domain + ".enable", session)
        nav = browser.call("Page.navigate", session, url=url)
        if nav.get("errorText"):
            return ["cannot open %s: %s" % (url, nav["errorText"])]
        if not browser.wait_for("Page.loadEventFired", args.timeout):
            return ["the page did not finish loading in %g s" % args.timeout] + page_failures(browser.events, url)
        browser.wait_for("", 0.3)  # collects 0.3 s more of events: late errors and requests
        result = browser.call("Runtime.evaluate", session, expression=DOM_JS, returnByValue=True)
        failures = page_failures(browser.events, url)
    except BaseException:
        print("Chromium's last output:\n" + browser.log_tail(), end="")
        raise
    finally:
        browser.close()
    if "exceptionDetails" in result:
        return failures + ["reading the DOM failed: %s" % result["exceptionDetails"].get("text")]
    dom = result["result"]["value"]
    print("dom: " + json.dumps(dom))
    for plot in args.require_plot:
        if plot not in dom["shapes"]:
            failures.append("plot %s: there is no <svg id=%r>" % (plot, plot))
        elif dom["shapes"][plot] == 0:
            failures.append("plot %s: the svg draws no path, polyline, rect or circle" % plot)
    if args.summary:
        failures += compare_summary(dom, args.summary)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("page")
    ap.add_argument("--summary", help="the `mixtape train --log` JSON lines the page shows")
    ap.add_argument("--require-plot", action="append", default=[], metavar="ID", help="an svg id that must draw")
    ap.add_argument("--timeout", type=float, default=30, metavar="S", help="seconds to wait for the page (30)")
    args = ap.parse_args()
    exe = os.environ.get("MT_CHROMIUM", "/usr/bin/chromium")
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        print("browser test skipped: chromium is not installed (tools/scripts/setup.sh --browser installs it)")
        return 77
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that Chromium is killed on the way out
    start = time.monotonic()
    try:
        failures = check(args, exe)
    except (RuntimeError, TimeoutError, OSError, ValueError, KeyError) as e:
        failures = ["%s: %s" % (type(e).__name__, e)]
    for f in failures:
        print("FAIL: " + f)
    print("%s: %s (%.1f s)" % ("FAIL" if failures else "PASS", args.page, time.monotonic() - start))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
